//go:build linux && demo

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// TestDemo is `make demo`: a 3-master cluster booted from one Ignition
// config, backed up once, left running until `make demo-down` removes
// $ETCDADM_DEMO_DIR/running. Built only with -tags demo.
func TestDemo(t *testing.T) {
	dir := os.Getenv("ETCDADM_DEMO_DIR")
	if dir == "" {
		t.Fatal("ETCDADM_DEMO_DIR is not set: run make demo")
	}
	c := newCluster(t, 3)
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	hosts := map[string]*harness.Host{}
	start := time.Now()
	for _, n := range names {
		hosts[n] = c.boot(t, n)
	}
	a := hosts["etcd-a"]
	waitHealthy(t, a, names, 3*time.Minute)
	healthy := time.Since(start)
	for _, n := range names {
		assertUnitsWork(t, hosts[n])
	}
	for _, n := range names { // the timer's job, run now: the leader uploads
		hosts[n].MustExec(t, "systemctl", "start", "etcd-snapshot-uploader.service")
	}
	status := a.MustExec(t, "/opt/etcdadm/bin/etcdadm", "status")
	backups := a.MustExec(t, "/opt/etcdadm/bin/etcdadm", "backup", "list")

	var b strings.Builder
	fmt.Fprintf(&b, "3 masters booted from one Ignition config; healthy %v after boot began.\n\n", healthy.Round(100*time.Millisecond))
	fmt.Fprintf(&b, "$ etcdadm status    (on etcd-a)\n%s\n$ etcdadm backup list\n%s\n", status, backups)
	fmt.Fprintf(&b, "Look around (as root, from this machine):\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  enter %s (%s):  nsenter -t %d -a /bin/bash\n", n, hosts[n].IP(), hosts[n].PID())
	}
	fmt.Fprintf(&b, `  then, inside a host:
    systemctl status etcd etcd-member-join etcd-snapshot-uploader.timer
    journalctl -u etcd-member-join -u etcd-snapshot-uploader
    etcdadm status; etcdadm backup list; etcdadm backup verify latest --restore-test
  the Ignition config they booted from: %s
Remove everything: make demo-down
`, filepath.Join(dir, "master.ign"))
	os.WriteFile(filepath.Join(dir, "master.ign"), c.ign, 0o600)
	if err := os.WriteFile(filepath.Join(dir, "howto.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	running := filepath.Join(dir, "running")
	os.WriteFile(running, nil, 0o644)
	os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
	for deadline := time.Now().Add(24 * time.Hour); time.Now().Before(deadline); time.Sleep(time.Second) {
		if _, err := os.Stat(running); err != nil {
			return // make demo-down: the harness tears everything down
		}
	}
}
