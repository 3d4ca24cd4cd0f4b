// Package deps pins what each binary links (tailscale's TestDeps): a
// single-purpose binary carries only what its job needs, so an import
// that drags etcd's server into the DNS registrar, or D-Bus into the
// uploader, fails here rather than growing every host's image.
package deps

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
)

// rules: the import path prefixes each binary must not link, and why.
func rules() map[string]map[string]string {
	server := "go.etcd.io/etcd/server/"
	return map[string]map[string]string{
		"etcd-dns-registrar": {
			"go.etcd.io/etcd/":            "it publishes names; it never talks to etcd",
			"github.com/godbus/dbus/":     "it is a notify service; it starts nothing over D-Bus",
			"github.com/coreos/ignition/": "render is etcdadm's",
		},
		"etcd-snapshot-uploader": {
			"github.com/godbus/dbus/":     "it runs as the etcd user and controls no unit",
			server:                        "it is a client of etcd",
			"github.com/coreos/ignition/": "render is etcdadm's",
			"github.com/miekg/dns":        "DNS is the registrar's",
		},
		"etcd-volume-attach": {
			server:                        "it is a client of etcd (claims are also held there once etcd runs)",
			"github.com/coreos/ignition/": "render is etcdadm's",
			"github.com/miekg/dns":        "DNS is the registrar's",
		},
		// etcd-member-join restores a cluster from a backup with etcdutl's
		// library, which is etcd server code: it may link the server.
		"etcd-member-join": {
			"github.com/coreos/ignition/": "render is etcdadm's",
			"github.com/miekg/dns":        "DNS is the registrar's",
		},
		"etcd-version-switcher": {
			server:                        "it is a client of etcd",
			"github.com/coreos/ignition/": "render is etcdadm's",
			"github.com/miekg/dns":        "DNS is the registrar's",
		},
	}
}

func TestDeps(t *testing.T) {
	for bin, forbidden := range rules() {
		out, err := exec.Command("go", "list", "-deps", "github.com/etcdadm/etcdadm-immutable/cmd/"+bin).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", bin, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("%s: go list found only %v", bin, deps)
		}
		for prefix, why := range forbidden {
			for _, d := range deps {
				if strings.HasPrefix(d, prefix) {
					t.Errorf("%s links %s (%s must stay out: %s)", bin, d, prefix, why)
					break
				}
			}
		}
	}
}

// TestTimeoutsPerBinary: each binary's --timeout has its own variable, so
// one setting in the shared etcdadm.env cannot change three binaries.
func TestTimeoutsPerBinary(t *testing.T) {
	seen := map[string]string{}
	for _, bin := range []string{"etcd-member-join", "etcd-snapshot-uploader", "etcd-volume-attach", "etcd-version-switcher"} {
		out, err := exec.Command("go", "run", "github.com/etcdadm/etcdadm-immutable/cmd/"+bin, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v\n%s", bin, err, out)
		}
		var env string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "--timeout ") {
				if i := strings.Index(line, "[$"); i >= 0 {
					env = strings.TrimSuffix(line[i+2:], "]")
				}
			}
		}
		if env == "" {
			t.Fatalf("%s: --timeout has no environment variable:\n%s", bin, out)
		}
		if other, dup := seen[env]; dup {
			t.Errorf("%s and %s share the timeout variable %s", bin, other, env)
		}
		seen[env] = bin
	}
}

// TestNoCrashPointsShipped: the crash points of the sweep
// (internal/crashpoint) exist only in a build with -tags crashpoints;
// nothing built without it can kill itself at one.
func TestNoCrashPointsShipped(t *testing.T) {
	for _, tc := range []struct {
		tags string
		want bool // every binary but the DNS registrar has points
	}{{"", false}, {"crashpoints", true}} {
		dir := t.TempDir()
		if out, err := exec.Command("go", "build", "-tags", tc.tags, "-o", dir+"/", "github.com/etcdadm/etcdadm-immutable/cmd/...").CombinedOutput(); err != nil {
			t.Fatalf("go build -tags %q: %v\n%s", tc.tags, err, out)
		}
		bins, _ := filepath.Glob(filepath.Join(dir, "*"))
		if len(bins) < 6 {
			t.Fatalf("go build made %v", bins)
		}
		var with []string
		for _, bin := range bins {
			b, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(crashpoint.ArmFile)) {
				with = append(with, filepath.Base(bin))
			}
		}
		// The registrar changes no state of ours: it has no point.
		if tc.want && len(with) != len(bins)-1 || !tc.want && len(with) != 0 {
			t.Errorf("build -tags %q: the binaries that read the crash point file: %v", tc.tags, with)
		}
	}
}
