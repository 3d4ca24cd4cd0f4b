package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/joinrun"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/status"
)

// replaceAfter is the standbys' grace in this test (the command's
// default is member.DefaultReplaceAfter).
const replaceAfter = 12 * time.Second

// TestStandbyReplacesAnUnreachableMember (issue 25): hosts with new
// names stand by for a full cluster of three while a client writes. A
// member down for less than the grace (a reboot) is not replaced; nor is
// one while the operator pauses or a rollout holds its lock; a member
// gone for good is replaced by exactly one of two racing standbys, with
// no acknowledged write lost; and the dead host, back with its old data,
// moves the data aside and stands by.
func TestStandbyReplacesAnUnreachableMember(t *testing.T) {
	st := newCluster(t, 3, joinVersion)
	var hosts []*host
	for _, n := range []string{"etcd-a", "etcd-b", "etcd-c"} {
		hosts = append(hosts, newHost(t, st, n, joinVersion))
	}
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() { defer wg.Done(); h.mustJoin(t, member.Found) }()
	}
	wg.Wait()
	a, c := hosts[0], hosts[2]
	standby := func(name string) *host {
		h := newHost(t, st, name, joinVersion)
		h.Cfg.ReplaceAfter, h.Cfg.ReplaceProbe = replaceAfter, time.Second
		return h
	}
	d, e := standby("etcd-d"), standby("etcd-e")
	cli := clientFor(t, a, hosts[0], hosts[1])
	w := startWriter(cli)
	cID := memberID(t, cli, "etcd-c")
	record := fmt.Sprintf("%s%x", member.UnreachablePrefix, cID)

	// watched starts d's run with etcd-c down and returns once d
	// recorded that it watches etcd-c (etcdadm status shows it).
	watched := func(during func()) member.Result {
		t.Helper()
		c.Runner.Kill(ctxT(t))
		done := make(chan member.Result, 1)
		go func() {
			res, err := d.join(t)
			if err != nil {
				t.Errorf("etcd-d: %v", err)
			}
			done <- res
		}()
		waitKey(t, cli, record, true)
		during()
		return <-done
	}
	wantVoters := func(want ...string) {
		t.Helper()
		voters, learners, _ := membership(t, cli)
		slices.Sort(voters)
		if !slices.Equal(voters, want) || len(learners) > 0 {
			t.Fatalf("voters %v learners %v, want voters %v", voters, learners, want)
		}
	}

	// A reboot: etcd-c is back within the grace. Meanwhile status
	// shows who watches it and when it would be replaced.
	res := watched(func() {
		r := status.Collect(ctxT(t), status.Etcd{Cluster: cli}, nil, time.Now())
		i := slices.IndexFunc(r.Members, func(m status.Member) bool { return m.Name == "etcd-c" })
		if i < 0 || r.Members[i].Unreachable == nil || r.Members[i].Unreachable.By != "etcd-d" || r.Members[i].Unreachable.Eligible.Sub(r.Members[i].Unreachable.Since) != replaceAfter {
			t.Errorf("status while etcd-d watches etcd-c: %+v", r.Members)
		}
		// The reconcile timer's metrics say the same (the alert on a
		// member down with no standby reads them).
		prom := filepath.Join(t.TempDir(), "members.prom")
		if err := joinrun.Reconcile(ctxT(t), a.Cfg, a.Deps(), prom); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(prom)
		for _, want := range []string{`etcdadm_member_healthy{member="etcd-c"} 0`, `etcdadm_member_replacement_watched{member="etcd-c"} 1`, `etcdadm_member_healthy{member="etcd-a"} 1`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("reconcile metrics lack %q:\n%s", want, b)
			}
		}
		c.mustJoin(t, member.Rejoin)
	})
	if res.Action != member.Standby {
		t.Fatalf("etcd-d after etcd-c came back: %s (%s), want standby", res.Action, res.Reason)
	}
	waitKey(t, cli, record, false)
	wantVoters("etcd-a", "etcd-b", "etcd-c")

	// The operator pauses, or a version switch holds the rollout lock,
	// while etcd-d watches: past the grace, nothing is replaced.
	res = watched(func() {
		if _, err := pause.Set(ctxT(t), st, "maintenance", time.Now()); err != nil {
			t.Fatal(err)
		}
	})
	if res.Action != member.Standby {
		t.Fatalf("etcd-d while paused: %s (%s), want standby", res.Action, res.Reason)
	}
	wantVoters("etcd-a", "etcd-b", "etcd-c")
	waitKey(t, cli, record, false) // status no longer announces a replacement
	if _, err := pause.Clear(ctxT(t), st); err != nil {
		t.Fatal(err)
	}
	s, err := member.Open(ctxT(t), a.Cfg, a.Deps())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var unlock func()
	res = watched(func() {
		if _, unlock, err = s.RolloutLock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
	unlock()
	if res.Action != member.Standby {
		t.Fatalf("etcd-d while the rollout lock is held: %s (%s), want standby", res.Action, res.Reason)
	}
	wantVoters("etcd-a", "etcd-b", "etcd-c")

	// etcd-c is gone for good; two standbys race for its place.
	results := make([]member.Result, 2)
	errs := make([]error, 2)
	for i, h := range []*host{d, e} {
		wg.Add(1)
		go func() { defer wg.Done(); results[i], errs[i] = h.join(t) }()
	}
	wg.Wait()
	var replaced []string
	for i, h := range []*host{d, e} {
		if errs[i] != nil {
			t.Fatalf("%s: %v", h.Name, errs[i])
		}
		t.Logf("%s: %s (%s)", h.Name, results[i].Action, results[i].Reason)
		if results[i].Action == member.Replace {
			replaced = append(replaced, h.Name)
		}
	}
	if len(replaced) != 1 {
		t.Fatalf("%d standbys replaced etcd-c (%v), want exactly one", len(replaced), replaced)
	}
	wantVoters(slices.Sorted(slices.Values([]string{"etcd-a", "etcd-b", replaced[0]}))...)
	waitKey(t, cli, record, false)

	// The dead host comes back with its old data: it never rejoins with it.
	res, err = c.join(t)
	if err != nil || res.Action != member.Standby {
		t.Fatalf("etcd-c back after its replacement: %s (%s) %v, want standby", res.Action, res.Reason, err)
	}
	if _, err := os.Stat(filepath.Join(c.Cfg.Root, "var/lib/etcd/member")); !os.IsNotExist(err) {
		t.Fatalf("etcd-c's old data is still in place: %v", err)
	}
	if aside, _ := filepath.Glob(filepath.Join(c.Cfg.Root, "var/lib/etcd/member.removed-*")); len(aside) != 1 {
		t.Fatalf("etcd-c's old data not kept aside: %v", aside)
	}
	wantVoters(slices.Sorted(slices.Values([]string{"etcd-a", "etcd-b", replaced[0]}))...)
	w.finish(t, cli)
}

func memberID(t *testing.T, cli *clientv3.Client, name string) uint64 {
	t.Helper()
	ml, err := cli.MemberList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		if m.Name == name {
			return m.ID
		}
	}
	t.Fatalf("no member %s", name)
	return 0
}

// waitKey waits up to 30 s for key to exist (or to be gone) in etcd.
func waitKey(t *testing.T, cli *clientv3.Client, key string, exists bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := cli.Get(ctx, key, clientv3.WithCountOnly())
		cancel()
		if err == nil && (r.Count > 0) == exists {
			return
		}
	}
	t.Fatalf("%s: exists=%v not reached in 30 s", key, exists)
}
