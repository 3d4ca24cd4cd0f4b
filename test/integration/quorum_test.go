package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
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
	// etcd-b is lost with its disk; etcd-c's host is down and comes back
	// after the recovery with its old data.
	b, c := hosts[1], hosts[2]
	for _, h := range hosts[1:] {
		h.Runner.Kill(ctxT(t))
	}
	if err := os.RemoveAll(filepath.Join(b.Cfg.Root, "var/lib/etcd/member")); err != nil {
		t.Fatal(err)
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
	if _, err := cli.Put(ctxT(t), "/registry/after-the-recovery", "new"); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts[1:] { // one at a time, as their timers would
		if acted, err := recovery.ActRecover(ctxT(t), h.Cfg, h.Deps()); err != nil || acted {
			t.Fatalf("%s: recover: acted=%v %v", h.Name, acted, err)
		}
		h.mustJoin(t, member.Join)
	}
	// The host that came back never serves its old data: kept aside, and
	// it holds what the recovered cluster wrote.
	if aside, _ := filepath.Glob(filepath.Join(c.Cfg.Root, "var/lib/etcd/member.before-recover-*")); len(aside) != 1 {
		t.Errorf("%s: its data from before the recovery is not kept aside: %v", c.Name, aside)
	}
	voters, learners, _ := membership(t, cli)
	if len(voters) != 3 || len(learners) != 0 {
		t.Fatalf("after recovery: voters %v learners %v", voters, learners)
	}
	cc := clientFor(t, a, c)
	if gr, err := cc.Get(ctxT(t), "/registry/after-the-recovery", clientv3.WithSerializable()); err != nil || len(gr.Kvs) != 1 {
		t.Errorf("%s does not hold the recovered cluster's writes: %v %v", c.Name, gr, err)
	}
	// A request recorded before 'finished' existed (an older etcdadm), seen
	// by a member that joined after it and has no mark: its data is the
	// recovered cluster's and stays where it is, etcd running.
	rec, err := recovery.LoadRecover(ctxT(t), st)
	if err != nil || rec == nil {
		t.Fatal(rec, err)
	}
	rec.Finished = time.Time{}
	legacy, _ := json.Marshal(rec)
	if _, err := store.PutBytes(ctxT(t), st, recovery.RecoverKey, legacy, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(b.Cfg.Root, "var/lib/etcd/.etcdadm-recovered"))
	if acted, err := recovery.ActRecover(ctxT(t), b.Cfg, b.Deps()); err != nil || acted {
		t.Fatalf("%s on a legacy finished request: acted=%v %v", b.Name, acted, err)
	}
	if active, _ := b.Runner.Active(ctxT(t)); !active {
		t.Fatalf("%s, which joined after the recovery, was stopped by a finished request from an older etcdadm", b.Name)
	}
	if aside, _ := filepath.Glob(filepath.Join(b.Cfg.Root, "var/lib/etcd/member.before-recover-*")); len(aside) != 0 {
		t.Fatalf("%s: the recovered cluster's data was moved aside: %v", b.Name, aside)
	}
	w.finish(t, cli)
}

// TestRestoreLatestAfterQuorumLoss: the other way out of a lost majority.
// Two of three members die with their data; 'etcdadm restore latest'
// brings back a healthy three-member cluster with the backup's data (what
// was written after it is gone, as status warned).
func TestRestoreLatestAfterQuorumLoss(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st, dir, url := seededByCLI(t, v)
	hosts := foundAt(t, st, v)
	cli := clientFor(t, hosts[0], hosts...)
	ctx := ctxT(t)
	if _, err := cli.Put(ctx, "/registry/kept", "in the backup"); err != nil {
		t.Fatal(err)
	}
	backupNow(t, hosts[0])
	if _, err := cli.Put(ctx, "/registry/lost", "after the backup"); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts[1:] {
		h.Runner.Kill(ctx)
		if err := os.RemoveAll(filepath.Join(h.Cfg.Root, "var/lib/etcd/member")); err != nil {
			t.Fatal(err)
		}
	}
	// Two operators ask at once: one command is written, the other told.
	var rs [2]result
	var wg sync.WaitGroup
	for i := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[i] = runBin(t, nil, "etcdadm", "restore", "latest", "--yes", "--store", url)
		}()
	}
	wg.Wait()
	if ok := (rs[0].code == 0) != (rs[1].code == 0); !ok || !strings.Contains(rs[0].stderr+rs[1].stderr, "restore") {
		t.Fatalf("two restores at once: exits %d and %d, want one written and one refused:\n%s%s\n%s%s", rs[0].code, rs[1].code, rs[0].stdout, rs[0].stderr, rs[1].stdout, rs[1].stderr)
	}
	if cmds, _ := filepath.Glob(filepath.Join(dir, "control/*/_command.json")); len(cmds) != 1 {
		t.Fatalf("two restores at once left %d commands in the store: %v", len(cmds), cmds)
	}
	actAll(t, hosts)
	cli2 := clientFor(t, hosts[0], hosts...)
	if voters, learners, _ := membership(t, cli2); len(voters) != 3 || len(learners) != 0 {
		t.Fatalf("after the restore: voters %v learners %v", voters, learners)
	}
	checkValues(t, cli2, map[string]string{"/registry/kept": "in the backup", "/registry/lost": ""})
}

// TestRecoverRefusedWhileAMajorityLives: a recovery is asked for on a
// stale or partial view, and the hosts refuse it, changing nothing:
// the majority came back after the request (the survivor sees their
// leader); the operator's machine reached only one member while all
// three ran (the others' hosts see their leader). A request no host has
// begun can be cancelled, and one past its deadline is not acted on.
func TestRecoverRefusedWhileAMajorityLives(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st, _, url := seededByCLI(t, v)
	hosts := foundAt(t, st, v)
	a, b, c := hosts[0], hosts[1], hosts[2]
	certs := []string{"--cacert", filepath.Join(a.PKIDir(), "ca.crt"), "--cert", filepath.Join(a.PKIDir(), "client.crt"), "--key", filepath.Join(a.PKIDir(), "client.key")}
	cli := clientFor(t, a, hosts...)
	w := startWriter(cli)
	statusSays := func(want string) {
		t.Helper()
		r := runBin(t, nil, "etcdadm", append([]string{"status", "--units=false", "--dial-timeout", "2s", "--store", url, "--endpoints", a.ClientURL()}, certs...)...)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not say %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	untouched := func() {
		t.Helper()
		for _, h := range hosts {
			if aside, _ := filepath.Glob(filepath.Join(h.Cfg.Root, "var/lib/etcd/member.*")); len(aside) != 0 {
				t.Fatalf("%s: data moved aside by a refused recovery: %v", h.Name, aside)
			}
		}
		if voters, _, _ := membership(t, cli); len(voters) != 3 {
			t.Fatalf("voters %v after a refused recovery", voters)
		}
	}

	// 1. The majority comes back after the request.
	for _, h := range []*host{b, c} {
		h.Runner.Kill(ctxT(t))
	}
	// etcd-a knows its leader gone after an election timeout.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if s, err := cli.Status(ctxT(t), a.ClientURL()); err == nil && s.Leader == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("etcd-a still reports a leader 30 s after the majority went: %v %v", s, err)
		}
	}
	recoverArgs := append([]string{"recover", "--from-member", "etcd-a", "--yes", "--store", url}, certs...)
	if r := runBin(t, nil, "etcdadm", recoverArgs...); r.code != 0 {
		t.Fatalf("recover: exit %d %s", r.code, r.stderr)
	}
	for _, h := range []*host{b, c} {
		if err := h.Runner.Start(ctxT(t), false); err != nil {
			t.Fatal(err)
		}
	}
	if acted, err := recovery.ActRecover(ctxT(t), a.Cfg, a.Deps()); err != nil || acted {
		t.Fatalf("etcd-a acted on a recovery while the majority was back: acted=%v %v", acted, err)
	}
	rec, _ := recovery.LoadRecover(ctxT(t), st)
	if rec == nil || rec.State != recovery.Refused || !strings.Contains(rec.Reason, "etcd-a: ") {
		t.Fatalf("request after the majority came back: %+v, want refused by etcd-a", rec)
	}
	untouched()
	statusSays("REFUSED: etcd-a: ")

	// 2. Only the operator's machine lost the majority: it reached etcd-a
	// alone (a VPN, a firewall) while all three ran.
	seen := recovery.Quorum{Need: 2, Answering: 1, Lost: true, Best: "etcd-a", Members: []recovery.Answer{
		{Name: "etcd-a", ClientURL: a.ClientURL(), Answering: true}, {Name: "etcd-b", ClientURL: b.ClientURL()}, {Name: "etcd-c", ClientURL: c.ClientURL()}}}
	if _, err := recovery.RequestRecover(ctxT(t), st, seen, "etcd-a", time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if acted, err := recovery.ActRecover(ctxT(t), b.Cfg, b.Deps()); err != nil || acted {
		t.Fatalf("etcd-b: acted=%v %v", acted, err)
	}
	if rec, _ := recovery.LoadRecover(ctxT(t), st); rec == nil || rec.State != recovery.Refused || !strings.Contains(rec.Reason, "etcd-b: ") || !strings.Contains(rec.Reason, "leader") {
		t.Fatalf("request on the operator's partial view: %+v, want refused by etcd-b, which sees a leader", rec)
	}
	if acted, err := recovery.ActRecover(ctxT(t), a.Cfg, a.Deps()); err != nil || acted {
		t.Fatalf("etcd-a acted on a refused request: acted=%v %v", acted, err)
	}
	untouched()

	// 3. Cancelled before it began, and expired before it began.
	if _, err := recovery.RequestRecover(ctxT(t), st, seen, "etcd-a", time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if r := runBin(t, nil, "etcdadm", "recover", "--cancel", "--store", url); r.code != 0 || !strings.Contains(r.stdout, "withdrawn") {
		t.Fatalf("recover --cancel: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := recovery.RequestRecover(ctxT(t), st, seen, "etcd-a", time.Now(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	statusSays("EXPIRED unbegun")
	for _, h := range hosts {
		if acted, err := recovery.ActRecover(ctxT(t), h.Cfg, h.Deps()); err != nil || acted {
			t.Fatalf("%s acted on an expired request: acted=%v %v", h.Name, acted, err)
		}
	}
	untouched()
	w.finish(t, cli)
}
