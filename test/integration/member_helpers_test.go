package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/service/process"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// host is one simulated master: its own root directory (etc/etcd,
// var/lib/etcd), its own ports on loopback, etcd run by the process runner.
type host struct {
	name   string
	cfg    member.Config
	runner *process.Runner
	st     store.Store
}

// newCluster seeds a store (spec + CA) for tests of member join.
func newCluster(t *testing.T, members int32, version string) store.Store {
	t.Helper()
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := clusterspec.Seed(ctx, st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: members, EtcdVersion: version}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Init(ctx, st, pki.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	return st
}

func newHost(t *testing.T, st store.Store, name, version string) *host {
	t.Helper()
	root := filepath.Join(t.TempDir(), name)
	h := &host{
		name: name,
		st:   st,
		cfg: member.Config{
			Name: name, Host: "127.0.0.1", ListenHost: "127.0.0.1",
			ClientPort: testenv.FreePort(t), PeerPort: testenv.FreePort(t),
			Root: root, Owner: pki.Owner{UID: -1, GID: -1},
			Timeout: time.Minute, Poll: 100 * time.Millisecond, FoundGrace: 10 * time.Second,
			IPs: []net.IP{net.ParseIP("127.0.0.1")},
		},
	}
	h.runner = &process.Runner{EtcdBin: testenv.EtcdBin(t, version, "etcd"), EnvFile: filepath.Join(root, "etc/etcd/etcd.env"), LogFile: filepath.Join(root, "etcd.log")}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s: last lines of %s:\n%s", name, h.runner.LogFile, tailFile(h.runner.LogFile, 15))
		}
		h.runner.Kill(context.Background())
	})
	return h
}

func (h *host) join(t *testing.T) (member.Result, error) {
	t.Helper()
	return member.Run(ctxT(t), h.cfg, member.Deps{Store: h.st, Service: h.runner, Log: quiet().With("host", h.name), Now: time.Now})
}

func (h *host) mustJoin(t *testing.T, want member.Action) {
	t.Helper()
	res, err := h.join(t)
	if err != nil {
		t.Fatalf("%s: join: %v", h.name, err)
	}
	if res.Action != want {
		t.Fatalf("%s: %s (%s), want %s", h.name, res.Action, res.Reason, want)
	}
}

func (h *host) reconcile(t *testing.T) []string {
	t.Helper()
	removed, err := member.Reconcile(ctxT(t), h.cfg, member.Deps{Store: h.st, Service: h.runner, Log: quiet(), Now: time.Now})
	if err != nil {
		t.Fatalf("%s: reconcile: %v", h.name, err)
	}
	return removed
}

func (h *host) clientURL() string { return fmt.Sprintf("https://127.0.0.1:%d", h.cfg.ClientPort) }
func (h *host) peerURL() string   { return fmt.Sprintf("https://127.0.0.1:%d", h.cfg.PeerPort) }

func backupNames(t *testing.T, st store.Store) ([]string, error) {
	list, err := backup.List(ctxT(t), st)
	return names(list), err
}

// client talks to the given hosts with the member's own client cert.
func clientFor(t *testing.T, tlsHost *host, hosts ...*host) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, h := range hosts {
		eps = append(eps, h.clientURL())
	}
	pkiDir := filepath.Join(tlsHost.cfg.Root, "etc/etcd/pki")
	tp := &testenv.PKI{CACert: filepath.Join(pkiDir, "ca.crt"), ClientCert: filepath.Join(pkiDir, "client.crt"), ClientKey: filepath.Join(pkiDir, "client.key")}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tp.ClientTLS(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
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

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
