package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// shortValidity makes member certificates due for renewal from the start
// (issued certificates are back-dated 5 min, so a third of their lifetime
// is left at once), yet valid for the whole test.
const shortValidity = 2 * time.Minute

// TestPKIWithEtcd runs etcd of every supported version on certificates
// from IssueMember and checks what the renewal timer relies on: etcd
// serves a renewed certificate on the next connection, without a restart.
// It also records whether etcd reloads its trusted CA file (it does not:
// a changed bundle needs a restart).
func TestPKIWithEtcd(t *testing.T) {
	for _, v := range testenv.EtcdVersions() {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			testPKIWithEtcd(t, v)
		})
	}
}

func testPKIWithEtcd(t *testing.T, version string) {
	ctx := ctxT(t)
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Init(ctx, st, pki.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "pki")
	if err := ca.IssueMember(ctx, dir, pki.MemberRequest{Name: "m0", Validity: shortValidity}, pki.Owner{UID: -1, GID: -1}); err != nil {
		t.Fatal(err)
	}
	files := memberPKI(dir)
	m := testenv.StartEtcdMember(t, version, testenv.MemberConfig{Name: "m0", DataDir: filepath.Join(t.TempDir(), "m0")}, files)
	member := clientTLS(t, files.CACert, files.ClientCert, files.ClientKey)

	serverBefore := presented(t, m.ClientURL, member)
	peerBefore := presented(t, m.PeerURL, member)
	if !sameSerial(serverBefore, fileSerial(t, files.ServerCert)) {
		t.Fatal("etcd does not present server.crt")
	}

	renewed, err := pki.RenewDir(ctx, st, dir, pki.Owner{UID: -1, GID: -1}, time.Now())
	if err != nil || !slices.Equal(renewed, []string{"client.crt", "peer.crt", "server.crt"}) {
		t.Fatalf("renew: %v %v", renewed, err)
	}
	// New connections, same etcd process.
	member = clientTLS(t, files.CACert, files.ClientCert, files.ClientKey)
	serverAfter := presented(t, m.ClientURL, member)
	peerAfter := presented(t, m.PeerURL, member)
	serverReloaded := !sameSerial(serverAfter, serverBefore.SerialNumber) && sameSerial(serverAfter, fileSerial(t, files.ServerCert))
	peerReloaded := !sameSerial(peerAfter, peerBefore.SerialNumber) && sameSerial(peerAfter, fileSerial(t, files.PeerCert))
	t.Logf("etcd %s: renewed server certificate served without restart: %v; renewed peer certificate: %v", version, serverReloaded, peerReloaded)
	if !serverReloaded || !peerReloaded {
		t.Errorf("etcd %s serves the old certificates after renewal (server reloaded %v, peer %v): the renewal timer would need to restart etcd", version, serverReloaded, peerReloaded)
	}
	if !m.Running() {
		t.Fatal("etcd exited")
	}

	// The member's renewed client certificate and one from IssueClient
	// both work for reads and writes.
	kv(t, m, member, "/pki/member")
	certPEM, keyPEM, err := ca.IssueClient("operator", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	opDir := t.TempDir()
	os.WriteFile(filepath.Join(opDir, "operator.crt"), certPEM, 0o644)
	os.WriteFile(filepath.Join(opDir, "operator.key"), keyPEM, 0o600)
	operator := clientTLS(t, files.CACert, filepath.Join(opDir, "operator.crt"), filepath.Join(opDir, "operator.key"))
	kv(t, m, operator, "/pki/operator")

	// A client certificate of another CA is refused.
	other := testenv.NewPKI(t)
	stranger := clientTLS(t, files.CACert, other.ClientCert, other.ClientKey)
	if err := health(m.ClientURL, stranger); err == nil {
		t.Fatal("etcd accepted a client certificate of another CA")
	} else {
		t.Logf("etcd %s refuses another CA's client certificate: %v", version, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := putWith(cctx, m, stranger, "/pki/stranger"); err == nil {
		t.Fatal("a put with another CA's client certificate succeeded")
	}

	// Rollover of trust: the other CA joins the bundle in the store, renew
	// brings it to ca.crt. Does the running etcd trust it?
	b, info, err := store.GetBytes(ctx, st, pki.CACertKey, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := os.ReadFile(other.CACert)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutBytes(ctx, st, pki.CACertKey, append(b, otherCA...), store.PutOptions{IfMatch: info.ETag}); err != nil {
		t.Fatal(err)
	}
	renewed, err = pki.RenewDir(ctx, st, dir, pki.Owner{UID: -1, GID: -1}, time.Now())
	if err != nil || !slices.Contains(renewed, pki.CAFile) {
		t.Fatalf("renew after the bundle changed: %v %v", renewed, err)
	}
	caReloaded := health(m.ClientURL, stranger) == nil
	t.Logf("etcd %s: new CA in ca.crt trusted without restart: %v", version, caReloaded)
	if caReloaded {
		t.Errorf("etcd %s now reloads its trusted CA file: 'etcdadm pki renew' need not ask for a restart any more", version)
	}
	m.Stop()
	m = testenv.StartEtcdMember(t, version, m.Config, files)
	if err := health(m.ClientURL, stranger); err != nil {
		t.Fatalf("after a restart, etcd %s still refuses a client of the CA added to the bundle: %v", version, err)
	}
	kv(t, m, stranger, "/pki/stranger")
}

// memberPKI names the files IssueMember wrote, for testenv to start etcd on.
func memberPKI(dir string) *testenv.PKI {
	return &testenv.PKI{
		Dir:        dir,
		CACert:     filepath.Join(dir, pki.CAFile),
		ServerCert: filepath.Join(dir, pki.ServerCertFile),
		ServerKey:  filepath.Join(dir, pki.ServerKeyFile),
		PeerCert:   filepath.Join(dir, pki.PeerCertFile),
		PeerKey:    filepath.Join(dir, pki.PeerKeyFile),
		ClientCert: filepath.Join(dir, pki.ClientCertFile),
		ClientKey:  filepath.Join(dir, pki.ClientKeyFile),
	}
}

func clientTLS(t *testing.T, caFile, certFile, keyFile string) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	return &tls.Config{
		// Always present the certificate: Go would hold it back when the
		// server's list of acceptable CAs does not name its issuer, and
		// then etcd's verdict on it would go untested.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil },
		RootCAs:              pool,
		MinVersion:           tls.VersionTLS12,
	}
}

// health GETs /health over a new connection: nil when etcd accepted the
// client certificate.
func health(url string, cfg *tls.Config) error {
	_, err := get(url+"/health", cfg)
	return err
}

func get(url string, cfg *tls.Config) (*tls.ConnectionState, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.TLS == nil {
		return nil, fmt.Errorf("%s: no TLS", url)
	}
	return resp.TLS, nil
}

// presented is the certificate etcd shows on a new connection to url.
func presented(t *testing.T, url string, cfg *tls.Config) *x509.Certificate {
	t.Helper()
	cfg = cfg.Clone()
	var got *x509.Certificate
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		got = cs.PeerCertificates[0]
		return nil
	}
	host := strings.TrimPrefix(url, "https://")
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", host, cfg)
	if err != nil {
		t.Fatalf("TLS to %s: %v", url, err)
	}
	conn.Close()
	return got
}

func fileSerial(t *testing.T, path string) *big.Int {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".crt")+".key")
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf.SerialNumber
}

func sameSerial(c *x509.Certificate, serial *big.Int) bool { return c.SerialNumber.Cmp(serial) == 0 }

func newClient(m *testenv.EtcdMember, cfg *tls.Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func putWith(ctx context.Context, m *testenv.EtcdMember, cfg *tls.Config, key string) error {
	cli, err := newClient(m, cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Put(ctx, key, "x")
	return err
}

// kv writes and reads a key with the given client certificate.
func kv(t *testing.T, m *testenv.EtcdMember, cfg *tls.Config, key string) {
	t.Helper()
	cli, err := newClient(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, key, "v"); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	gr, err := cli.Get(ctx, key)
	if err != nil || len(gr.Kvs) != 1 || string(gr.Kvs[0].Value) != "v" {
		t.Fatalf("get %s: %v %v", key, gr, err)
	}
}

// TestPKICommands drives 'etcdadm pki' the way its --help describes it.
func TestPKICommands(t *testing.T) {
	storeDir := t.TempDir()
	url := "file://" + storeDir
	etcdadm := func(args ...string) result { return runBin(t, nil, "etcdadm", args...) }

	if r := etcdadm("pki", "show", "--store", url); r.code == 0 || !strings.Contains(r.stderr, "etcdadm pki init") {
		t.Fatalf("show without a CA: %+v", r)
	}
	if r := etcdadm("pki", "init", "--store", url, "--algorithm", "dsa"); r.code != 2 || !strings.Contains(r.stderr, "use ecdsa or rsa") {
		t.Fatalf("init with a bad algorithm: %+v", r)
	}
	if r := etcdadm("pki", "init", "--store", url); r.code != 0 || !strings.Contains(r.stdout, "created the cluster CA") || !strings.Contains(r.stdout, "ECDSA P-256") {
		t.Fatalf("init: %+v", r)
	}
	caFiles := func() string {
		a, _ := os.ReadFile(filepath.Join(storeDir, pki.CACertKey))
		b, _ := os.ReadFile(filepath.Join(storeDir, pki.CAKeyKey))
		return string(a) + string(b)
	}
	before := caFiles()
	if r := etcdadm("pki", "init", "--store", url, "--algorithm", "rsa"); r.code != 0 || !strings.Contains(r.stdout, "already holds") || !strings.Contains(r.stdout, "were not used") {
		t.Fatalf("second init: %+v", r)
	}
	if caFiles() != before {
		t.Fatal("second init changed the CA")
	}

	out := filepath.Join(t.TempDir(), "kube")
	r := etcdadm("pki", "issue-client", "kube-apiserver-etcd-client", "--store", url, "--out-dir", out, "--validity", "2h")
	if r.code != 0 || !strings.Contains(r.stdout, "wrote "+filepath.Join(out, "kube-apiserver-etcd-client.crt")) || strings.Contains(r.stdout+r.stderr, "PRIVATE KEY") {
		t.Fatalf("issue-client: %+v", r)
	}
	for name, mode := range map[string]os.FileMode{"kube-apiserver-etcd-client.crt": 0o644, "kube-apiserver-etcd-client.key": 0o600, "ca.crt": 0o644} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v", name, fi, err)
		}
	}
	if r := etcdadm("pki", "issue-client", "kube-apiserver-etcd-client", "--store", url, "--out-dir", out); r.code != 0 || !strings.Contains(r.stdout, "kept") {
		t.Fatalf("issue-client again: %+v", r)
	}
	if r := etcdadm("pki", "issue-client", "server", "--store", url, "--out-dir", out); r.code == 0 || !strings.Contains(r.stderr, "pick another name") {
		t.Fatalf("issue-client server: %+v", r)
	}
	if r := etcdadm("pki", "renew", "--store", url, "--dir", out); r.code != 0 || !strings.Contains(r.stdout, "nothing due") {
		t.Fatalf("renew with nothing due: %+v", r)
	}

	// A member directory with certificates due, and one of another CA.
	st, err := filestore.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	mdir := filepath.Join(t.TempDir(), "pki")
	if err := ca.IssueMember(ctxT(t), mdir, pki.MemberRequest{Name: "m0", Validity: shortValidity}, pki.Owner{UID: -1, GID: -1}); err != nil {
		t.Fatal(err)
	}
	other := testenv.NewPKI(t)
	for src, dst := range map[string]string{other.ClientCert: "foreign.crt", other.ClientKey: "foreign.key"} {
		b, _ := os.ReadFile(src)
		os.WriteFile(filepath.Join(mdir, dst), b, 0o600)
	}
	r = etcdadm("pki", "show", "--store", url, "--dir", mdir)
	if r.code != 0 || !strings.Contains(r.stdout, "etcd-server-m0") || !strings.Contains(r.stdout, "renewal due") || !strings.Contains(r.stdout, "unknown CA") || !strings.Contains(r.stdout, "localhost,m0,::1,127.0.0.1") {
		t.Fatalf("show --dir: %+v", r)
	}
	r = etcdadm("pki", "renew", "--store", url, "--dir", mdir)
	if r.code != 0 || strings.Count(r.stdout, "renewed ") != 3 || strings.Contains(r.stdout, "foreign") {
		t.Fatalf("renew: %+v", r)
	}
	r = etcdadm("pki", "show", "--store", url, "--dir", mdir, "-o", "json")
	var shown struct {
		CA []struct {
			Subject string
			Signs   bool
		}
		Certificates []struct {
			File, Status string
			Left         float64
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || len(shown.CA) != 1 || !shown.CA[0].Signs || len(shown.Certificates) != 5 {
		t.Fatalf("show -o json: %v %+v", err, r)
	}

	if r := etcdadm("pki", "--help"); !strings.Contains(r.stdout, "issue-client") || !strings.Contains(r.stdout, "restrict access") {
		t.Fatalf("pki --help: %+v", r)
	}
	if r := etcdadm("pki", "renew", "--help"); !strings.Contains(r.stdout, "third of its lifetime") || !strings.Contains(r.stdout, "ETCDADM_PKI_DIR") {
		t.Fatalf("pki renew --help: %+v", r)
	}
}
