package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/manual"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/localcluster"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestManualInitJoinReset: the base layer by hand, no shared store. init
// on one loopback master, join on two others with the CA copied from the
// first; a second init, and joins that must be refused, change nothing;
// reset of one leaves a healthy two-member cluster and a blank host that
// joins again.
func TestManualInitJoinReset(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	newManualHost := func(name string) *host {
		h := &host{Host: localcluster.NewHost(t, nil, name, v)}
		h.Store = localStore(t, h)
		return h
	}
	a, b, c := newManualHost("etcd-a"), newManualHost("etcd-b"), newManualHost("etcd-c")
	res, err := manual.Init(ctxT(t), a.Cfg, a.Deps(), manual.InitOptions{Version: v})
	if err != nil || res.Already || res.Member.ClientURL != a.ClientURL() {
		t.Fatalf("init: %+v %v", res, err)
	}
	// What the operator copies to the next masters.
	caDir := filepath.Join(a.Cfg.Root, manual.LocalStoreDir, filepath.Dir(pki.CACertKey))
	caCert, err1 := os.ReadFile(filepath.Join(caDir, "ca.crt"))
	caKey, err2 := os.ReadFile(filepath.Join(caDir, "ca.key"))
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("the CA files 'etcdadm init' tells to copy: %v", err)
	}
	join := func(h *host, endpoint string, cert, key []byte) (member.Result, error) {
		return manual.Join(ctxT(t), h.Cfg, h.Deps(), manual.JoinOptions{Endpoint: endpoint, CACert: cert, CAKey: key})
	}
	for _, h := range []*host{b, c} {
		if r, err := join(h, a.ClientURL(), caCert, caKey); err != nil || r.Action != member.Join {
			t.Fatalf("%s: join: %+v %v", h.Name, r, err)
		}
	}
	cli := clientFor(t, a, a, b, c)
	if voters, learners, _ := membership(t, cli); len(voters) != 3 || len(learners) != 0 {
		t.Fatalf("after init and two joins: voters %v, learners %v", voters, learners)
	}
	// kube-apiserver with a certificate of the cluster CA writes and reads.
	ca, err := pki.ParseCA(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	apiDir := t.TempDir()
	if _, err := ca.IssueClientFiles(ctxT(t), apiDir, "kube-apiserver", 0, pki.Owner{UID: -1, GID: -1}); err != nil {
		t.Fatal(err)
	}
	apiTLS := clientTLS(t, filepath.Join(apiDir, "ca.crt"), filepath.Join(apiDir, "kube-apiserver.crt"), filepath.Join(apiDir, "kube-apiserver.key"))
	for _, h := range []*host{a, b, c} {
		if err := health(h.ClientURL(), apiTLS); err != nil {
			t.Fatalf("%s: kube-apiserver's certificate: %v", h.Name, err)
		}
	}
	if _, err := cli.Put(ctxT(t), "/registry/manual", "ok"); err != nil {
		t.Fatal(err)
	}

	// A second init on a running member changes nothing.
	before := configOf(t, a)
	if res, err := manual.Init(ctxT(t), a.Cfg, a.Deps(), manual.InitOptions{Version: v}); err != nil || !res.Already {
		t.Fatalf("second init: %+v %v", res, err)
	}
	if configOf(t, a) != before {
		t.Fatal("a second init changed the host's configuration or store")
	}

	// Refused joins change nothing on the joining host.
	d := newManualHost("etcd-d")
	other := foreignCA(t)
	refusals := []struct {
		name, endpoint string
		h              *host
		cert, key      []byte
		want           string
	}{
		{"foreign CA", a.ClientURL(), d, other.cert, other.key, "does not share this CA"},
		{"unreachable", fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t)), d, caCert, caKey, "cannot reach"},
		{"not a URL", "10.0.0.1:2379", d, caCert, caKey, "want https://HOST:PORT"},
		{"name taken", a.ClientURL(), newManualHost("etcd-b"), caCert, caKey, "taken by a healthy member"},
	}
	for _, r := range refusals {
		before := hashDir(t, r.h.Cfg.Root)
		_, err := join(r.h, r.endpoint, r.cert, r.key)
		if !errors.Is(err, manual.ErrRefused) || !strings.Contains(err.Error(), r.want) {
			t.Fatalf("join with %s: %v; want a refusal saying %q", r.name, err, r.want)
		}
		if hashDir(t, r.h.Cfg.Root) != before {
			t.Fatalf("the refused join (%s) changed the host", r.name)
		}
	}

	// Reset of etcd-c: a healthy two-member cluster, a blank host.
	rr, err := manual.Reset(ctxT(t), c.Cfg, c.Deps(), manual.ResetOptions{LocalStore: filepath.Join(c.Cfg.Root, manual.LocalStoreDir), Now: time.Now()})
	if err != nil || !rr.Removed {
		t.Fatalf("reset: %+v %v", rr, err)
	}
	if voters, _, _ := membership(t, cli); len(voters) != 2 {
		t.Fatalf("after the reset: voters %v", voters)
	}
	for _, p := range []string{"var/lib/etcd/member", "etc/etcd/pki", "etc/etcd/etcd.env", manual.LocalStoreDir} {
		if _, err := os.Stat(filepath.Join(c.Cfg.Root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after the reset %s is still in place: %v", p, err)
		}
		if m, _ := filepath.Glob(filepath.Join(c.Cfg.Root, p+".reset-*")); len(m) != 1 {
			t.Errorf("after the reset %s was not moved aside (%v)", p, m)
		}
	}
	if ok, _ := c.Runner.Active(ctxT(t)); ok {
		t.Fatal("etcd still runs on the reset host")
	}
	// The blank host joins again (with a fresh store of its own).
	c.Store = localStore(t, c)
	if r, err := join(c, b.ClientURL(), caCert, caKey); err != nil || r.Action != member.Join {
		t.Fatalf("join after reset: %+v %v", r, err)
	}
	if got, err := cli.Get(ctxT(t), "/registry/manual"); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("data after the reset and rejoin: %v %v", got, err)
	}

	// With two of three members down, a join and a reset are refused.
	b.Runner.Stop(ctxT(t))
	c.Runner.Stop(ctxT(t))
	before = hashDir(t, d.Cfg.Root)
	if _, err := join(d, a.ClientURL(), caCert, caKey); !errors.Is(err, manual.ErrRefused) {
		t.Fatalf("join into a cluster without quorum: %v", err)
	}
	if hashDir(t, d.Cfg.Root) != before {
		t.Fatal("the refused join changed the host")
	}
	before = configOf(t, a)
	if _, err := manual.Reset(ctxT(t), a.Cfg, a.Deps(), manual.ResetOptions{Now: time.Now()}); !errors.Is(err, manual.ErrRefused) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("reset that loses quorum: %v; want a refusal naming --force", err)
	}
	if configOf(t, a) != before {
		t.Fatal("the refused reset changed the host")
	}
	if _, err := os.Stat(filepath.Join(a.Cfg.Root, "var/lib/etcd/member")); err != nil {
		t.Fatalf("the refused reset moved the data: %v", err)
	}
}

// configOf hashes what a host's running etcd does not write itself: its
// configuration and certificates, and its own store.
func configOf(t *testing.T, h *host) string {
	t.Helper()
	return hashDir(t, filepath.Join(h.Cfg.Root, "etc")) + hashDir(t, filepath.Join(h.Cfg.Root, manual.LocalStoreDir))
}

// foreignCA is the PEM pair of a CA that is not the cluster's.
type pemPair struct{ cert, key []byte }

func foreignCA(t *testing.T) pemPair {
	t.Helper()
	st := emptyStore(t)
	if _, err := pki.Init(ctxT(t), st, pki.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	return pemPair{getAll(t, st, pki.CACertKey), getAll(t, st, pki.CAKeyKey)}
}

// localStore is a host's own store, where etcdadm keeps it without --store.
func localStore(t *testing.T, h *host) *filestore.Store {
	t.Helper()
	dir := filepath.Join(h.Cfg.Root, manual.LocalStoreDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
