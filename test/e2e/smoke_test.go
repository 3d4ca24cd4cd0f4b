//go:build linux

// Package e2e holds the end-to-end scenarios: real systemd hosts
// (systemd-nspawn containers from test/e2e/harness) provisioned by Ignition.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// smokeConfig is an Ignition config (spec 3.4.0) that writes /etc/e2e-hello
// and enables a oneshot unit that copies it to /run/e2e-unit-ran at boot.
func smokeConfig(host string) []byte {
	return fmt.Appendf(nil, `{
  "ignition": {"version": "3.4.0"},
  "storage": {
    "files": [{
      "path": "/etc/e2e-hello",
      "mode": 420,
      "overwrite": true,
      "contents": {"source": "data:,hello%%20from%%20%s%%0A"}
    }]
  },
  "systemd": {
    "units": [{
      "name": "e2e-hello.service",
      "enabled": true,
      "contents": "[Unit]\nDescription=e2e smoke unit\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/cp /etc/e2e-hello /run/e2e-unit-ran\n\n[Install]\nWantedBy=multi-user.target\n"
    }]
  }
}`, host)
}

// TestSmoke boots two Ignition-provisioned hosts on one network and checks
// what the later scenarios rely on: files and enabled units from Ignition,
// host-to-host traffic, partitions, power-off, and a cleanup that leaves
// nothing behind.
func TestSmoke(t *testing.T) {
	start := time.Now()
	var id string
	t.Run("hosts", func(t *testing.T) {
		n := harness.NewNetwork(t, "10.77.0.0/24")
		id = n.ID()
		hosts := []*harness.Host{
			n.Boot(t, "a", harness.HostOptions{Ignition: smokeConfig("a")}),
			n.Boot(t, "b", harness.HostOptions{Ignition: smokeConfig("b")}),
		}
		for _, h := range hosts {
			t.Logf("boot time of %s: %s", h.Name(), h.BootTime().Round(time.Millisecond))
			want := "hello from " + h.Name() + "\n"
			if got := h.MustExec(t, "cat", "/etc/e2e-hello"); got != want {
				t.Errorf("%s: /etc/e2e-hello = %q, want %q", h.Name(), got, want)
			}
			if got := strings.TrimSpace(h.MustExec(t, "systemctl", "is-enabled", "e2e-hello.service")); got != "enabled" {
				t.Errorf("%s: e2e-hello.service is %q, want enabled", h.Name(), got)
			}
			if got := strings.TrimSpace(h.MustExec(t, "systemctl", "is-active", "e2e-hello.service")); got != "active" {
				t.Errorf("%s: e2e-hello.service is %q, want active", h.Name(), got)
			}
			if got := h.MustExec(t, "cat", "/run/e2e-unit-ran"); got != want {
				t.Errorf("%s: /run/e2e-unit-ran = %q, want %q", h.Name(), got, want)
			}
			if got := strings.TrimSpace(h.MustExec(t, "hostname")); got != h.Name() {
				t.Errorf("hostname of %s is %q", h.Name(), got)
			}
		}
		a, b := hosts[0], hosts[1]
		ping := func(from, to *harness.Host) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, errOut, err := from.Exec(t, ctx, "ping", "-c", "1", "-W", "1", to.IP().String())
			if err != nil {
				return fmt.Errorf("%w: %s%s", err, out, errOut)
			}
			return nil
		}
		if err := ping(a, b); err != nil {
			t.Fatalf("a cannot reach b: %v", err)
		}
		if err := ping(b, a); err != nil {
			t.Fatalf("b cannot reach a: %v", err)
		}

		a.Partition(t, true)
		if err := ping(b, a); err == nil {
			t.Errorf("b reaches a across a partition")
		}
		a.Partition(t, false)
		var err error
		for range 5 { // the port comes back at once; allow for carrier
			if err = ping(b, a); err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("b cannot reach a after the partition healed: %v", err)
		}

		b.PowerOff(t)
		if b.Running() {
			t.Fatalf("b still running after PowerOff")
		}
		if _, _, err := b.Exec(t, context.Background(), "true"); err == nil {
			t.Errorf("Exec on a powered-off host succeeded")
		}
		if err := ping(a, b); err == nil {
			t.Errorf("a still reaches b after b powered off")
		}
	})
	if id == "" {
		t.Fatalf("no network was made")
	}
	left, err := harness.Leftovers(id)
	if err != nil {
		t.Errorf("list leftovers: %v", err)
	}
	if len(left) > 0 {
		t.Errorf("cleanup left behind: %v", left)
	}
	if procs := processesMentioning(t, "e2e-"+id); len(procs) > 0 {
		t.Errorf("cleanup left processes behind: %v", procs)
	}
	t.Logf("smoke test took %s", time.Since(start).Round(time.Millisecond))
}

// processesMentioning lists processes whose command line contains s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	var found []string
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		if cmd := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(cmd, s) {
			found = append(found, filepath.Base(filepath.Dir(f))+": "+cmd)
		}
	}
	return found
}
