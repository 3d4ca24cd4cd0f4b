package integration

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestCARotation: three loopback members replace their CA by the version
// switchers alone while clients write. A kube-apiserver-style client with
// a certificate and bundle of the old CA keeps working through the first
// phase; reissued in the trusted phase, its new certificate works through
// the finish; after it, the old certificate is refused, every member
// presents the new CA's certificates and trusts nothing else. No
// acknowledged write is lost.
func TestCARotation(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st := newCluster(t, 3, v)
	hosts := foundAt(t, st, v)
	oldCA, err := pki.LoadCA(ctxT(t), st)
	if err != nil {
		t.Fatal(err)
	}
	apiserver := func(dir string) *tls.Config {
		ca, err := pki.LoadCA(ctxT(t), st)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ca.IssueClientFiles(ctxT(t), dir, "kube-apiserver", 0, pki.Owner{UID: -1, GID: -1}); err != nil {
			t.Fatal(err)
		}
		return clientTLS(t, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "kube-apiserver.crt"), filepath.Join(dir, "kube-apiserver.key"))
	}
	oldCfg := apiserver(t.TempDir())
	clientWith := func(cfg *tls.Config) *clientv3.Client {
		var eps []string
		for _, h := range hosts {
			eps = append(eps, h.ClientURL())
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}

	// Phase 1: members restart to trust the new CA, which then signs.
	oldCli := clientWith(oldCfg)
	w := startWriter(oldCli)
	r, err := pki.StartRotation(ctxT(t), st, pki.InitOptions{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range runSwitchers(t, hosts) {
		if err != nil {
			t.Fatalf("%s: switcher in the trust phase: %v", hosts[i].Name, err)
		}
	}
	w.finish(t, oldCli)
	rec := rotation(t, st, pki.PhaseTrusted)
	if len(rec.Done[pki.PhaseTrust]) != 3 {
		t.Fatalf("trust phase done by %v; want every member", rec.Done[pki.PhaseTrust])
	}
	for _, h := range hosts {
		if n := bundleSize(t, h); n != 2 {
			t.Fatalf("%s: ca.crt holds %d CAs in the trusted phase; want old and new", h.Name, n)
		}
		if c := presented(t, h.ClientURL(), oldCfg); c.CheckSignatureFrom(oldCA.Cert) != nil {
			t.Fatalf("%s presents a certificate of %s before --finish: a client that knows only the old CA cannot verify it", h.Name, c.Issuer)
		}
		if err := health(h.ClientURL(), oldCfg); err != nil {
			t.Fatalf("%s: the old CA's client certificate no longer works after the first phase: %v", h.Name, err)
		}
	}

	// The operator reissues the client (the new CA signs, both trusted),
	// then finishes: members reissue, then drop the old CA.
	newCfg := apiserver(t.TempDir())
	newCli := clientWith(newCfg)
	w = startWriter(newCli)
	if _, err := pki.FinishRotation(ctxT(t), st, time.Now()); err != nil {
		t.Fatal(err)
	}
	for i, err := range runSwitchers(t, hosts) {
		if err != nil {
			t.Fatalf("%s: switcher finishing the rotation: %v", hosts[i].Name, err)
		}
	}
	w.finish(t, newCli)
	rotation(t, st, pki.PhaseDone)
	newCA, err := pki.LoadCA(ctxT(t), st)
	if err != nil {
		t.Fatal(err)
	}
	if newCA.Cert.Subject.CommonName != r.NewCA || len(newCA.Bundle) != 1 {
		t.Fatalf("the store's CA after the rotation: %s, bundle of %d", newCA.Cert.Subject, len(newCA.Bundle))
	}
	for _, h := range hosts {
		if n := bundleSize(t, h); n != 1 {
			t.Fatalf("%s: ca.crt holds %d CAs after the rotation", h.Name, n)
		}
		for _, f := range []string{"peer.crt", "server.crt", "client.crt"} {
			if c := readCert(t, filepath.Join(h.PKIDir(), f)); c.CheckSignatureFrom(newCA.Cert) != nil {
				t.Fatalf("%s: %s is still signed by %s", h.Name, f, c.Issuer)
			}
		}
		if c := presented(t, h.ClientURL(), newCfg); c.CheckSignatureFrom(newCA.Cert) != nil {
			t.Fatalf("%s presents a certificate of %s after the rotation", h.Name, c.Issuer)
		}
		if err := health(h.ClientURL(), newCfg); err != nil {
			t.Fatalf("%s: the reissued client certificate does not work: %v", h.Name, err)
		}
		// The old client's own pool cannot verify the new server
		// certificate; trust it here so the verdict is etcd's.
		refused := oldCfg.Clone()
		refused.RootCAs = newCA.Pool()
		if err := health(h.ClientURL(), refused); err == nil {
			t.Fatalf("%s still accepts a client certificate of the old CA after the rotation", h.Name)
		}
	}
	// Idle again: every switcher's next run does nothing.
	for i, err := range runSwitchers(t, hosts) {
		if err != nil {
			t.Fatalf("%s: idle switcher: %v", hosts[i].Name, err)
		}
	}
}

// rotation reads the rotation record and checks its phase.
func rotation(t *testing.T, st store.Store, want pki.Phase) *pki.Rotation {
	t.Helper()
	r, _, err := pki.LoadRotation(ctxT(t), st)
	if err != nil || r == nil || r.Phase != want {
		t.Fatalf("CA rotation: %+v %v; want phase %s", r, err, want)
	}
	return r
}

func bundleSize(t *testing.T, h *host) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.PKIDir(), "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCertificates(b)
	if err != nil {
		t.Fatal(err)
	}
	return len(certs)
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCertificates(b)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

// TestRotateCARefusalsChangeNothing: etcdadm pki rotate-ca's refusals
// exit 2, say what to do and leave the store as it was.
func TestRotateCARefusalsChangeNothing(t *testing.T) {
	dir := t.TempDir()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	url := "file://" + dir
	refuse := func(want string, args ...string) {
		t.Helper()
		before := hashDir(t, dir)
		r := runBin(t, nil, "etcdadm", append(append([]string{"pki", "rotate-ca"}, args...), "--store", url)...)
		if r.code != 2 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "Nothing was changed") {
			t.Errorf("rotate-ca %v: exit %d, stderr %q; want 2 and %q", args, r.code, r.stderr, want)
		}
		if hashDir(t, dir) != before {
			t.Errorf("rotate-ca %v: the store changed", args)
		}
	}
	refuse("etcdadm pki init", "--yes")
	if _, err := pki.Init(ctxT(t), st, pki.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	refuse("no CA rotation in progress", "--finish", "--yes")
	refuse("not confirmed")
	refuse("algorithm", "--algorithm", "dsa", "--yes")
	rec := rollout.Record{Target: "3.7.3", Path: []string{"3.6.16", "3.7.3"}, State: rollout.Running}
	if _, err := rollout.Save(ctxT(t), st, rec, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	refuse("version rollout to 3.7.3", "--yes")
	rec.State = rollout.Done
	if _, err := store.PutJSON(ctxT(t), st, rollout.RecordKey, rec, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := runBin(t, nil, "etcdadm", "pki", "rotate-ca", "--yes", "--store", url); r.code != 0 || !strings.Contains(r.stdout, "members restart to trust the new CA") {
		t.Fatalf("rotate-ca: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	refuse("members still restart to trust the new CA", "--finish", "--yes")
	// Run again while it runs: it shows the rotation and changes nothing.
	before := hashDir(t, dir)
	if r := runBin(t, nil, "etcdadm", "pki", "rotate-ca", "--yes", "--store", url); r.code != 0 || !strings.Contains(r.stdout, "0 done") || hashDir(t, dir) != before {
		t.Errorf("rotate-ca during a rotation: exit %d, store changed %v\n%s%s", r.code, hashDir(t, dir) != before, r.stdout, r.stderr)
	}
}

// TestSessionFollowsItsBundle: a switcher run opened before its member
// took the new CA into its bundle (the trust phase) must verify a member
// that reissued its certificates from the new CA later in the same run.
// Kept on the bundle it opened with, it took that member for unhealthy
// and waited for good (the adoption e2e test under load).
func TestSessionFollowsItsBundle(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st := newCluster(t, 3, v)
	hosts := foundAt(t, st, v)
	long, err := member.Open(ctxT(t), hosts[0].Cfg, hosts[0].Deps())
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	if _, err := pki.StartRotation(ctxT(t), st, pki.InitOptions{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := long.RefreshCerts(ctxT(t), false); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range hosts {
		names = append(names, h.Name)
	}
	for _, n := range names {
		if _, err := pki.DidPart(ctxT(t), st, pki.PhaseTrust, n, names, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pki.FinishRotation(ctxT(t), st, time.Now()); err != nil {
		t.Fatal(err)
	}
	other, err := member.Open(ctxT(t), hosts[1].Cfg, hosts[1].Deps())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.RefreshCerts(ctxT(t), true); err != nil {
		t.Fatal(err)
	}
	newCA, err := pki.LoadCA(ctxT(t), st)
	if err != nil {
		t.Fatal(err)
	}
	if c := readCert(t, filepath.Join(hosts[1].PKIDir(), "server.crt")); c.CheckSignatureFrom(newCA.Cert) != nil {
		t.Fatalf("%s's server certificate is not the new CA's after its reissue: %s", hosts[1].Name, c.Issuer)
	}
	if _, err := long.Cli.Status(ctxT(t), hosts[1].ClientURL()); err != nil {
		t.Errorf("the long session cannot reach %s after it reissued from the new CA: %v", hosts[1].Name, err)
	}
	ms, err := long.MemberList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == hosts[1].Name && !long.Healthy(ctxT(t), m) {
			t.Errorf("the long session takes %s, reissued from the new CA, for unhealthy", m.Name)
		}
	}
}
