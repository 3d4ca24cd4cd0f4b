package cliflags

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

var errStopped = errors.New("stopped")

func TestRun(t *testing.T) {
	_, childErr := exec.Command("sh", "-c", "exit 7").Output()
	if childErr == nil {
		t.Fatal("sh -c 'exit 7' succeeded")
	}
	fallback := func(err error) int {
		if errors.Is(err, errStopped) {
			return 3
		}
		return 1
	}
	for _, tc := range []struct {
		name     string
		args     []string
		err      error
		fallback func(error) int
		code     int
		stderr   string
	}{
		{"success", nil, nil, nil, 0, ""},
		{"cli.Exit keeps its code", nil, cli.Exit("bad flag value", 2), nil, 2, "app: bad flag value\n"},
		{"cli.Exit with no message prints nothing", nil, cli.Exit("", 4), nil, 4, ""},
		{"wrapped cli.Exit keeps its code", nil, fmt.Errorf("member join: %w", cli.Exit("no --name", 2)), Always(5), 2, "app: member join: no --name\n"},
		{"plain error without fallback", nil, errors.New("boom"), nil, 1, "app: boom\n"},
		{"fallback picks the code", nil, fmt.Errorf("switch: %w", errStopped), fallback, 3, "app: switch: stopped\n"},
		{"a child's exit code is not ours", nil, fmt.Errorf("etcdutl: %w", childErr), nil, 1, "app: etcdutl: exit status 7\n"},
		{"unknown flag is a usage error", []string{"--nope"}, nil, Always(5), ExitUsage, "app: flag provided but not defined: -nope (see 'app --help')\n"},
		{"so without a fallback", []string{"--nope"}, nil, nil, ExitUsage, "app: flag provided but not defined: -nope (see 'app --help')\n"},
		{"unknown command", []string{"nope"}, nil, nil, ExitUsage, "app: unknown command 'nope' (see 'app --help')\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			app := &cli.App{
				Name:      "app",
				Writer:    &bytes.Buffer{},
				ErrWriter: &stderr,
				Action:    func(*cli.Context) error { return tc.err },
			}
			if len(tc.args) > 0 && !strings.HasPrefix(tc.args[0], "-") {
				app.Action = nil
				app.Commands = []*cli.Command{{Name: "real", Action: func(*cli.Context) error { return nil }}}
			}
			code := Run(app, append([]string{"app"}, tc.args...), tc.fallback)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			// urfave/cli prints usage for a bad flag; only the last line is ours.
			if got := stderr.String(); !strings.HasSuffix(got, tc.stderr) || (tc.stderr == "" && got != "") {
				t.Errorf("stderr %q, want %q once", got, tc.stderr)
			}
			if strings.Count(stderr.String(), "app: ") > 1 {
				t.Errorf("error printed more than once: %q", stderr.String())
			}
		})
	}
}

// A required flag left out is a one-line hint on stderr, for the app and
// for a subcommand, and nothing on stdout (urfave/cli printed the help
// there); the command's own Before still runs once the flags are set.
func TestRequiredFlagQuiet(t *testing.T) {
	for _, args := range [][]string{{"app"}, {"app", "sub"}, {"app", "--top", "x", "sub", "--inner", "y"}} {
		var stdout, stderr bytes.Buffer
		before := 0
		app := &cli.App{
			Name: "app", Writer: &stdout, ErrWriter: &stderr,
			Flags:  []cli.Flag{&cli.StringFlag{Name: "top", Required: true}},
			Action: func(*cli.Context) error { return nil },
			Commands: []*cli.Command{{
				Name: "sub", Flags: []cli.Flag{&cli.StringFlag{Name: "inner", Required: true}},
				Before: func(*cli.Context) error { before++; return nil },
				Action: func(*cli.Context) error { return nil },
			}},
		}
		code := Run(app, args, nil)
		ok := len(args) == 6
		if ok && (code != 0 || before != 1) || !ok && code != ExitUsage {
			t.Errorf("%q: exit %d (Before ran %d times); stderr %q", args, code, before, stderr.String())
		}
		if stdout.Len() != 0 {
			t.Errorf("%q: stdout %q, want nothing", args, stdout.String())
		}
		if !ok && (!strings.Contains(stderr.String(), "not set (see 'app") || strings.Count(stderr.String(), "\n") != 1) {
			t.Errorf("%q: stderr %q, want one line with the hint", args, stderr.String())
		}
	}
}

// Issue 26 finding 7: every binary run through Run answers --version with
// the build's version on stdout, and a VersionCommand prints it alone.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"app", "--version"}, {"app", "version"}} {
		var stdout, stderr bytes.Buffer
		app := &cli.App{Name: "app", Writer: &stdout, ErrWriter: &stderr,
			Action: func(*cli.Context) error { return errors.New("the action ran") }, Commands: []*cli.Command{VersionCommand()}}
		if code := Run(app, args, nil); code != 0 || stderr.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
		want := Version() + "\n"
		if args[1] == "--version" {
			want = "app version " + want
		}
		if stdout.String() != want || !strings.HasPrefix(Version(), "0.0.0-") {
			t.Errorf("%q: stdout %q, want %q", args, stdout.String(), want)
		}
	}
}
