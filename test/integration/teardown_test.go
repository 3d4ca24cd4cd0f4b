package integration

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/localcluster"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestControlFilesLostThenTeardown: a store that lost its control files
// while its cluster runs is refused by member join (etcd-manager's #299
// founded an empty cluster over it), changing nothing; 'seed --force'
// brings the same cluster back. Then a teardown stops every member and
// moves its data aside, a torn-down store founds nothing (not even on a
// fresh host) until 'seed --force', which founds a new, empty cluster.
func TestControlFilesLostThenTeardown(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st, dir, url := seededByCLI(t, v)
	hosts := foundAt(t, st, v)
	cli := clientFor(t, hosts[0], hosts...)
	if _, err := cli.Put(ctxT(t), "/old", "data"); err != nil {
		t.Fatal(err)
	}
	oldID := clusterID(t, hosts)

	// An S3 lifecycle rule ate control/.
	for _, k := range []string{etcdmanager.ClusterSpecKey, etcdmanager.ClusterCreatedKey} {
		st.Delete(ctxT(t), k)
	}
	before, beforeHost := hashDir(t, dir), hostTree(t, hosts[0].Cfg.Root)
	_, err := hosts[0].join(t)
	if !errors.Is(err, member.ErrControlLost) || !strings.Contains(err.Error(), "seed --force") {
		t.Fatalf("member join on a store without its spec: %v", err)
	}
	if hashDir(t, dir) != before || !equalTrees(hostTree(t, hosts[0].Cfg.Root), beforeHost) {
		t.Fatal("the refused member join changed the store or the host")
	}
	if r := runBin(t, nil, "etcdadm", "seed", "--force", "--store", url, "--members", "3", "--version", v); r.code != 0 {
		t.Fatalf("seed --force: %s", r.stderr)
	}
	for _, h := range hosts {
		if res, err := h.join(t); err != nil || res.Action != member.Rejoin {
			t.Fatalf("%s after seed --force: %v %v", h.Name, res, err)
		}
	}
	if id := clusterID(t, hosts); id != oldID {
		t.Fatalf("cluster %x after seed --force, was %x: want the same cluster back", id, oldID)
	}

	// Teardown.
	before = hashDir(t, dir)
	if r := runBin(t, nil, "etcdadm", "teardown", "--store", url); r.code != 2 || hashDir(t, dir) != before {
		t.Fatalf("unconfirmed teardown: exit %d %s (or the store changed)", r.code, r.stderr)
	}
	if r := runBin(t, nil, "etcdadm", "teardown", "--yes", "--store", url); r.code != 0 {
		t.Fatalf("teardown: %s", r.stderr)
	}
	// A stop that fails leaves the data under the etcd that may still run
	// on it; the next run, whose stop works, moves it aside.
	failing := func(_ context.Context, unit string) error {
		if unit == "etcd.service" {
			return errors.New("systemd: stop etcd.service: job failed")
		}
		return nil
	}
	if torn, err := recovery.ActTeardown(ctxT(t), hosts[0].Cfg, hosts[0].Deps(), failing); !torn || err == nil || !strings.Contains(err.Error(), "left in place") {
		t.Fatalf("teardown whose stop failed: torn=%v %v, want an error saying the data is left in place", torn, err)
	}
	if aside, _ := filepath.Glob(filepath.Join(hosts[0].Cfg.Root, "var/lib/etcd/member.torn-down-*")); len(aside) != 0 {
		t.Fatalf("data moved aside although stopping etcd failed: %v", aside)
	}
	fresh := newHost(t, st, "etcd-d", v)
	for _, h := range append(hosts, fresh) {
		torn, err := recovery.ActTeardown(ctxT(t), h.Cfg, h.Deps(), stopEtcd(h.Host))
		if err != nil || !torn {
			t.Fatalf("%s: teardown: torn=%v %v", h.Name, torn, err)
		}
		if active, _ := h.Runner.Active(ctxT(t)); active {
			t.Fatalf("%s: etcd still runs after the teardown", h.Name)
		}
	}
	for _, h := range hosts {
		if aside, _ := filepath.Glob(filepath.Join(h.Cfg.Root, "var/lib/etcd/member.torn-down-*")); len(aside) != 1 {
			t.Errorf("%s: data not kept aside: %v", h.Name, aside)
		}
	}
	if r := runBin(t, nil, "etcdadm", "seed", "--store", url, "--members", "3", "--version", v); r.code != 2 || !strings.Contains(r.stderr, "torn down") {
		t.Fatalf("seed on a torn-down store without --force: exit %d %s", r.code, r.stderr)
	}
	if r := runBin(t, nil, "etcdadm", "seed", "--force", "--store", url, "--members", "3", "--version", v); r.code != 0 {
		t.Fatalf("seed --force after teardown: %s", r.stderr)
	}
	joinAll(t, hosts)
	if id := clusterID(t, hosts); id == oldID {
		t.Fatal("seed --force after a teardown brought the old cluster back, want a new one")
	}
	if gr, err := clientFor(t, hosts[0], hosts...).Get(ctxT(t), "/old"); err != nil || len(gr.Kvs) != 0 {
		t.Fatalf("the new cluster holds the old data: %v %v", gr, err)
	}
}

func stopEtcd(h *localcluster.Host) func(ctx context.Context, unit string) error {
	return func(ctx context.Context, unit string) error {
		if unit == "etcd.service" {
			return h.Runner.Stop(ctx)
		}
		return nil
	}
}

func clusterID(t *testing.T, hosts []*host) uint64 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, _, id := membership(t, clientFor(t, hosts[0], hosts...))
		if id != 0 || time.Now().After(deadline) {
			return id
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func equalTrees(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

// seededByCLI is a directory store seeded for 3 members of version v and
// given a CA by etcdadm itself.
func seededByCLI(t *testing.T, v string) (st store.Store, dir, url string) {
	t.Helper()
	dir = t.TempDir()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	url = "file://" + dir
	for _, args := range [][]string{{"seed", "--members", "3", "--version", v}, {"pki", "init"}} {
		if r := runBin(t, nil, "etcdadm", append(args, "--store", url)...); r.code != 0 {
			t.Fatalf("etcdadm %v: %s", args, r.stderr)
		}
	}
	return st, dir, url
}
