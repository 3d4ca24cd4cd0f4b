package adm

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/units"
)

// TestTimerIntervalsQuoted (issue 26 finding 6): what the docs and the
// messages say about how often a timer runs is what its unit says
// (rotate-ca said "within 2 minutes" of a 5-minute timer; operations.md
// "in 5 min" of a 15-minute one).
func TestTimerIntervalsQuoted(t *testing.T) {
	d, err := units.Interval("etcd-version-switcher.timer")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("within %d minutes", int(d.Minutes())); !strings.Contains(switchersAct(), want) {
		t.Errorf("rotate-ca says %q, want %q", switchersAct(), want)
	}
	// A table row "| `X.timer` | N min |" and "`X.timer` runs it again in N min".
	quoted := []*regexp.Regexp{
		regexp.MustCompile("\\| `(etcd-[a-z-]+\\.timer)` \\| ([0-9]+) min \\|"),
		regexp.MustCompile("`(etcd-[a-z-]+\\.timer)` runs it again in ([0-9]+) min"),
	}
	found := 0
	for _, f := range []string{"../../docs/operations.md", "../../docs/units.md", "../../README.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range quoted {
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				found++
				n, _ := strconv.Atoi(m[2])
				got, err := units.Interval(m[1])
				if err != nil {
					t.Errorf("%s: %s: %v", f, m[0], err)
					continue
				}
				if time.Duration(n)*time.Minute != got {
					t.Errorf("%s: %q, but the unit repeats every %s", f, m[0], got)
				}
			}
		}
	}
	if found < 5 {
		t.Errorf("found %d quoted timer intervals; the patterns are broken", found)
	}
}
