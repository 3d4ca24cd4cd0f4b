package integration

import (
	"context"
	"io"
	"sync"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/joinrun"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// readCounter counts the reads of each key (Get, Stat; List per prefix).
type readCounter struct {
	store.Store
	mu    sync.Mutex
	reads map[string]int
}

func (c *readCounter) count(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads[key]++
}

func (c *readCounter) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	c.count(key)
	return c.Store.Get(ctx, key)
}

func (c *readCounter) Stat(ctx context.Context, key string) (store.Info, error) {
	c.count(key)
	return c.Store.Stat(ctx, key)
}

func (c *readCounter) List(ctx context.Context, prefix string) ([]store.Entry, error) {
	c.count(prefix + "(list)")
	return c.Store.List(ctx, prefix)
}

// TestMemberJoinReadsControlOnce (issue 24): one etcd-member-join run
// reads each of the store's control objects (the pause, the teardown
// mark, the recovery request, the restore commands, the spec and
// settings) at most once, whether it joins a member or finds it settled:
// every step decides on that one read.
func TestMemberJoinReadsControlOnce(t *testing.T) {
	st := newCluster(t, 1, joinVersion)
	a := newHost(t, st, "etcd-a", joinVersion)
	a.mustJoin(t, member.Found)
	if _, _, err := clusterspec.SetSpec(ctxT(t), st, 2, ""); err != nil {
		t.Fatal(err)
	}
	b := newHost(t, st, "etcd-b", joinVersion)
	rc := &readCounter{Store: st}
	d := b.Deps()
	d.Store = rc
	control := []string{pause.Key, recovery.TeardownKey, recovery.RecoverKey, "control/(list)", etcdmanager.ClusterSpecKey, clusterspec.SettingsKey}
	for _, run := range []string{"join", "settled"} {
		rc.reads = map[string]int{}
		if err := joinrun.Join(ctxT(t), b.Cfg, d, func(context.Context, string) error { return nil }); err != nil {
			t.Fatalf("%s run: %v", run, err)
		}
		if _, ok := member.Settled(ctxT(t), b.Cfg); !ok {
			t.Fatalf("%s run: etcd-b is not a healthy voting member after it", run)
		}
		for _, k := range control {
			if n := rc.reads[k]; n > 1 {
				t.Errorf("%s run: %s read %d times", run, k, n)
			}
		}
		if rc.reads[pause.Key] != 1 || rc.reads["control/(list)"] != 1 {
			t.Errorf("%s run: reads %v: the pause and the restore commands must be read", run, rc.reads)
		}
	}
}
