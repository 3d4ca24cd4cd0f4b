package integration

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
	"github.com/etcdadm/etcdadm-immutable/internal/service"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestRolloutUpDownKeepsWritesAndWatch: 3.5 → 3.6 → 3.7 → 3.6 → 3.5 on
// three loopback members, each step by the switchers alone, with a writer
// and a watch opened before the first step running throughout.
func TestRolloutUpDownKeepsWritesAndWatch(t *testing.T) {
	all := testenv.EtcdVersions()
	st := newCluster(t, 3, all[0])
	hosts := newHosts(t, st, all[0], all...)
	// An operator's tuning in its 3.5 spelling: 3.7 refuses every
	// ETCD_EXPERIMENTAL_* setting, so the switcher must translate it.
	for _, h := range hosts {
		f := filepath.Join(h.Cfg.Root, member.SettingsFile)
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, []byte("ETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES=6000\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	joinAll(t, hosts)
	cli := clientFor(t, hosts[0], hosts...)
	w := startWriter(cli)
	wa := startWatch(t, cli)
	for _, to := range []string{all[1], all[2], all[1], all[0]} {
		start := time.Now()
		if _, err := rollout.Declare(ctxT(t), st, etcdversion.MustParse(to), false, time.Now()); err != nil {
			t.Fatalf("declare %s: %v", to, err)
		}
		for i, err := range runSwitchers(t, hosts) {
			if err != nil {
				t.Fatalf("%s: switcher: %v", hosts[i].Name, err)
			}
		}
		assertVersions(t, cli, hosts, to)
		rec, _, _ := rollout.Load(ctxT(t), st)
		if rec.State != rollout.Done || len(rec.Backups) == 0 {
			t.Fatalf("rollout to %s: record %+v", to, rec)
		}
		t.Logf("rolled to %s in %v (%d writes so far)", to, time.Since(start).Round(time.Millisecond), w.count())
		env, err := os.ReadFile(filepath.Join(hosts[0].Cfg.Root, "etc/etcd/etcd.env"))
		// 3.5 knows the experimental name only, 3.7 the plain one only, 3.6
		// both (the plain one is kept on the way down).
		plain, old := "\nETCD_SNAPSHOT_CATCHUP_ENTRIES=6000\n", "\nETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES=6000\n"
		var ok bool
		switch minor := etcdversion.MustParse(to).Minor; {
		case minor <= 5:
			ok = strings.Contains(string(env), old) && !strings.Contains(string(env), plain)
		case minor >= 7:
			ok = strings.Contains(string(env), plain) && !strings.Contains(string(env), old)
		default:
			ok = strings.Contains(string(env), plain) != strings.Contains(string(env), old)
		}
		if err != nil || !ok || strings.Contains(string(env), "ETCD_SNAPSHOT_COUNT") {
			t.Fatalf("etcd.env at %s does not hold the catch-up setting in that version's spelling, once (or kept the snapshot override):\n%s", to, env)
		}
	}
	w.finish(t, cli)
	wa.check(t, w.ackedKeys())
}

// TestRolloutFailedMemberRollsBack: a release whose etcd does not start
// (pushed to the store, fetched and sha256-checked by the switcher) is
// rolled back on the first member; the rollout stops with the member, the
// version and the reason; the cluster stays healthy and writable; abort
// ends the rollout.
func TestRolloutFailedMemberRollsBack(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st := newCluster(t, 3, v)
	hosts := foundAt(t, st, v)
	cli := clientFor(t, hosts[0], hosts...)
	w := startWriter(cli)
	broken := etcdversion.MustParse(v)
	broken.Patch = 99
	pushBroken(t, st, broken)
	if _, err := rollout.Declare(ctxT(t), st, broken, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	errs := runSwitchers(t, hosts)
	for i, err := range errs {
		if !errors.Is(err, rollout.ErrStopped) {
			t.Fatalf("%s: switcher ended with %v, want the rollout stopped", hosts[i].Name, err)
		}
	}
	rec, _, err := rollout.Load(ctxT(t), st)
	if err != nil || rec.State != rollout.Failed || rec.Failed == nil {
		t.Fatalf("record %+v, %v", rec, err)
	}
	if rec.Failed.Member != "etcd-a" && rec.Failed.Member != "etcd-b" || rec.Failed.Version != broken.String() || rec.Failed.Reason == "" {
		t.Fatalf("failure %+v: want a non-leader member, version %s and a reason", rec.Failed, broken)
	}
	assertVersions(t, cli, hosts, v)
	if _, err := rollout.RequestAbort(ctxT(t), st, time.Now()); err != nil {
		t.Fatal(err)
	}
	for i, err := range runSwitchers(t, hosts) {
		if err != nil {
			t.Fatalf("%s: after abort: %v", hosts[i].Name, err)
		}
	}
	rec, _, _ = rollout.Load(ctxT(t), st)
	if rec.State != rollout.Done || rec.Target != v || rec.AbortOf != broken.String() {
		t.Fatalf("after abort: %+v", rec)
	}
	w.finish(t, cli)
}

// TestRolloutKeepsNewMinorOnceClusterMoved: the member switched last
// (the leader at the start) comes up at 3.6, the cluster version moves to
// 3.6, and then it fails its readiness check (its etcd dies). etcd 3.5
// refuses a cluster at 3.6, so the switcher keeps 3.6, marks the rollout
// Failed saying why, and leaves no switch for the next run to repeat;
// once etcd is started again the member serves at 3.6.
func TestRolloutKeepsNewMinorOnceClusterMoved(t *testing.T) {
	from, to := testenv.EtcdVersions()[0], testenv.EtcdVersions()[1]
	st, hosts, cli := clusterReadyFor(t, from, to)
	w := startWriter(cli)
	if _, err := rollout.Declare(ctxT(t), st, etcdversion.MustParse(to), false, time.Now()); err != nil {
		t.Fatal(err)
	}
	var died sync.Map // name → true for the member whose etcd died
	errs := runSwitchersWith(t, hosts, 4*time.Minute, func(h *host) member.Deps {
		d := h.Deps()
		d.Service = &diesLast{Manager: h.Runner, t: t, me: h, hosts: hosts, to: to, cli: cli, died: &died}
		return d
	})
	var last *host
	for _, h := range hosts {
		if _, ok := died.Load(h.Name); ok {
			last = h
		}
	}
	if last == nil {
		t.Fatalf("no member's etcd was made to die after the cluster version moved (errors %v)", errs)
	}
	// The others may have seen every member at the new version in the
	// moment before it died, and ended with the rollout done.
	for i, err := range errs {
		if hosts[i] == last && !errors.Is(err, rollout.ErrStopped) || err != nil && !errors.Is(err, rollout.ErrStopped) {
			t.Fatalf("%s: switcher ended with %v, want the rollout stopped", hosts[i].Name, err)
		}
	}
	rec, _, err := rollout.Load(ctxT(t), st)
	if err != nil || rec.State != rollout.Failed || rec.Failed == nil || rec.Failed.Member != last.Name || rec.Failed.Version != to ||
		!strings.Contains(rec.Failed.Reason, "cluster version is 3.6") || !strings.Contains(rec.Failed.Reason, "kept "+to) {
		t.Fatalf("record %+v (failure %+v), %v: want %s failed at %s, kept because of the cluster version", rec, rec.Failed, err, last.Name, to)
	}
	if _, err := os.Stat(filepath.Join(last.Cfg.Root, "switch.json")); !os.IsNotExist(err) {
		t.Fatalf("%s: switch.json still there (%v): every run would repeat the switch", last.Name, err)
	}
	if target, err := os.Readlink(filepath.Join(last.Cfg.Root, "opt/etcd/current")); err != nil || !strings.Contains(target, to) {
		t.Fatalf("%s: /opt/etcd/current → %q (%v), want %s kept", last.Name, target, err, to)
	}
	// A second run changes nothing: the rollout stays stopped.
	for i, err := range runSwitchers(t, hosts) {
		if !errors.Is(err, rollout.ErrStopped) {
			t.Fatalf("%s: second run ended with %v, want the rollout still stopped", hosts[i].Name, err)
		}
	}
	// The operator starts etcd again: the member serves at the new minor.
	if err := last.Runner.Start(ctxT(t), true); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if s, err := cli.Status(ctxT(t), last.ClientURL()); err == nil && s.Version == to {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%s: not serving at %s a minute after etcd was started again: %v %v", last.Name, to, s, err)
		}
	}
	assertVersions(t, cli, hosts, to)
	w.finish(t, cli)
}

// TestSwitcherWaitsForTheHostLock: while another of our programs holds
// a host's etcd lock (member join restoring, say), the switcher does not
// switch or restart that host's etcd: it says who holds the lock and
// waits; once the lock is free the rollout finishes.
func TestSwitcherWaitsForTheHostLock(t *testing.T) {
	from, to := testenv.EtcdVersions()[0], testenv.EtcdVersions()[1]
	st, hosts, cli := clusterReadyFor(t, from, to)
	busy := hosts[0]
	release, err := localetcd.New(busy.Cfg.Root).Acquire(ctxT(t), "etcd-member-join: restore")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rollout.Declare(ctxT(t), st, etcdversion.MustParse(to), false, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Every switcher runs: the others switch in their turn, and when
	// busy's turn comes (first, or last as the leader) it waits.
	errs := runSwitchersWith(t, hosts, 75*time.Second, func(h *host) member.Deps { return h.Deps() })
	if err := errs[0]; err == nil || !strings.Contains(err.Error(), "busy: etcd-member-join: restore (pid") {
		t.Fatalf("%s's switcher while its host lock is held: %v, want it waiting, naming the holder", busy.Name, err)
	}
	if s, err := cli.Status(ctxT(t), busy.ClientURL()); err != nil || s.Version != from {
		t.Fatalf("%s runs %v (%v) while its host lock was held, want %s untouched", busy.Name, s, err, from)
	}
	release()
	for i, err := range runSwitchers(t, hosts) {
		if err != nil {
			t.Fatalf("%s after the lock was released: %v", hosts[i].Name, err)
		}
	}
	assertVersions(t, cli, hosts, to)
}

// TestRolloutLockSurvivesCertificateReload: the switcher reloads its
// client when a CA rotation reissues its certificates, mid-restart, with
// the rollout lock held. The lock outlives the reload, past its session's
// 30 s lease: another member cannot take it while the holder works.
func TestRolloutLockSurvivesCertificateReload(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st := newCluster(t, 3, v)
	hosts := foundAt(t, st, v)
	s, err := member.Open(ctxT(t), hosts[0].Cfg, hosts[0].Deps())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	held, unlock, err := s.RolloutLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if _, err := s.RefreshCerts(ctxT(t), false); err != nil { // closes the client it held the lock with
		t.Fatal(err)
	}
	time.Sleep(40 * time.Second) // past the lease of a session nobody keeps alive
	if err := held.Err(); err != nil {
		t.Fatalf("the lock's context ended after the reload: %v (%v)", err, context.Cause(held))
	}
	other, err := member.Open(ctxT(t), hosts[1].Cfg, hosts[1].Deps())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(ctxT(t), 3*time.Second)
	defer cancel()
	if _, unlock2, err := other.RolloutLock(ctx); err == nil {
		unlock2()
		t.Fatal("another member took the rollout lock while its holder was still at work")
	}
}

// diesLast starts etcd as the host's runner does; on the start that makes
// its member the last at the new version, it waits for the cluster
// version to move to that minor and then kills etcd, as a bad disk would.
type diesLast struct {
	service.Manager
	t     *testing.T
	me    *host
	hosts []*host
	to    string
	cli   *clientv3.Client
	died  *sync.Map
}

func (d *diesLast) Start(ctx context.Context, restart bool) error {
	if err := d.Manager.Start(ctx, restart); err != nil {
		return err
	}
	if _, ok := d.died.Load(d.me.Name); ok {
		return nil
	}
	minor := etcdversion.MustParse(d.to).MinorString() + ".0"
	var other *host
	for _, h := range d.hosts {
		if h == d.me {
			continue
		}
		if s, err := d.cli.Status(ctx, h.ClientURL()); err != nil || s.Version != d.to {
			return nil // another member is not at the new version: not the last
		}
		other = h
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if cv, err := rollout.ClusterVersion(ctx, tlsOf(d.t, d.me), other.ClientURL()); err == nil && cv == minor {
			d.died.Store(d.me.Name, true)
			return d.Manager.Stop(ctx)
		}
	}
	d.t.Errorf("%s: the cluster version did not become %s within 30 s of the last member starting at %s", d.me.Name, minor, d.to)
	return nil
}

// TestUpgradeRefusalsChangeNothing: every refused plan leaves the store
// byte for byte as it was, and says what to do.
func TestUpgradeRefusalsChangeNothing(t *testing.T) {
	all := testenv.EtcdVersions()
	dir := t.TempDir()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterspec.Seed(ctxT(t), st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: all[2]}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Init(ctxT(t), st, pki.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	hosts := foundAt(t, st, all[2], all...)
	hostState := func() string {
		var b strings.Builder
		for _, h := range hosts {
			for _, d := range []string{"opt/etcd", "etc/etcd"} {
				b.WriteString(hashDir(t, filepath.Join(h.Cfg.Root, d)))
			}
		}
		return b.String()
	}
	for _, tc := range []struct{ args, want []string }{
		{[]string{"upgrade", "--to", all[0]}, []string{"one minor at a time"}},
		{[]string{"upgrade", "--to", "3.8.0"}, []string{"use 3.5.x, 3.6.x or 3.7.x"}},
		{[]string{"upgrade", "--to", "3.7.99"}, []string{"not available", "release push 3.7.99"}},
		{[]string{"spec", "set", "--version", all[0]}, []string{"one minor at a time"}},
		{[]string{"upgrade", "--to", "latest"}, []string{"not a version"}},
		{[]string{"upgrade", "--abort"}, []string{"no rollout to abort"}},
	} {
		before, beforeHosts := hashDir(t, dir), hostState()
		r := runBin(t, nil, "etcdadm", append(tc.args, "--store", "file://"+dir)...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2 (refused):\n%s%s", tc.args, r.code, r.stdout, r.stderr)
		}
		for _, w := range append(tc.want, "Nothing was changed") {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%v: stderr does not say %q:\n%s", tc.args, w, r.stderr)
			}
		}
		if after := hashDir(t, dir); after != before {
			t.Errorf("%v: the store changed", tc.args)
		}
		if hostState() != beforeHosts {
			t.Errorf("%v: a host's binaries or settings changed", tc.args)
		}
	}
	// A running rollout refuses another target until aborted.
	if _, err := rollout.Declare(ctxT(t), st, etcdversion.MustParse(all[1]), false, time.Now()); err != nil {
		t.Fatal(err)
	}
	before := hashDir(t, dir)
	r := runBin(t, nil, "etcdadm", "upgrade", "--to", all[2], "--store", "file://"+dir)
	if r.code != 2 || !strings.Contains(r.stderr, "--abort") || hashDir(t, dir) != before {
		t.Errorf("second target while running: exit %d\n%s", r.code, r.stderr)
	}
}

// TestUpgradeRefusalNamesEveryReason: 'etcdadm upgrade --to 3.7.3' on a
// 3.5 cluster whose hosts can get neither 3.6 nor 3.7 names the skipped
// minor first and the missing 3.7.3 after it, each with its command (it
// named only the missing release, and after 'release push' the operator
// learned about 3.6); pushing both releases then makes the plan.
func TestUpgradeRefusalNamesEveryReason(t *testing.T) {
	all := testenv.EtcdVersions()
	dir := t.TempDir()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterspec.Seed(ctxT(t), st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: all[0]}}, false); err != nil {
		t.Fatal(err)
	}
	storeArg := "--store=file://" + dir
	upgrade := func(wantCode int, want ...string) string {
		t.Helper()
		before := hashDir(t, dir)
		r := runBin(t, nil, "etcdadm", "upgrade", "--to", all[2], storeArg)
		if r.code != wantCode {
			t.Fatalf("upgrade --to %s: exit %d, want %d:\n%s%s", all[2], r.code, wantCode, r.stdout, r.stderr)
		}
		if wantCode != 0 && hashDir(t, dir) != before {
			t.Errorf("a refused upgrade changed the store")
		}
		rest := r.stderr + r.stdout
		for _, w := range want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Fatalf("upgrade --to %s does not say %q after what came before:\n%s%s", all[2], w, r.stdout, r.stderr)
			}
			rest = rest[i+len(w):]
		}
		return r.stderr
	}
	push := func(v string) {
		t.Helper()
		r := runBin(t, nil, "etcdadm", "release", "push", v, "--from", filepath.Dir(testenv.EtcdBin(t, v, "etcd")), storeArg)
		if r.code != 0 {
			t.Fatalf("release push %s: exit %d\n%s%s", v, r.code, r.stdout, r.stderr)
		}
	}
	upgrade(2, "skips minor 3.6", "release push 3.6.N", "etcd "+all[2]+" is not available", "release push "+all[2], "Nothing was changed")
	push(all[2])
	if stderr := upgrade(2, "skips minor 3.6", "release push 3.6.N", "Nothing was changed"); strings.Contains(stderr, "not available") {
		t.Errorf("after pushing %s the refusal still names it:\n%s", all[2], stderr)
	}
	push(all[1])
	upgrade(0, "plan: "+all[0]+" → "+all[1]+" → "+all[2], "recorded")
}

func foundAt(t *testing.T, st store.Store, version string, extra ...string) []*host {
	t.Helper()
	hosts := newHosts(t, st, version, extra...)
	joinAll(t, hosts)
	return hosts
}

// newHosts prepares etcd-a, -b and -c at version, with extra versions baked.
func newHosts(t *testing.T, st store.Store, version string, extra ...string) []*host {
	t.Helper()
	hosts := []*host{newHost(t, st, "etcd-a", version), newHost(t, st, "etcd-b", version), newHost(t, st, "etcd-c", version)}
	for _, h := range hosts {
		h.AddVersions(t, extra...)
	}
	return hosts
}

// joinAll runs every host's member join at once, as hosts booted together.
func joinAll(t *testing.T, hosts []*host) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(hosts))
	for i, h := range hosts {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = h.join(t) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", hosts[i].Name, err)
		}
	}
}

// clusterReadyFor is three members at from whose hosts have to as well.
func clusterReadyFor(t *testing.T, from, to string) (store.Store, []*host, *clientv3.Client) {
	t.Helper()
	st := newCluster(t, 3, from)
	hosts := newHosts(t, st, from, to)
	joinAll(t, hosts)
	return st, hosts, clientFor(t, hosts[0], hosts...)
}

// runSwitchers runs every host's version switcher at once, as their
// timers would, and returns each run's error.
func runSwitchers(t *testing.T, hosts []*host) []error {
	return runSwitchersWith(t, hosts, 4*time.Minute, func(h *host) member.Deps { return h.Deps() })
}

// runSwitchersWith is runSwitchers with each run's timeout and each
// host's dependencies given.
func runSwitchersWith(t *testing.T, hosts []*host, timeout time.Duration, deps func(*host) member.Deps) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := rollout.Config{Member: h.Cfg, Timeout: timeout, HealthTimeout: 20 * time.Second, Poll: 200 * time.Millisecond, StateFile: filepath.Join(h.Cfg.Root, "switch.json")}
			_, errs[i] = rollout.Run(ctx, cfg, rollout.Deps{Deps: deps(h)})
		}()
	}
	wg.Wait()
	return errs
}

func assertVersions(t *testing.T, cli *clientv3.Client, hosts []*host, want string) {
	t.Helper()
	storage := etcdversion.MustParse(want).MinorString() + ".0"
	for _, h := range hosts {
		s, err := cli.Status(ctxT(t), h.ClientURL())
		if err != nil || s.Version != want {
			t.Fatalf("%s: runs %v (err %v), want %s", h.Name, s, err, want)
		}
		// 3.5 reports no storage version; 3.6+ must move with the rollout.
		// A member moves its own at its version monitor's next tick (every
		// 4 s), so a member just restarted (a rollback's) reports the
		// schema its data was written with for a few seconds: it gets
		// five ticks.
		for deadline := time.Now().Add(20 * time.Second); s.StorageVersion != "" && s.StorageVersion != storage; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: storage version %s 20 s after the rollout to %s", h.Name, s.StorageVersion, want)
			}
			time.Sleep(500 * time.Millisecond)
			if s, err = cli.Status(ctxT(t), h.ClientURL()); err != nil {
				t.Fatalf("%s: %v", h.Name, err)
			}
		}
	}
	cv, err := rollout.ClusterVersion(ctxT(t), tlsOf(t, hosts[0]), hosts[0].ClientURL())
	if err != nil || cv != etcdversion.MustParse(want).MinorString()+".0" {
		t.Fatalf("cluster version %q (%v), want %s.0", cv, err, etcdversion.MustParse(want).MinorString())
	}
}

// pushBroken pushes a release whose etcd reports the version but exits
// at once, as a bad build would.
func pushBroken(t *testing.T, st store.Store, v etcdversion.Version) {
	t.Helper()
	dir := t.TempDir()
	for _, p := range etcdbin.Programs() {
		script := fmt.Sprintf("#!/bin/sh\ncase \"$1\" in --version|version) echo \"%s version: %s\"; echo \"etcd Version: %s\"; exit 0;; esac\necho 'bad build' >&2\nexit 1\n", p, v, v)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := (etcdbin.Releases{Store: st}).Push(ctxT(t), v, dir, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// watch is one watch on the writer's keys, opened before the rollout.
type watch struct {
	mu     sync.Mutex
	keys   map[string]bool
	revs   []int64
	errs   []error
	cancel context.CancelFunc
	done   chan struct{}
}

func startWatch(t *testing.T, cli *clientv3.Client) *watch {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	wa := &watch{keys: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	ch := cli.Watch(ctx, "/writer/", clientv3.WithPrefix())
	go func() {
		defer close(wa.done)
		for resp := range ch {
			wa.mu.Lock()
			if err := resp.Err(); err != nil {
				wa.errs = append(wa.errs, err)
			}
			for _, ev := range resp.Events {
				wa.keys[string(ev.Kv.Key)] = true
				wa.revs = append(wa.revs, ev.Kv.ModRevision)
			}
			wa.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-wa.done })
	return wa
}

// check: every acknowledged write arrived, in revision order, once, and
// the watch never failed (no compaction, no cancel).
func (wa *watch) check(t *testing.T, acked []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		wa.mu.Lock()
		missing := 0
		for _, k := range acked {
			if !wa.keys[k] {
				missing++
			}
		}
		revs, errs := wa.revs, wa.errs
		wa.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			if missing > 0 || len(errs) > 0 {
				t.Fatalf("watch: %d of %d acknowledged writes never arrived; errors %v", missing, len(acked), errs)
			}
			for i := 1; i < len(revs); i++ {
				if revs[i] <= revs[i-1] {
					t.Fatalf("watch: revision %d after %d", revs[i], revs[i-1])
				}
			}
			t.Logf("watch: %d events in order, none missing, no error", len(revs))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func hashDir(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			fmt.Fprintf(h, "%s -> %s\n", p, target)
			return err
		}
		b, err := os.ReadFile(p)
		fmt.Fprintf(h, "%s %x\n", p, sha256.Sum256(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func tlsOf(t *testing.T, h *host) *tls.Config {
	t.Helper()
	dir := h.PKIDir()
	c, err := transport.TLSInfo{CertFile: filepath.Join(dir, "client.crt"), KeyFile: filepath.Join(dir, "client.key"), TrustedCAFile: filepath.Join(dir, "ca.crt")}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
