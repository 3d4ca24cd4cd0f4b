package units

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
)

func TestUnitsParse(t *testing.T) {
	if len(Names()) < 10 {
		t.Fatalf("only %d units embedded: %v", len(Names()), Names())
	}
	for _, name := range Names() {
		b, err := Read(name)
		if err != nil {
			t.Fatal(err)
		}
		opts, err := unit.DeserializeOptions(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sections := map[string]bool{}
		for _, o := range opts {
			sections[o.Section] = true
			if o.Section == "Service" && o.Name == "EnvironmentFile" && strings.Contains(o.Value, "credentials") {
				t.Errorf("%s: credentials must come through LoadCredential=, not an environment file", name)
			}
		}
		switch filepath.Ext(name) {
		case ".service":
			if !sections["Service"] {
				t.Errorf("%s: no [Service] section", name)
			}
		case ".timer":
			if !sections["Timer"] || !sections["Install"] {
				t.Errorf("%s: a timer needs [Timer] and [Install]", name)
			}
		}
	}
	for _, name := range Enabled() {
		if _, err := Read(name); err != nil {
			t.Errorf("enabled unit %s is not embedded", name)
		}
	}
}

// WantedBy reads [Install]: what enabling a unit hooks it to (render
// --binaries sysext starts the units from their WantedBy= targets).
func TestWantedBy(t *testing.T) {
	for name, want := range map[string]string{
		"etcd-member-join.service":  "multi-user.target",
		"etcd-volume-renew.timer":   "timers.target",
		"etcd-wait-healthy.service": "etcd.service",
		"etcd.service":              "",
		"etcd-pki-renew.service":    "",
	} {
		got, err := WantedBy(name)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("WantedBy(%s) = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range append(Enabled(), ManualEnabled()...) {
		if got, _ := WantedBy(name); len(got) == 0 {
			t.Errorf("%s is enabled, yet has no WantedBy=: enabling it does nothing", name)
		}
	}
	if _, err := WantedBy("nope.service"); err == nil {
		t.Error("WantedBy of a unit that is not embedded: no error")
	}
}

// stubRoot copies the units into a temp dir, pointing their /opt paths at
// stub executables there, so systemd-analyze can check them offline.
func stubRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range Names() {
		b, _ := Read(name)
		b = bytes.ReplaceAll(b, []byte("/opt/"), []byte(dir+"/opt/"))
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exes := []string{"opt/etcd/current/etcd"}
	for _, p := range Programs() {
		exes = append(exes, "opt/etcdadm/bin/"+p)
	}
	for _, exe := range exes {
		p := filepath.Join(dir, exe)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func systemdAnalyze(t *testing.T) string {
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: install the systemd package (make components does)")
	}
	return p
}

func TestUnitsVerify(t *testing.T) {
	sa := systemdAnalyze(t)
	dir := stubRoot(t)
	args := []string{"verify"}
	for _, n := range Names() {
		args = append(args, filepath.Join(dir, n))
	}
	out, err := exec.Command(sa, args...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

var exposureRE = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

// TestUnitsHardened: every service at exposure 4.0 or lower.
func TestUnitsHardened(t *testing.T) {
	sa := systemdAnalyze(t)
	dir := stubRoot(t)
	for _, n := range Names() {
		if !strings.HasSuffix(n, ".service") {
			continue
		}
		out, _ := exec.Command(sa, "security", "--offline=true", filepath.Join(dir, n)).CombinedOutput()
		m := exposureRE.FindSubmatch(out)
		if m == nil {
			t.Fatalf("%s: no exposure level in:\n%s", n, out)
		}
		exp, _ := strconv.ParseFloat(string(m[1]), 64)
		if exp > 4.0 {
			t.Errorf("%s: exposure %.1f, want <= 4.0", n, exp)
		}
		t.Logf("%s: exposure %.1f", n, exp)
	}
}

// What the messages and documents say about timers comes from here.
func TestInterval(t *testing.T) {
	for timer, want := range map[string]time.Duration{"etcd-version-switcher.timer": 5 * time.Minute, "etcd-member-join.timer": 15 * time.Minute, "etcd-volume-renew.timer": 40 * time.Second} {
		if got, err := Interval(timer); err != nil || got != want {
			t.Errorf("%s: %v %v, want %v", timer, got, err, want)
		}
	}
	if _, err := Interval("etcd-pki-renew.timer"); err == nil {
		t.Errorf("a calendar timer has no interval")
	}
}
