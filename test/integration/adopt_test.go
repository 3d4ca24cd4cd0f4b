package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestAdoptRunningCluster: a 3-member etcd started by hand with its own CA
// (no etcdadm) is adopted into a MinIO store: every refusal first changes
// nothing; then the store holds a verified backup, the imported CA, the
// spec, the peers and the created mark; a re-run changes nothing; a host
// running our member join takes over one member with its data (its peer
// URL moves to the new port), the old client certificate still works
// against it, and the data is all there.
func TestAdoptRunningCluster(t *testing.T) {
	v := testenv.EtcdVersions()[0]
	legacy := testenv.NewPKI(t)
	ms := testenv.StartEtcdCluster(t, v, 3, legacy)
	cli := ms[0].Client(t)
	for _, k := range []string{"/registry/a", "/registry/b", "/registry/c"} {
		if _, err := cli.Put(ctxT(t), k, "v-"+k); err != nil {
			t.Fatal(err)
		}
	}
	srv := testenv.StartMinIO(t)
	url := srv.URL("adopted")
	st := openURL(t, url, srv)
	env := s3Env(srv, srv.SecretKey)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.Endpoint())
	}
	adopt := func(p *testenv.PKI, caCert, caKey string, extra ...string) result {
		args := []string{"adopt", "--store", url, "--endpoints", strings.Join(eps, ","), "--cacert", p.CACert, "--cert", p.ClientCert, "--key", p.ClientKey, "--ca-cert", caCert, "--ca-key", caKey}
		return runBin(t, env, "etcdadm", append(args, extra...)...)
	}
	other := testenv.NewPKI(t)

	refusals := []struct {
		name  string
		setup func() (caCert, caKey string, undo func())
		want  []string
	}{
		{"a CA key that is not the CA certificate's", func() (string, string, func()) { return legacy.CACert, other.CAKey, func() {} },
			[]string{"--ca-cert/--ca-key", "matches"}},
		{"a CA that did not sign the client certificate", func() (string, string, func()) { return other.CACert, other.CAKey, func() {} },
			[]string{"not signed by the CA given", "give the CA that signed"}},
		{"a member down", func() (string, string, func()) {
			ms[2].Stop()
			return legacy.CACert, legacy.CAKey, func() { ms[2] = testenv.StartEtcdMember(t, v, ms[2].Config, legacy) }
		}, []string{"member " + ms[2].Name + " does not answer", "adopt a healthy cluster"}},
	}
	for _, r := range refusals {
		before := storeDigest(t, st)
		caCert, caKey, undo := r.setup()
		res := adopt(legacy, caCert, caKey)
		undo()
		if res.code != 2 {
			t.Fatalf("%s: exit %d, want 2 (refused)\n%s%s", r.name, res.code, res.stdout, res.stderr)
		}
		for _, w := range append(r.want, "Nothing was written") {
			if !strings.Contains(res.stderr, w) {
				t.Errorf("%s: message %q does not say %q", r.name, res.stderr, w)
			}
		}
		if storeDigest(t, st) != before {
			t.Errorf("%s: the refused adoption changed the store", r.name)
		}
	}

	// A store that already holds a cluster is refused, unchanged.
	seeded, seededURL := t.TempDir(), ""
	seededURL = "file://" + seeded
	if r := runBin(t, nil, "etcdadm", "seed", "--store", seededURL, "--members", "3", "--version", v); r.code != 0 {
		t.Fatal(r.stderr)
	}
	before := hashDir(t, seeded)
	r := runBin(t, nil, "etcdadm", "adopt", "--store", seededURL, "--endpoints", strings.Join(eps, ","), "--cacert", legacy.CACert, "--cert", legacy.ClientCert, "--key", legacy.ClientKey, "--ca-cert", legacy.CACert, "--ca-key", legacy.CAKey)
	if r.code != 2 || !strings.Contains(r.stderr, "already holds a cluster") || !strings.Contains(r.stderr, "empty store") {
		t.Errorf("adopt into a seeded store: exit %d\n%s", r.code, r.stderr)
	}
	if hashDir(t, seeded) != before {
		t.Error("the refused adoption changed the seeded store")
	}

	res := adopt(legacy, legacy.CACert, legacy.CAKey)
	if res.code != 0 {
		t.Fatalf("adopt: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	for _, m := range ms {
		if !strings.Contains(res.stdout, m.Name) || !strings.Contains(res.stdout, m.PeerURL) {
			t.Errorf("adopt output does not list %s (%s):\n%s", m.Name, m.PeerURL, res.stdout)
		}
	}
	cl, err := clusterspec.Load(ctxT(t), st)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Spec.MemberCount != 3 || cl.Spec.EtcdVersion != v || cl.Settings.TLS != "mtls" {
		t.Errorf("seeded spec %+v settings %+v; want 3 members of %s with mtls", cl.Spec, cl.Settings, v)
	}
	ca, err := pki.LoadCA(ctxT(t), st)
	if err != nil {
		t.Fatal(err)
	}
	oldClient, _ := os.ReadFile(legacy.ClientCert)
	if ok, err := ca.IssuedPEM(oldClient); err != nil || !ok {
		t.Errorf("the store's CA did not sign the existing client certificate (%v): existing clients would break", err)
	}
	list, err := backup.List(ctxT(t), st)
	if err != nil || len(list) != 1 {
		t.Fatalf("backups after adopt: %v %v; want the adoption's one", names(list), err)
	}
	keep := t.TempDir()
	rep, err := backup.Verify(ctxT(t), st, list[0].Name, keep)
	if err != nil {
		t.Fatalf("the adoption's backup does not verify: %v", err)
	}
	if rep.SnapshotSize == 0 {
		t.Error("empty snapshot")
	}
	peers, err := member.Peers(ctxT(t), st)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range peers {
		got = append(got, p.Name+"="+p.PeerURL)
	}
	var want []string
	for _, m := range ms {
		want = append(want, m.Name+"="+m.PeerURL)
	}
	if !slices.Equal(got, want) {
		t.Errorf("peer registry %v, want %v", got, want)
	}
	if _, err := st.Stat(ctxT(t), etcdmanager.ClusterCreatedKey); err != nil {
		t.Errorf("%s after adopt: %v", etcdmanager.ClusterCreatedKey, err)
	}
	if a, err := recovery.LoadAdoption(ctxT(t), st); err != nil || a == nil || !a.Done || a.Backup != list[0].Name {
		t.Errorf("adoption record %+v %v", a, err)
	}

	// Run again (as after a crash): it says so and changes nothing.
	before2 := storeDigest(t, st)
	if r := adopt(legacy, legacy.CACert, legacy.CAKey); r.code != 0 || !strings.Contains(r.stdout, "adoption finished") {
		t.Errorf("adopt again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if storeDigest(t, st) != before2 {
		t.Error("adopting the same cluster again changed the store")
	}

	// A host with our member join takes member m0 over with its data.
	ms[0].Stop()
	h := newHost(t, st, ms[0].Name, v)
	dataDir := member.DataDir(h.Cfg)
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(ms[0].DataDir, dataDir); err != nil {
		t.Fatal(err)
	}
	h.mustJoin(t, member.Rejoin)
	cli2, err := clientv3.New(clientv3.Config{Endpoints: []string{h.ClientURL()}, TLS: legacy.ClientTLS(t), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	ml, err := cli2.MemberList(ctxT(t))
	if err != nil {
		t.Fatalf("the old client certificate against the taken-over member: %v", err)
	}
	for _, m := range ml.Members {
		if m.Name == h.Name && !slices.Equal(m.PeerURLs, []string{h.PeerURL()}) {
			t.Errorf("%s's peer URLs %v, want the new %s", m.Name, m.PeerURLs, h.PeerURL())
		}
	}
	for _, k := range []string{"/registry/a", "/registry/b", "/registry/c"} {
		gr, err := cli2.Get(ctxT(t), k)
		if err != nil || len(gr.Kvs) != 1 || string(gr.Kvs[0].Value) != "v-"+k {
			t.Errorf("%s after the takeover: %v %v", k, gr, err)
		}
	}
	if _, err := cli2.Put(ctxT(t), "/after", "takeover"); err != nil {
		t.Errorf("write through the taken-over member: %v", err)
	}
}

// storeDigest hashes every object of a store (names and contents).
func storeDigest(t *testing.T, st store.Store) string {
	t.Helper()
	h := sha256.New()
	var walk func(prefix string)
	walk = func(prefix string) {
		es, err := st.List(ctxT(t), prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Dir {
				walk(prefix + e.Name + "/")
				continue
			}
			rc, _, err := st.Get(context.Background(), prefix+e.Name)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(h, prefix+e.Name+"\n")
			io.Copy(h, rc)
			rc.Close()
		}
	}
	walk("")
	return hex.EncodeToString(h.Sum(nil))
}
