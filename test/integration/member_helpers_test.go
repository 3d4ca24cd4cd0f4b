package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/test/localcluster"
)

// host is a simulated master (see package localcluster) with the test's
// assertions.
type host struct{ *localcluster.Host }

func newCluster(t *testing.T, members int32, version string) store.Store {
	return localcluster.Seed(t, members, version)
}

func newHost(t *testing.T, st store.Store, name, version string) *host {
	return &host{localcluster.NewHost(t, st, name, version)}
}

func (h *host) join(t *testing.T) (member.Result, error) {
	t.Helper()
	return h.Join(ctxT(t))
}

func (h *host) mustJoin(t *testing.T, want member.Action) {
	t.Helper()
	res, err := h.join(t)
	if err != nil {
		t.Fatalf("%s: join: %v", h.Name, err)
	}
	if res.Action != want {
		t.Fatalf("%s: %s (%s), want %s", h.Name, res.Action, res.Reason, want)
	}
}

func (h *host) reconcile(t *testing.T) []string {
	t.Helper()
	removed, err := h.Reconcile(ctxT(t))
	if err != nil {
		t.Fatalf("%s: reconcile: %v", h.Name, err)
	}
	return removed
}

func backupNames(t *testing.T, st store.Store) ([]string, error) {
	list, err := backup.List(ctxT(t), st)
	return names(list), err
}

func clientFor(t *testing.T, tlsHost *host, hosts ...*host) *clientv3.Client {
	var hs []*localcluster.Host
	for _, h := range hosts {
		hs = append(hs, h.Host)
	}
	return localcluster.Client(t, tlsHost.Host, hs...)
}

// voters returns the started voting members' names and the learners'.
func membership(t *testing.T, cli *clientv3.Client) (voters, learners []string, clusterID uint64) {
	t.Helper()
	ml, err := cli.MemberList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		if m.IsLearner {
			learners = append(learners, m.Name)
		} else {
			voters = append(voters, m.Name)
		}
	}
	return voters, learners, ml.Header.ClusterId
}

// writer writes keys until stopped and remembers which writes etcd
// acknowledged.
type writer struct {
	cli   *clientv3.Client
	mu    sync.Mutex
	acked []string
	fails atomic.Int64
	stop  chan struct{}
	done  chan struct{}
}

func startWriter(cli *clientv3.Client) *writer {
	w := &writer{cli: cli, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			k := fmt.Sprintf("/writer/%06d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := w.cli.Put(ctx, k, "v")
			cancel()
			if err != nil {
				w.fails.Add(1)
				time.Sleep(20 * time.Millisecond)
				continue
			}
			w.mu.Lock()
			w.acked = append(w.acked, k)
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// ackedKeys are the writes etcd acknowledged so far.
func (w *writer) ackedKeys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked)
}

// finish stops the writer and checks every acknowledged write is readable.
func (w *writer) finish(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	close(w.stop)
	<-w.done
	gr, err := cli.Get(ctxT(t), "/writer/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, kv := range gr.Kvs {
		have[string(kv.Key)] = true
	}
	lost := 0
	for _, k := range w.acked {
		if !have[k] {
			lost++
		}
	}
	if lost > 0 || len(w.acked) == 0 {
		t.Fatalf("writer: %d acknowledged writes, %d lost", len(w.acked), lost)
	}
	t.Logf("writer: %d acknowledged writes, none lost (%d attempts failed and were not acknowledged)", len(w.acked), w.fails.Load())
}
