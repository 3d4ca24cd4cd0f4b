package adm

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
)

// TestUsageErrorsOnStderr (issue 26 finding 5): for every etcdadm command,
// an unknown flag, a required flag left out and a value its flag cannot
// parse exit 2 with one line on stderr naming the command's --help, and
// leave stdout empty ('etcdadm render ... > x.ign' left 6,653 bytes of help
// in x.ign).
func TestUsageErrorsOnStderr(t *testing.T) {
	for _, k := range []string{"ETCDADM_STORE", "ETCDADM_ENDPOINTS"} {
		t.Setenv(k, "")
		os.Unsetenv(k) // set but empty counts as set
	}
	var leaves []*cli.Command
	paths := map[*cli.Command][]string{}
	var walk func(path []string, cs []*cli.Command)
	walk = func(path []string, cs []*cli.Command) {
		for _, c := range cs {
			p := append(append([]string{}, path...), c.Name)
			if len(c.Subcommands) > 0 {
				walk(p, c.Subcommands)
				continue
			}
			leaves = append(leaves, c)
			paths[c] = p
		}
	}
	walk(nil, App(&bytes.Buffer{}).Commands)
	if len(leaves) < 30 {
		t.Fatalf("found %d commands; the walk is broken", len(leaves))
	}
	cases := 0
	for _, c := range leaves {
		path := paths[c]
		var tries [][]string
		tries = append(tries, append(append([]string{}, path...), "--no-such-flag"))
		var required, typed []string
		for _, f := range c.Flags {
			if rf, ok := f.(cli.RequiredFlag); ok && rf.IsRequired() {
				required = append(required, f.Names()[0])
			}
			switch f.(type) {
			case *cli.IntFlag, *cli.DurationFlag, *cli.UintFlag, *cli.Int64Flag:
				typed = append(typed, f.Names()[0])
			}
		}
		if len(required) > 0 {
			tries = append(tries, path)
		}
		if len(typed) > 0 {
			tries = append(tries, append(append([]string{}, path...), "--"+typed[0], "not-a-number"))
		}
		for _, args := range tries {
			cases++
			var stdout, stderr bytes.Buffer
			app := App(&stdout)
			app.ErrWriter = &stderr
			code := cliflags.Run(app, Interspersed(app, append([]string{"etcdadm"}, args...)), nil)
			name := strings.Join(args, " ")
			if code != cliflags.ExitUsage {
				t.Errorf("etcdadm %s: exit %d, want %d\nstderr: %s", name, code, cliflags.ExitUsage, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("etcdadm %s: %d bytes on stdout, want none:\n%.300s", name, stdout.Len(), stdout.String())
			}
			hint := "(see 'etcdadm " + strings.Join(path, " ") + " --help')"
			if got := strings.TrimSpace(stderr.String()); strings.Count(got, "\n") != 0 || !strings.HasSuffix(got, hint) {
				t.Errorf("etcdadm %s: stderr %q, want one line ending %s", name, got, hint)
			}
		}
	}
	t.Logf("%d usage errors of %d commands", cases, len(leaves))
}
