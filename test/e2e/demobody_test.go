//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// bootDemo is what `make demo` shows: three masters booted from one
// Ignition config, each member on a pool volume and every member name
// resolving on every host, a kube-apiserver on each, real keys written
// through Kubernetes and etcdctl, and a backup; no unit it enabled failed
// or restarting. It writes dir/howto.txt (what make demo prints) and
// dir/master.ign.
func bootDemo(t *testing.T, dir string) {
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	o := poolOptions(len(names))
	o.kube, o.versions = true, testenv.EtcdVersions()
	start := time.Now()
	c, _, byName := newPoolClusterWith(t, names, o)
	hosts := []*harness.Host{byName["etcd-a"], byName["etcd-b"], byName["etcd-c"]}
	a := hosts[0]
	healthy := time.Since(start)
	for _, from := range hosts {
		for _, to := range names {
			waitResolves(t, from, to, byName[to].IP().String())
		}
	}
	kp := newKubePlane(t, c)
	kp.startAll(t, hosts, memberURLs(names, volSuffix))
	for _, args := range [][]string{{"create", "namespace", "demo"}, {"create", "configmap", "hello", "-n", "demo", "--from-literal=greeting=hello"}} {
		if out, err := kubectl(t, a, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	a.MustExec(t, append(strings.Fields(etcdctl), "put", "/demo/hello", "world")...)
	for _, h := range hosts { // the timer's job, run now: the leader uploads
		h.MustExec(t, "systemctl", "start", "etcd-snapshot-uploader.service")
	}
	for _, h := range hosts {
		assertUnitsWork(t, h)
	}
	status := a.MustExec(t, "/opt/etcdadm/bin/etcdadm", "status")
	backups := a.MustExec(t, "/opt/etcdadm/bin/etcdadm", "backup", "list")

	var b strings.Builder
	fmt.Fprintf(&b, "3 masters booted from one Ignition config; healthy %v after boot began.\n", healthy.Round(100*time.Millisecond))
	fmt.Fprintf(&b, "Each member lives on a pool volume; every member name (etcd-a.%s, ...) resolves on every host.\n", volSuffix)
	fmt.Fprintf(&b, "A kube-apiserver runs on each master, on etcd.\n\n")
	fmt.Fprintf(&b, "$ etcdadm status    (on %s)\n%s\n$ etcdadm backup list\n%s\n", a.Name(), status, backups)
	fmt.Fprintf(&b, "Kubernetes, from this machine (as root):\n  nsenter -t %d -a %s get namespaces\n\n", a.PID(), kubectlOn)
	fmt.Fprintf(&b, "Look around (as root, from this machine):\n")
	for _, h := range hosts {
		fmt.Fprintf(&b, "  enter %s (member %s, %s):  nsenter -t %d -a /bin/bash\n", h.Name(), identity(t, h), h.IP(), h.PID())
	}
	fmt.Fprintf(&b, `  then, inside a host:
    systemctl status etcd etcd-member-join etcd-snapshot-uploader.timer kube-apiserver
    journalctl -u etcd-member-join -u etcd-volume-attach -u etcd-dns-registrar
    etcdadm status; etcdadm backup list; etcdadm backup verify latest --restore-test
    getent hosts etcd-b.%s
  the Ignition config they booted from: %s
Remove everything: make demo-down
`, volSuffix, filepath.Join(dir, "master.ign"))
	os.WriteFile(filepath.Join(dir, "master.ign"), c.ign, 0o600)
	if err := os.WriteFile(filepath.Join(dir, "howto.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMakeDemo runs `make demo`'s script as a user would, then the kubectl
// line it prints, exactly as printed, and `make demo-down`.
func TestMakeDemo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	top, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	script := func(arg string, timeout time.Duration) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(top, "test/demo/cluster.sh"), arg)
		cmd.Dir, cmd.Env = top, append(os.Environ(), "DEMO_DIR="+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := script("down", 5*time.Minute); err != nil || !strings.Contains(out, "removed everything") {
			t.Errorf("make demo-down: %v\n%s", err, out)
		}
	})
	out, err := script("up", 15*time.Minute)
	if err != nil {
		t.Fatalf("make demo: %v\n%s", err, out)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "kubectl") && strings.HasSuffix(l, "get namespaces") {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatalf("make demo printed no kubectl line:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := exec.CommandContext(ctx, "bash", "-c", line).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, got)
	}
	for _, ns := range []string{"default", "kube-system", "demo"} {
		if !strings.Contains(string(got), "\n"+ns+" ") {
			t.Errorf("%s lists no namespace %s:\n%s", line, ns, got)
		}
	}
	t.Logf("make demo printed:\n%s\n$ %s\n%s", out, line, got)
}
