//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// TestManualInitJoinReset: masters booted from 'etcdadm render --manual'
// (no shared store) are built by hand as the etcdadm proposal describes:
// 'etcdadm init' on one, the printed 'etcdadm join' on two others with the
// CA copied as init says; kube-apiserver's client certificate reads and
// writes; a master that reboots comes back by itself. A second init and a
// join into a cluster without quorum change nothing; 'etcdadm reset' leaves
// a healthy two-member cluster and a blank host that joins again.
func TestManualInitJoinReset(t *testing.T) {
	c := newClusterWith(t, clusterOptions{manual: true})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	var hosts []*harness.Host
	for _, n := range names {
		hosts = append(hosts, c.boot(t, n))
	}
	a, b, cc := hosts[0], hosts[1], hosts[2]
	const adm = "/opt/etcdadm/bin/etcdadm"

	out := a.MustExec(t, adm, "init")
	t.Logf("etcdadm init:\n%s", out)
	var joinCmd []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "etcdadm" && f[1] == "join" {
			joinCmd = append([]string{adm}, f[1:]...)
		}
	}
	if len(joinCmd) == 0 || joinCmd[2] != "https://"+a.IP().String()+":2379" {
		t.Fatalf("etcdadm init printed no join command for %s:\n%s", a.IP(), out)
	}
	copyCA := func(h *harness.Host) {
		t.Helper()
		dir := filepath.Join(h.Root(), "root/etcd-ca")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ca.crt", "ca.key"} {
			b, err := os.ReadFile(filepath.Join(a.Root(), "var/lib/etcdadm/store/etcdadm/pki", f))
			if err != nil {
				t.Fatalf("the CA file init names: %v", err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, h := range []*harness.Host{b, cc} {
		copyCA(h)
		t.Logf("%s: %s", h.Name(), h.MustExec(t, joinCmd...))
	}
	waitHealthy(t, a, names, 2*time.Minute)

	// kube-apiserver's client certificate, from the first master's store.
	a.MustExec(t, adm, "pki", "issue-client", "kube-apiserver-etcd-client", "--kubeadm", "--out-dir", "/etc/kubernetes/pki/etcd", "--store", "file:///var/lib/etcdadm/store")
	ctl := func(h *harness.Host, args ...string) (string, error) {
		t.Helper()
		base := []string{"/opt/etcd/current/etcdctl", "--endpoints", "https://" + a.IP().String() + ":2379,https://" + b.IP().String() + ":2379",
			"--cacert", "/etc/kubernetes/pki/etcd/ca.crt", "--cert", "/etc/kubernetes/pki/etcd/kube-apiserver-etcd-client.crt",
			"--key", "/etc/kubernetes/pki/etcd/kube-apiserver-etcd-client.key", "--command-timeout", "10s"}
		out, _, err := h.Exec(t, t.Context(), append(base, args...)...)
		return out, err
	}
	if _, err := ctl(a, "put", "/registry/pods/default/web", "running"); err != nil {
		t.Fatalf("kube-apiserver's certificate cannot write: %v", err)
	}

	// A master that reboots comes back by itself (member join at boot).
	b.PowerOff(t)
	b.PowerOn(t, c.hostOptions())
	waitHealthy(t, a, names, 2*time.Minute)

	// A second init on a running member changes nothing.
	before := treeDigest(t, a, "etc/etcd", "etc/etcdadm", "var/lib/etcdadm")
	if out := a.MustExec(t, adm, "init"); !strings.Contains(out, "already initialized") {
		t.Fatalf("second init:\n%s", out)
	}
	if treeDigest(t, a, "etc/etcd", "etc/etcdadm", "var/lib/etcdadm") != before {
		t.Fatal("a second init changed the master")
	}

	// reset on etcd-c: two healthy members, a blank host that joins again.
	t.Logf("reset: %s", cc.MustExec(t, adm, "reset"))
	waitHealthy(t, a, names[:2], time.Minute)
	for _, p := range []string{"/var/lib/etcd/member", "/etc/etcd/pki", "/etc/etcd/etcd.env", "/var/lib/etcdadm/store"} {
		if _, err := os.Stat(filepath.Join(cc.Root(), p)); !os.IsNotExist(err) {
			t.Errorf("after the reset %s is still there (%v)", p, err)
		}
		if m, _ := filepath.Glob(filepath.Join(cc.Root(), p+".reset-*")); len(m) != 1 {
			t.Errorf("after the reset %s was not moved aside: %v", p, m)
		}
	}
	if st := strings.TrimSpace(cc.MustExec(t, "sh", "-c", "systemctl is-active etcd.service || true")); st != "inactive" {
		t.Errorf("etcd.service on the reset host: %s", st)
	}
	cc.MustExec(t, joinCmd...)
	waitHealthy(t, a, names, 2*time.Minute)
	// etcd-c's own copy of the data, read locally with its member certificate.
	got := cc.MustExec(t, "/opt/etcd/current/etcdctl", "--endpoints", "https://"+cc.IP().String()+":2379", "--cacert", "/etc/etcd/pki/ca.crt",
		"--cert", "/etc/etcd/pki/client.crt", "--key", "/etc/etcd/pki/client.key", "--consistency", "s", "get", "--print-value-only", "/registry/pods/default/web")
	if strings.TrimSpace(got) != "running" {
		t.Errorf("etcd-c after reset and join has %q for /registry/pods/default/web", got)
	}
	for _, h := range hosts {
		assertUnitsWork(t, h)
	}

	// Two members stopped: a join into a cluster without quorum is refused
	// and changes nothing on the joining host.
	for _, h := range []*harness.Host{b, cc} {
		h.MustExec(t, "systemctl", "stop", "etcd.service")
	}
	d := c.boot(t, "etcd-d")
	copyCA(d)
	before = treeDigest(t, d, "etc/etcd", "etc/etcdadm", "var/lib/etcd", "var/lib/etcdadm")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, errOut, err := d.Exec(t, ctx, joinCmd...)
	if err == nil || !strings.Contains(errOut+out, "Nothing was changed") {
		t.Fatalf("join into a cluster without quorum: %v\n%s%s", err, out, errOut)
	}
	if treeDigest(t, d, "etc/etcd", "etc/etcdadm", "var/lib/etcd", "var/lib/etcdadm") != before {
		t.Fatal("the refused join changed the host")
	}
}

// treeDigest is every path below dirs of h's root, with the files'
// contents: two digests differ when anything there changed.
func treeDigest(t *testing.T, h *harness.Host, dirs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, d := range dirs {
		filepath.WalkDir(filepath.Join(h.Root(), d), func(p string, e os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			b.WriteString(p)
			if e.Type().IsRegular() {
				data, _ := os.ReadFile(p)
				b.Write(data)
			}
			b.WriteByte('\n')
			return nil
		})
	}
	return b.String()
}
