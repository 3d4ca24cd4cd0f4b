// Package localcluster runs etcd-member-join for simulated masters on one
// machine: each host has its own root directory (etc/etcd, var/lib/etcd),
// its own loopback ports, and etcd run by the process service manager.
// Used by the integration tests and the member-join benchmarks.
package localcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/service/process"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// Seed returns a directory store holding a cluster spec and a CA.
func Seed(t testing.TB, members int32, version string) store.Store {
	t.Helper()
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := clusterspec.Seed(ctx, st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: members, EtcdVersion: version}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Init(ctx, st, pki.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	return st
}

// Host is one simulated master.
type Host struct {
	Name   string
	Cfg    member.Config
	Runner *process.Runner
	Store  store.Store
	Log    *slog.Logger
}

// NewHost prepares a host; nothing runs until Join.
func NewHost(t testing.TB, st store.Store, name, version string) *Host {
	t.Helper()
	root := filepath.Join(t.TempDir(), name)
	h := &Host{
		Name:  name,
		Store: st,
		Log:   logger().With("host", name),
		Cfg: member.Config{
			Name: name, Host: "127.0.0.1", ListenHost: "127.0.0.1",
			ClientPort: testenv.FreePort(t), PeerPort: testenv.FreePort(t),
			Root: root, Owner: pki.Owner{UID: -1, GID: -1},
			Timeout: time.Minute, Poll: 100 * time.Millisecond, FoundGrace: 10 * time.Second,
			IPs: []net.IP{net.ParseIP("127.0.0.1")},
		},
	}
	// /opt/etcd as on a host: the version given, and current pointing at
	// it; etcd runs from current, so the version switcher can move it.
	h.AddVersions(t, version)
	if err := localetcd.Use(etcdbin.HostDir(root), etcdversion.MustParse(version)); err != nil {
		t.Fatal(err)
	}
	h.Runner = &process.Runner{EtcdBin: filepath.Join(root, "opt/etcd/current/etcd"), EnvFile: filepath.Join(root, "etc/etcd/etcd.env"), OnceEnvFile: filepath.Join(root, localetcd.OnceEnvFile), LogFile: filepath.Join(root, "etcd.log")}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s: last lines of %s:\n%s", name, h.Runner.LogFile, tailFile(h.Runner.LogFile, 15))
		}
		h.Runner.Kill(context.Background())
	})
	return h
}

// logger writes to stderr when TEST_LOG is set, else nowhere.
func logger() *slog.Logger {
	if os.Getenv("TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// AddVersions bakes more etcd versions into the host: /opt/etcd/vX.Y.Z
// links to the cached build.
func (h *Host) AddVersions(t testing.TB, versions ...string) {
	t.Helper()
	dir := filepath.Join(h.Cfg.Root, "opt/etcd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		link := filepath.Join(dir, "v"+v)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Dir(testenv.EtcdBin(t, v, "etcd")), link); err != nil {
			t.Fatal(err)
		}
	}
}

// Deps are the member-join dependencies of this host.
func (h *Host) Deps() member.Deps { return h.deps() }

func (h *Host) deps() member.Deps {
	return member.Deps{Store: h.Store, Service: h.Runner, Log: h.Log, Now: time.Now}
}

// Join runs etcd-member-join once for this host.
func (h *Host) Join(ctx context.Context) (member.Result, error) {
	return member.Run(ctx, h.Cfg, h.deps())
}

// Reconcile runs etcd-member-join reconcile once from this host.
func (h *Host) Reconcile(ctx context.Context) ([]string, error) {
	return member.Reconcile(ctx, h.Cfg, h.deps())
}

// ClientURL and PeerURL are where this host's member is reached.
func (h *Host) ClientURL() string { return fmt.Sprintf("https://127.0.0.1:%d", h.Cfg.ClientPort) }
func (h *Host) PeerURL() string   { return fmt.Sprintf("https://127.0.0.1:%d", h.Cfg.PeerPort) }

// PKIDir is where member join put this host's certificates.
func (h *Host) PKIDir() string { return filepath.Join(h.Cfg.Root, "etc/etcd/pki") }

// Client talks to the given hosts with tlsHost's member client certificate.
func Client(t testing.TB, tlsHost *Host, hosts ...*Host) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, h := range hosts {
		eps = append(eps, h.ClientURL())
	}
	dir := tlsHost.PKIDir()
	tp := &testenv.PKI{CACert: filepath.Join(dir, "ca.crt"), ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key")}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tp.ClientTLS(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
