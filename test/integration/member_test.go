package integration

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

const joinVersion = "3.6.16"

// TestFoundingIsAlwaysOneCluster: three hosts started at once, twenty
// times: always exactly one cluster of three members.
func TestFoundingIsAlwaysOneCluster(t *testing.T) {
	for rep := range 20 {
		st := newCluster(t, 3, joinVersion)
		hosts := []*host{newHost(t, st, "etcd-a", joinVersion), newHost(t, st, "etcd-b", joinVersion), newHost(t, st, "etcd-c", joinVersion)}
		var wg sync.WaitGroup
		results := make([]member.Result, 3)
		errs := make([]error, 3)
		for i, h := range hosts {
			wg.Add(1)
			go func() { defer wg.Done(); results[i], errs[i] = h.join(t) }()
		}
		wg.Wait()
		ids := map[uint64]bool{}
		for i, h := range hosts {
			if errs[i] != nil {
				t.Fatalf("rep %d: %s: %v", rep, h.Name, errs[i])
			}
			voters, learners, id := membership(t, clientFor(t, h, h))
			slices.Sort(voters)
			if !slices.Equal(voters, []string{"etcd-a", "etcd-b", "etcd-c"}) || len(learners) != 0 {
				t.Fatalf("rep %d: %s sees voters %v learners %v (%s)", rep, h.Name, voters, learners, results[i].Action)
			}
			ids[id] = true
		}
		if len(ids) != 1 {
			t.Fatalf("rep %d: %d clusters", rep, len(ids))
		}
		if _, err := st.Stat(ctxT(t), etcdmanager.ClusterCreatedKey); err != nil {
			t.Fatalf("rep %d: cluster not marked created: %v", rep, err)
		}
		for _, h := range hosts {
			h.Runner.Kill(ctxT(t))
		}
	}
}

// TestResizeKeepsEveryAcknowledgedWrite: 1 -> 3 -> 5 -> 3 members with a
// writer running throughout.
func TestResizeKeepsEveryAcknowledgedWrite(t *testing.T) {
	st := newCluster(t, 1, joinVersion)
	var hosts []*host
	for _, n := range []string{"etcd-a", "etcd-b", "etcd-c", "etcd-d", "etcd-e"} {
		hosts = append(hosts, newHost(t, st, n, joinVersion))
	}
	hosts[0].mustJoin(t, member.Found)
	for _, h := range hosts[1:] {
		h.mustJoin(t, member.Standby) // memberCount 1: the cluster is full
	}
	// A standby has no member to ask: its timer runs the whole join.
	if _, ok := member.Settled(ctxT(t), hosts[1].Cfg); ok {
		t.Fatalf("a standby host counts as settled")
	}
	cli := clientFor(t, hosts[0], hosts...)
	w := startWriter(cli)

	grow := func(n int32) {
		t.Helper()
		if _, _, err := clusterspec.SetSpec(ctxT(t), st, n, ""); err != nil {
			t.Fatal(err)
		}
		for _, h := range hosts[1:n] {
			res, err := h.join(t)
			if err != nil {
				t.Fatalf("%s: %v", h.Name, err)
			}
			if res.Action != member.Join && res.Action != member.Rejoin {
				t.Fatalf("%s: %s (%s)", h.Name, res.Action, res.Reason)
			}
		}
		voters, learners, _ := membership(t, cli)
		if len(voters) != int(n) || len(learners) != 0 {
			t.Fatalf("after growing to %d: voters %v learners %v", n, voters, learners)
		}
	}
	grow(3)
	grow(5)
	// The timers' first questions, answered by the host's own member.
	if p, ok := member.Settled(ctxT(t), hosts[3].Cfg); !ok || p.Name != "etcd-d" || p.PeerURL != hosts[3].PeerURL() || p.ClientURL != hosts[3].ClientURL() {
		t.Fatalf("etcd-d, a voting member: settled %v as %+v", ok, p)
	}
	if msg, ok := member.NothingToShrink(ctxT(t), hosts[0].Cfg, st); !ok || msg != "5 voting members, the spec wants 5" {
		t.Fatalf("5 members, spec 5: nothing to shrink %v (%q)", ok, msg)
	}
	if _, _, err := clusterspec.SetSpec(ctxT(t), st, 3, ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := member.NothingToShrink(ctxT(t), hosts[0].Cfg, st); ok {
		t.Fatal("5 members, spec 3: nothing to shrink")
	}
	// While a switcher holds the rollout lock (a member may be mid-restart
	// and look unhealthy), reconcile removes nobody.
	s, err := member.Open(ctxT(t), hosts[4].Cfg, hosts[4].Deps())
	if err != nil {
		t.Fatal(err)
	}
	_, unlockRollout, err := s.RolloutLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if removed := hosts[0].reconcile(t); len(removed) != 0 {
		t.Fatalf("reconcile removed %v while the rollout lock was held", removed)
	}
	unlockRollout()
	s.Close()
	// The surplus are etcd-d and etcd-e; the order depends on health at
	// that moment (a member slow to answer under load goes first).
	removed := hosts[0].reconcile(t)
	slices.Sort(removed)
	if !slices.Equal(removed, []string{"etcd-d", "etcd-e"}) {
		t.Fatalf("reconcile removed %v, want etcd-d and etcd-e", removed)
	}
	if again := hosts[1].reconcile(t); len(again) != 0 {
		t.Fatalf("second reconcile removed %v", again)
	}
	voters, _, _ := membership(t, cli)
	slices.Sort(voters)
	if !slices.Equal(voters, []string{"etcd-a", "etcd-b", "etcd-c"}) {
		t.Fatalf("after shrinking: %v", voters)
	}
	w.finish(t, cli)
	if _, ok := member.Settled(ctxT(t), hosts[4].Cfg); ok {
		t.Fatal("etcd-e, removed, counts as settled")
	}
	// A removed host that runs member join again moves its old data aside
	// and stands by.
	hosts[4].Runner.Kill(ctxT(t))
	hosts[4].mustJoin(t, member.Standby)
	aside, _ := filepath.Glob(filepath.Join(hosts[4].Cfg.Root, "var/lib/etcd/member.removed-*"))
	if len(aside) != 1 {
		t.Fatalf("removed member's data not moved aside: %v", aside)
	}
	list, err := backupNames(t, st)
	if err != nil || len(list) == 0 {
		t.Fatalf("no backup taken before shrinking: %v %v", list, err)
	}
}

// TestReplaceAfterDataLoss: a member whose data dir is wiped comes back as
// a replacement, and the cluster never loses quorum.
func TestReplaceAfterDataLoss(t *testing.T) {
	st := newCluster(t, 3, joinVersion)
	hosts := foundThree(t, st)
	cli := clientFor(t, hosts[0], hosts[0], hosts[1])
	w := startWriter(cli)
	b := hosts[1]
	b.Runner.Kill(ctxT(t))
	if err := os.Rename(filepath.Join(b.Cfg.Root, "var/lib/etcd"), filepath.Join(b.Cfg.Root, "lost-disk")); err != nil {
		t.Fatal(err)
	}
	b.mustJoin(t, member.Replace)
	voters, learners, _ := membership(t, cli)
	if len(voters) != 3 || len(learners) != 0 {
		t.Fatalf("after replace: voters %v learners %v", voters, learners)
	}
	w.finish(t, cli)
	if list, err := backupNames(t, st); err != nil || len(list) != 1 {
		t.Fatalf("want one backup taken before the replace: %v %v", list, err)
	}
	// Running again changes nothing.
	b.mustJoin(t, member.Rejoin)
}

// TestFullStopThenStart: all members down, then started again: they come
// back on their data.
func TestFullStopThenStart(t *testing.T) {
	st := newCluster(t, 3, joinVersion)
	hosts := foundThree(t, st)
	cli := clientFor(t, hosts[0], hosts...)
	if _, err := cli.Put(ctxT(t), "/before", "stop"); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		h.Runner.Stop(ctxT(t))
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.join(t)
			if err == nil && res.Action != member.Rejoin {
				err = errors.New(string(res.Action) + ": " + res.Reason)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", hosts[i].Name, err)
		}
	}
	gr, err := cli.Get(ctxT(t), "/before")
	if err != nil || len(gr.Kvs) != 1 {
		t.Fatalf("data after full restart: %v %v", gr, err)
	}
}

// TestKilledBetweenAddAndStart: the member was added (as a learner) but
// its host died before etcd first started; the next run finishes the job.
func TestKilledBetweenAddAndStart(t *testing.T) {
	st := newCluster(t, 2, joinVersion)
	a := newHost(t, st, "etcd-a", joinVersion)
	b := newHost(t, st, "etcd-b", joinVersion)
	if err := clusterspec.Seed(ctxT(t), st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 1, EtcdVersion: joinVersion}}, true); err != nil {
		t.Fatal(err)
	}
	a.mustJoin(t, member.Found)
	if _, _, err := clusterspec.SetSpec(ctxT(t), st, 2, ""); err != nil {
		t.Fatal(err)
	}
	cli := clientFor(t, a, a)
	// What a crash right after MemberAddAsLearner leaves behind.
	if _, err := cli.MemberAddAsLearner(ctxT(t), []string{b.PeerURL()}); err != nil {
		t.Fatal(err)
	}
	b.mustJoin(t, member.Join)
	voters, learners, _ := membership(t, cli)
	if len(voters) != 2 || len(learners) != 0 {
		t.Fatalf("voters %v learners %v", voters, learners)
	}
}

// TestJoinBadInputsChangeNothing: bad declarations and an unreachable
// store give clear errors and leave the host untouched.
func TestJoinBadInputsChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) store.Store
		want  error
	}{
		{"not seeded", func(t *testing.T) store.Store { return emptyStore(t) }, clusterspec.ErrNotSeeded},
		{"malformed spec", func(t *testing.T) store.Store {
			st := emptyStore(t)
			store.PutBytes(ctxT(t), st, etcdmanager.ClusterSpecKey, []byte(`{"memberCount":3,`), store.PutOptions{})
			return st
		}, clusterspec.ErrInvalid},
		{"unknown version", func(t *testing.T) store.Store {
			st := emptyStore(t)
			store.PutBytes(ctxT(t), st, etcdmanager.ClusterSpecKey, []byte(`{"memberCount":3,"etcdVersion":"3.9.1"}`), store.PutOptions{})
			return st
		}, clusterspec.ErrInvalid},
		{"memberCount 0", func(t *testing.T) store.Store {
			st := emptyStore(t)
			store.PutBytes(ctxT(t), st, etcdmanager.ClusterSpecKey, []byte(`{"memberCount":0,"etcdVersion":"3.6.16"}`), store.PutOptions{})
			return st
		}, clusterspec.ErrInvalid},
		{"CA missing", func(t *testing.T) store.Store {
			st := emptyStore(t)
			if err := clusterspec.Seed(ctxT(t), st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}}, false); err != nil {
				t.Fatal(err)
			}
			return st
		}, pki.ErrNoCA},
		{"store unreachable", func(t *testing.T) store.Store {
			st, err := storeurl.Open(ctxT(t), "s3://etcd-backups?endpoint=http://127.0.0.1:"+strconv.Itoa(testenv.FreePort(t)),
				func(k string) string {
					return map[string]string{"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}[k]
				})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}, store.ErrUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.setup(t)
			h := newHost(t, st, "etcd-a", joinVersion)
			// The host comes with its etcd binaries (/opt/etcd), as an image would.
			before := hostTree(t, h.Cfg.Root)
			_, err := h.join(t)
			if !errors.Is(err, tc.want) {
				t.Fatalf("join: %v, want %v", err, tc.want)
			}
			if after := hostTree(t, h.Cfg.Root); !slices.Equal(after, before) {
				t.Fatalf("a refused join wrote to the host: %v, was %v", after, before)
			}
			if active, _ := h.Runner.Active(ctxT(t)); active {
				t.Fatal("a refused join started etcd")
			}
		})
	}
}

// hostTree lists every path under root, with link targets.
func hostTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			p += " -> " + target
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func foundThree(t *testing.T, st store.Store) []*host {
	t.Helper()
	return foundAt(t, st, joinVersion)
}

func emptyStore(t *testing.T) store.Store {
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}
