package adm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestDocumentedCommands: every etcdadm command line in docs/ and the
// README's code blocks names commands that exist and flags they take, with
// values they accept, so what the operator copies from the documentation
// runs; a command a paragraph names may leave values out.
func TestDocumentedCommands(t *testing.T) {
	// On a master etcdadm.env sets the store; elsewhere the docs export it.
	t.Setenv("ETCDADM_STORE", "file:///docs")
	files := []string{"../../README.md", "../../docs/operations.md", "../../docs/reliability.md", "../../docs/units.md"}
	checked := 0
	for _, f := range files {
		lines, err := documentedCommands(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			checked++
			err := parseOnly(l.args)
			if l.inline && err != nil && partial.MatchString(err.Error()) {
				continue
			}
			if err != nil {
				t.Errorf("%s:%d: %s\n  %v", f, l.line, strings.Join(l.args, " "), err)
			}
		}
	}
	if checked < 40 {
		t.Fatalf("found %d etcdadm command lines in %v; the extraction is broken", checked, files)
	}
}

// inlineCommand is an etcdadm command in a paragraph's code span.
var inlineCommand = regexp.MustCompile("`(etcdadm [^`]+)`")

// partial is what a command named in a paragraph may lack.
var partial = regexp.MustCompile(`^(Required flags? .* not set|invalid value .* for flag|flag needs an argument)`)

type docLine struct {
	line int
	args []string
	// inline: a paragraph names the command (and some flags) without
	// every value it needs.
	inline bool
}

// documentedCommands are the etcdadm command lines in path's fenced code
// blocks (sh blocks, and "$ " lines of the others): a line (joined with
// its backslash continuations) whose first word, after an optional "$ ",
// is etcdadm; a trailing "# comment" dropped.
func documentedCommands(path string) ([]docLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []docLine
	sc := bufio.NewScanner(f)
	inBlock, shell, n, start := false, false, 0, 0
	var cur string
	for sc.Scan() {
		n++
		l := sc.Text()
		if fence, ok := strings.CutPrefix(strings.TrimSpace(l), "```"); ok {
			// Output blocks are plain; commands are in sh blocks.
			inBlock, shell, cur = !inBlock, fence == "sh" || fence == "bash" || fence == "console", ""
			continue
		}
		if !inBlock {
			for _, m := range inlineCommand.FindAllStringSubmatch(l, -1) {
				if words, err := shellWords(m[1]); err == nil {
					out = append(out, docLine{n, words, true})
				}
			}
			continue
		}
		if !shell && !strings.HasPrefix(l, "$ ") {
			continue
		}
		if cur == "" {
			start = n
		}
		cur += strings.TrimSpace(l)
		if strings.HasSuffix(cur, `\`) {
			cur = strings.TrimSuffix(cur, `\`) + " "
			continue
		}
		cmd := strings.TrimPrefix(cur, "$ ")
		cur = ""
		if !strings.HasPrefix(cmd, "etcdadm ") {
			continue
		}
		words, err := shellWords(cmd)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, start, err)
		}
		out = append(out, docLine{start, words, false})
	}
	return out, sc.Err()
}

// shellWords splits s as sh would split a simple command (quotes, no
// expansion), up to a "#" that starts a word or a shell operator.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		case !inWord && (c == '#' || c == '|' || c == ';' || c == '&' || c == '>'):
			return words, nil
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated %c in %q", c, s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i, inWord = i+1+j, true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// parseOnly runs args through etcdadm's command tree with every action
// replaced: unknown commands and flags, and bad flag values, fail.
func parseOnly(args []string) error {
	app := App(io.Discard)
	args = Interspersed(app, args)
	app.ErrWriter = io.Discard
	app.ExitErrHandler = func(*cli.Context, error) {}
	var reached []string
	var stub func(cmds []*cli.Command, path string)
	stub = func(cmds []*cli.Command, path string) {
		for _, c := range cmds {
			name := path + " " + c.Name
			if len(c.Subcommands) > 0 {
				stub(c.Subcommands, name)
				c.Action = func(ctx *cli.Context) error {
					return fmt.Errorf("%s has no subcommand %q", name, ctx.Args().First())
				}
			} else {
				c.Action = func(*cli.Context) error { reached = append(reached, name); return nil }
			}
			c.Before = nil
		}
	}
	stub(app.Commands, "etcdadm")
	app.Action = func(ctx *cli.Context) error { return fmt.Errorf("etcdadm has no command %q", ctx.Args().First()) }
	if err := app.RunContext(context.Background(), args); err != nil {
		return err
	}
	if len(reached) != 1 {
		return errors.New("no command ran (a help flag?)")
	}
	return nil
}
