package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestRecoverFromOneMember: two of three members are lost with their
// disks; etcdadm status says the majority is lost and names both ways
// out; 'etcdadm recover --from-member' (refused while a majority
// answers) rebuilds a healthy 3-member cluster from the survivor with
// every write it acknowledged before the loss.
func TestRecoverFromOneMember(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st, dir, url := seededByCLI(t, v)
	hosts := foundAt(t, st, v)
	a := hosts[0]
	certs := []string{"--cacert", filepath.Join(a.PKIDir(), "ca.crt"), "--cert", filepath.Join(a.PKIDir(), "client.crt"), "--key", filepath.Join(a.PKIDir(), "client.key")}
	recoverArgs := append([]string{"recover", "--from-member", "etcd-a", "--yes", "--store", url}, certs...)
	before := hashDir(t, dir)
	if r := runBin(t, nil, "etcdadm", recoverArgs...); r.code != 2 || !strings.Contains(r.stderr, "majority") || hashDir(t, dir) != before {
		t.Fatalf("recover while the majority answers: exit %d %s", r.code, r.stderr)
	}
	cli := clientFor(t, a, hosts...)
	w := startWriter(cli)
	for _, h := range hosts[1:] {
		h.Runner.Kill(ctxT(t))
		if err := os.RemoveAll(filepath.Join(h.Cfg.Root, "var/lib/etcd/member")); err != nil {
			t.Fatal(err)
		}
	}
	r := runBin(t, nil, "etcdadm", append([]string{"status", "--units=false", "--dial-timeout", "2s", "--store", url, "--endpoints", a.ClientURL()}, certs...)...)
	for _, want := range []string{"QUORUM LOST: 1 of 3", "etcdadm recover --from-member etcd-a", "etcdadm restore latest"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not say %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	if r := runBin(t, nil, "etcdadm", recoverArgs...); r.code != 0 {
		t.Fatalf("recover: exit %d %s", r.code, r.stderr)
	}
	acted, err := recovery.ActRecover(ctxT(t), a.Cfg, a.Deps())
	if err != nil || !acted {
		t.Fatalf("etcd-a: recover: acted=%v %v", acted, err)
	}
	if aside, _ := filepath.Glob(filepath.Join(a.Cfg.Root, "var/lib/etcd/member.before-recover-*")); len(aside) != 1 {
		t.Errorf("no copy of the survivor's data kept: %v", aside)
	}
	for _, h := range hosts[1:] { // one at a time, as their timers would
		if acted, err := recovery.ActRecover(ctxT(t), h.Cfg, h.Deps()); err != nil || acted {
			t.Fatalf("%s: recover: acted=%v %v", h.Name, acted, err)
		}
		h.mustJoin(t, member.Join)
	}
	voters, learners, _ := membership(t, cli)
	if len(voters) != 3 || len(learners) != 0 {
		t.Fatalf("after recovery: voters %v learners %v", voters, learners)
	}
	w.finish(t, cli)
}

// TestRestoreLatestAfterQuorumLoss: the other way out of a lost majority.
// Two of three members die with their data; 'etcdadm restore latest'
// brings back a healthy three-member cluster with the backup's data (what
// was written after it is gone, as status warned).
func TestRestoreLatestAfterQuorumLoss(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st, _, url := seededByCLI(t, v)
	hosts := foundAt(t, st, v)
	cli := clientFor(t, hosts[0], hosts...)
	ctx := ctxT(t)
	if _, err := cli.Put(ctx, "/registry/kept", "in the backup"); err != nil {
		t.Fatal(err)
	}
	s, err := member.Open(ctx, hosts[0].Cfg, hosts[0].Deps())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Backup(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := cli.Put(ctx, "/registry/lost", "after the backup"); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts[1:] {
		h.Runner.Kill(ctx)
		if err := os.RemoveAll(filepath.Join(h.Cfg.Root, "var/lib/etcd/member")); err != nil {
			t.Fatal(err)
		}
	}
	if r := runBin(t, nil, "etcdadm", "restore", "latest", "--yes", "--store", url); r.code != 0 {
		t.Fatalf("restore latest: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	actAll(t, hosts)
	cli2 := clientFor(t, hosts[0], hosts...)
	if voters, learners, _ := membership(t, cli2); len(voters) != 3 || len(learners) != 0 {
		t.Fatalf("after the restore: voters %v learners %v", voters, learners)
	}
	checkValues(t, cli2, map[string]string{"/registry/kept": "in the backup", "/registry/lost": ""})
}
