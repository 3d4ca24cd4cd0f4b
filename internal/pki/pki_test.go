package pki

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

func newStore(t *testing.T) *filestore.Store {
	t.Helper()
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func newCA(t *testing.T, st store.Store) *CA {
	t.Helper()
	ctx := context.Background()
	if _, err := Init(ctx, st, InitOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func storeBytes(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	b, _, err := store.GetBytes(context.Background(), st, key, maxObject)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := parseCerts(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return certs[0]
}

// snapshot is the content of every file in dir.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[de.Name()] = string(b)
	}
	return out
}

func changed(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if before[k] != v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func TestPKIInitIdempotent(t *testing.T) {
	for _, tc := range []struct {
		opts InitOptions
		alg  string
	}{
		{InitOptions{}, "ECDSA P-256"},
		{InitOptions{Algorithm: "rsa"}, "RSA 2048"},
		{InitOptions{Algorithm: "rsa", RSABits: 3072, Validity: 5 * 365 * 24 * time.Hour}, "RSA 3072"},
	} {
		t.Run(tc.alg, func(t *testing.T) {
			ctx := context.Background()
			st := newStore(t)
			if _, err := LoadCA(ctx, st); !errors.Is(err, ErrNoCA) || !strings.Contains(err.Error(), "etcdadm pki init") {
				t.Fatalf("LoadCA of an empty store: %v", err)
			}
			created, err := Init(ctx, st, tc.opts)
			if err != nil || !created {
				t.Fatalf("first init: %v %v", created, err)
			}
			crt, key := storeBytes(t, st, CACertKey), storeBytes(t, st, CAKeyKey)
			created, err = Init(ctx, st, InitOptions{Algorithm: "rsa"})
			if err != nil || created {
				t.Fatalf("second init: created=%v %v", created, err)
			}
			if !bytes.Equal(crt, storeBytes(t, st, CACertKey)) || !bytes.Equal(key, storeBytes(t, st, CAKeyKey)) {
				t.Fatal("second init changed the CA")
			}
			ca, err := LoadCA(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			if ca.KeyAlgorithm() != tc.alg || !ca.Cert.IsCA || len(ca.Bundle) != 1 {
				t.Fatalf("CA %s IsCA=%v bundle %d", ca.KeyAlgorithm(), ca.Cert.IsCA, len(ca.Bundle))
			}
			want := tc.opts.Validity
			if want == 0 {
				want = DefaultCAValidity
			}
			if d := time.Until(ca.Cert.NotAfter) - want; d > time.Minute || d < -time.Minute {
				t.Fatalf("CA valid until %s, want about now+%s", ca.Cert.NotAfter, want)
			}
		})
	}
}

func TestPKIInitValidate(t *testing.T) {
	for _, tc := range []struct {
		opts InitOptions
		want string
	}{
		{InitOptions{Algorithm: "ed25519"}, "use ecdsa or rsa"},
		{InitOptions{Algorithm: "rsa", RSABits: 4096}, "use 2048 or 3072"},
		{InitOptions{RSABits: 2048}, "--algorithm rsa"},
		{InitOptions{Validity: time.Hour}, "too short"},
	} {
		st := newStore(t)
		_, err := Init(context.Background(), st, tc.opts)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.opts, err, tc.want)
		}
		if es, _ := st.List(context.Background(), ""); len(es) != 0 {
			t.Errorf("%+v: refused init wrote %v", tc.opts, es)
		}
	}
}

// crashingStore fails writes of one key, as a crash between two writes
// would leave the store.
type crashingStore struct {
	store.Store
	failKey string
}

func (c crashingStore) Put(ctx context.Context, key string, r io.Reader, opts store.PutOptions) (store.Info, error) {
	if key == c.failKey {
		return store.Info{}, errors.New("simulated crash")
	}
	return c.Store.Put(ctx, key, r, opts)
}

func TestPKIInitRecoversHalfWrittenCA(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	if _, err := Init(ctx, crashingStore{st, CACertKey}, InitOptions{}); err == nil {
		t.Fatal("init with a failing certificate write succeeded")
	}
	key := storeBytes(t, st, CAKeyKey)
	_, err := LoadCA(ctx, st)
	if !errors.Is(err, ErrIncompleteCA) || !strings.Contains(err.Error(), "run it again") {
		t.Fatalf("LoadCA of a half-written CA: %v", err)
	}
	created, err := Init(ctx, st, InitOptions{})
	if err != nil || !created {
		t.Fatalf("re-run: created=%v %v", created, err)
	}
	if !bytes.Equal(key, storeBytes(t, st, CAKeyKey)) {
		t.Fatal("re-run replaced the stored key")
	}
	ca, err := LoadCA(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := parseKey(key)
	if !samePublicKey(ca.Cert.PublicKey, k.Public()) {
		t.Fatal("the finished CA certificate is not for the stored key")
	}

	// A certificate without its key is not something init writes; it
	// refuses and says what to do, without touching anything.
	st2 := newStore(t)
	store.PutBytes(ctx, st2, CACertKey, storeBytes(t, st, CACertKey), store.PutOptions{})
	if _, err := Init(ctx, st2, InitOptions{}); !errors.Is(err, ErrCAKeyMissing) || !strings.Contains(err.Error(), "put the key back") {
		t.Fatalf("init with ca.crt but no ca.key: %v", err)
	}
	if _, err := st2.Stat(ctx, CAKeyKey); !errors.Is(err, store.ErrNotFound) {
		t.Fatal("init wrote a key beside a foreign certificate")
	}

	// A key that belongs to no certificate of the bundle.
	other := newStore(t)
	newCA(t, other)
	store.PutBytes(ctx, st2, CAKeyKey, storeBytes(t, other, CAKeyKey), store.PutOptions{})
	if _, err := LoadCA(ctx, st2); !errors.Is(err, ErrCAMismatch) {
		t.Fatalf("LoadCA of a mismatched pair: %v", err)
	}
}

func TestPKIInitConcurrent(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	var wg sync.WaitGroup
	created := make([]bool, 8)
	errs := make([]error, 8)
	for i := range created {
		wg.Go(func() { created[i], errs[i] = Init(ctx, st, InitOptions{}) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range created {
		if c {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d inits report creating the CA, want 1", n)
	}
	if _, err := LoadCA(ctx, st); err != nil {
		t.Fatal(err)
	}
}

func TestPKIIssueMember(t *testing.T) {
	ca := newCA(t, newStore(t))
	dir := filepath.Join(t.TempDir(), "etc", "etcd", "pki")
	req := MemberRequest{
		Name:     "etcd-a",
		DNSNames: []string{"etcd-a.cluster.example", "ETCD-A.internal"},
		IPs:      []net.IP{net.ParseIP("10.0.0.5"), net.ParseIP("fd00::5"), net.ParseIP("127.0.0.1")},
	}
	if err := ca.IssueMember(t.Context(), dir, req, Owner{-1, -1}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, want 0700", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(filepath.Dir(dir)); fi.Mode().Perm() != 0o755 {
		t.Fatalf("parent dir mode %v: the etcd user could not reach its dir", fi.Mode())
	}
	modes := map[string]os.FileMode{"ca.crt": 0o644, "peer.crt": 0o644, "server.crt": 0o644, "client.crt": 0o644,
		"peer.key": 0o600, "server.key": 0o600, "client.key": 0o600}
	des, _ := os.ReadDir(dir)
	if len(des) != len(modes) {
		t.Fatalf("dir holds %d files, want %d", len(des), len(modes))
	}
	for name, mode := range modes {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); !bytes.Equal(b, ca.BundlePEM()) {
		t.Error("ca.crt is not the bundle")
	}
	wantDNS := []string{"etcd-a", "etcd-a.cluster.example", "etcd-a.internal", "localhost"}
	wantIPs := []string{"10.0.0.5", "127.0.0.1", "::1", "fd00::5"}
	for _, base := range []string{"peer", "server"} {
		c := readCert(t, filepath.Join(dir, base+".crt"))
		var ips []string
		for _, ip := range c.IPAddresses {
			ips = append(ips, ip.String())
		}
		slices.Sort(ips)
		if !slices.Equal(c.DNSNames, wantDNS) || !slices.Equal(ips, wantIPs) {
			t.Errorf("%s SANs %v %v, want %v %v", base, c.DNSNames, ips, wantDNS, wantIPs)
		}
		for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			for _, host := range []string{"etcd-a", "etcd-a.cluster.example", "10.0.0.5", "::1"} {
				if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: host, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
					t.Errorf("%s for %s usage %v: %v", base, host, u, err)
				}
			}
		}
		if c.Subject.CommonName != "etcd-"+base+"-etcd-a" {
			t.Errorf("%s CN %q", base, c.Subject.CommonName)
		}
		if d := c.NotAfter.Sub(time.Now()) - DefaultLeafValidity; d > time.Minute || d < -time.Minute {
			t.Errorf("%s valid until %s, want about a year", base, c.NotAfter)
		}
	}
	cl := readCert(t, filepath.Join(dir, "client.crt"))
	if cl.Subject.CommonName != "etcd-member-etcd-a" || !slices.Equal(cl.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("client certificate %s %v", cl.Subject, cl.ExtKeyUsage)
	}
	for _, base := range []string{"peer", "server", "client"} {
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key")); err != nil {
			t.Errorf("%s pair: %v", base, err)
		}
	}
	if err := ca.IssueMember(t.Context(), dir, MemberRequest{Name: "etcd_a"}, Owner{-1, -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad member name: %v", err)
	}
}

func TestPKIIssueMemberNoChurn(t *testing.T) {
	ca := newCA(t, newStore(t))
	dir := t.TempDir()
	req := MemberRequest{Name: "etcd-b", IPs: []net.IP{net.ParseIP("10.0.0.6")}, Validity: 90 * 24 * time.Hour}
	now := time.Now()
	if _, err := ca.issueMember(t.Context(), dir, req, Owner{-1, -1}, now, false); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	day61 := now.Add(61 * 24 * time.Hour)
	for _, step := range []struct {
		name string
		at   time.Time
		req  MemberRequest
		want []string
	}{
		{"same request", now, req, nil},
		{"same SANs, written differently", now, MemberRequest{Name: "etcd-b", IPs: []net.IP{net.ParseIP("10.0.0.6").To16(), net.ParseIP("::1")}, DNSNames: []string{"localhost"}}, nil},
		{"more than a third left", now.Add(55 * 24 * time.Hour), req, nil},
		{"a third left", day61, req, []string{"client.crt", "client.key", "peer.crt", "peer.key", "server.crt", "server.key"}},
	} {
		issued, err := ca.issueMember(t.Context(), dir, step.req, Owner{-1, -1}, step.at, false)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		after := snapshot(t, dir)
		if got := changed(before, after); !slices.Equal(got, step.want) {
			t.Errorf("%s: changed %v (issued %v), want %v", step.name, got, issued, step.want)
		}
		before = after
	}

	// A new address changes the peer and server SANs, not the client's.
	req.IPs = append(req.IPs, net.ParseIP("10.0.0.7"))
	if _, err := ca.issueMember(t.Context(), dir, req, Owner{-1, -1}, day61, false); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, dir)
	if got := changed(before, after); !slices.Equal(got, []string{"peer.crt", "peer.key", "server.crt", "server.key"}) {
		t.Errorf("new IP: changed %v", got)
	}
	before = after

	// A key that is not the certificate's (a crash between the two
	// renames) is repaired; a wrong mode is fixed without a new key.
	os.WriteFile(filepath.Join(dir, "server.key"), []byte(before["peer.key"]), 0o600)
	os.Chmod(filepath.Join(dir, "client.key"), 0o644)
	os.WriteFile(filepath.Join(dir, ".peer.key"+atomicfile.TempMark+"123"), []byte("half"), 0o600)
	issued, err := ca.issueMember(t.Context(), dir, req, Owner{-1, -1}, day61, false)
	if err != nil || !slices.Equal(issued, []string{"server.crt"}) {
		t.Fatalf("repair: issued %v %v", issued, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "client.key")); fi.Mode().Perm() != 0o600 {
		t.Errorf("client.key mode %v not fixed", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, ".peer.key"+atomicfile.TempMark+"123")); !os.IsNotExist(err) {
		t.Error("a crashed writer's temp file was left behind")
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")); err != nil {
		t.Errorf("repaired pair: %v", err)
	}
}

func TestPKIIssueClient(t *testing.T) {
	ca := newCA(t, newStore(t))
	certPEM, keyPEM, err := ca.IssueClient("kube-apiserver-etcd-client", 0)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := pair.Leaf
	if c.Subject.CommonName != "kube-apiserver-etcd-client" || len(c.DNSNames)+len(c.IPAddresses) != 0 {
		t.Errorf("client certificate %s %v %v", c.Subject, c.DNSNames, c.IPAddresses)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Error(err)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate verifies as a server")
	}

	dir := t.TempDir()
	issued, err := ca.IssueClientFiles(t.Context(), dir, "operator", 24*time.Hour, Owner{-1, -1})
	if err != nil || !issued {
		t.Fatalf("IssueClientFiles: %v %v", issued, err)
	}
	before := snapshot(t, dir)
	if len(before) != 3 || before["ca.crt"] == "" || before["operator.crt"] == "" {
		t.Fatalf("files %v", before)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "operator.key")); fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", fi.Mode().Perm())
	}
	if issued, err := ca.IssueClientFiles(t.Context(), dir, "operator", 24*time.Hour, Owner{-1, -1}); err != nil || issued || len(changed(before, snapshot(t, dir))) != 0 {
		t.Fatalf("second IssueClientFiles: issued=%v %v", issued, err)
	}
	for _, bad := range []string{"server", "ca", "../x", ".hidden", ""} {
		if _, err := ca.IssueClientFiles(t.Context(), dir, bad, 0, Owner{-1, -1}); !errors.Is(err, ErrInvalid) {
			t.Errorf("client name %q: %v", bad, err)
		}
	}
}

func TestPKIRenewDir(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	ca := newCA(t, st)
	dir := t.TempDir()
	now := time.Now()
	if _, err := ca.issueMember(t.Context(), dir, MemberRequest{Name: "etcd-c"}, Owner{-1, -1}, now, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.writeLeaves(t.Context(), dir, []leaf{mustClientLeaf(t, "apiserver", 2*time.Hour)}, Owner{-1, -1}, now, true); err != nil {
		t.Fatal(err)
	}
	// Not ours: a certificate of another CA, short-lived, with its key.
	other := newCA(t, newStore(t))
	foreign, foreignKey, _ := other.IssueClient("foreign", time.Hour)
	os.WriteFile(filepath.Join(dir, "foreign.crt"), foreign, 0o644)
	os.WriteFile(filepath.Join(dir, "foreign.key"), foreignKey, 0o600)
	oldAPI := readCert(t, filepath.Join(dir, "apiserver.crt"))

	renewed, err := RenewDir(ctx, st, dir, Owner{-1, -1}, now.Add(time.Hour))
	if err != nil || len(renewed) != 0 {
		t.Fatalf("renew with nothing due: %v %v", renewed, err)
	}
	before := snapshot(t, dir)
	at := now.Add(90 * time.Minute)
	renewed, err = RenewDir(ctx, st, dir, Owner{-1, -1}, at)
	if err != nil || !slices.Equal(renewed, []string{"apiserver.crt"}) {
		t.Fatalf("renew: %v %v", renewed, err)
	}
	// Only the certificate: a reader never sees it beside a key of
	// another certificate.
	if got := changed(before, snapshot(t, dir)); !slices.Equal(got, []string{"apiserver.crt"}) {
		t.Fatalf("renew changed %v", got)
	}
	c := readCert(t, filepath.Join(dir, "apiserver.crt"))
	if c.SerialNumber.Cmp(oldAPI.SerialNumber) == 0 || !samePublicKey(c.PublicKey, oldAPI.PublicKey) {
		t.Error("renewal kept the serial or changed the key")
	}
	if !bytes.Equal(c.RawSubject, oldAPI.RawSubject) || !slices.Equal(c.ExtKeyUsage, oldAPI.ExtKeyUsage) {
		t.Errorf("renewal changed subject or usage: %s %v", c.Subject, c.ExtKeyUsage)
	}
	if life := c.NotAfter.Sub(at); life < 2*time.Hour-time.Second || life > 2*time.Hour+time.Second {
		t.Errorf("renewed for %s, want 2h as before", life)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "apiserver.key")); fi.Mode().Perm() != 0o600 {
		t.Errorf("renewed key mode %v", fi.Mode().Perm())
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")); err != nil {
		t.Error(err)
	}
	if renewed, err := RenewDir(ctx, st, dir, Owner{-1, -1}, at); err != nil || len(renewed) != 0 {
		t.Fatalf("renew right after a renewal: %v %v", renewed, err)
	}

	// Everything due (member certificates too) once they near their end;
	// the member certificates keep their SANs.
	late := now.Add(300 * 24 * time.Hour)
	renewed, err = RenewDir(ctx, st, dir, Owner{-1, -1}, late)
	if err != nil || !slices.Equal(renewed, []string{"apiserver.crt", "client.crt", "peer.crt", "server.crt"}) {
		t.Fatalf("late renew: %v %v", renewed, err)
	}
	srv := readCert(t, filepath.Join(dir, "server.crt"))
	if !slices.Equal(srv.DNSNames, []string{"etcd-c", "localhost"}) || len(srv.IPAddresses) != 2 || srv.Subject.CommonName != "etcd-server-etcd-c" {
		t.Errorf("renewed server certificate %s %v %v", srv.Subject, srv.DNSNames, srv.IPAddresses)
	}
	if before["foreign.crt"] != snapshot(t, dir)["foreign.crt"] {
		t.Error("renew touched another CA's certificate")
	}

	// A changed bundle in the store reaches the directory. The other CA
	// is now one of ours, so its expired certificate is renewed, by the
	// CA that signs now.
	bundle := append(storeBytes(t, st, CACertKey), other.BundlePEM()...)
	store.PutBytes(ctx, st, CACertKey, bundle, store.PutOptions{})
	renewed, err = RenewDir(ctx, st, dir, Owner{-1, -1}, late)
	if err != nil || !slices.Equal(renewed, []string{"ca.crt", "foreign.crt"}) {
		t.Fatalf("renew after a bundle change: %v %v", renewed, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); !bytes.Equal(b, bundle) {
		t.Error("ca.crt is not the new bundle")
	}
	if readCert(t, filepath.Join(dir, "foreign.crt")).CheckSignatureFrom(ca.Cert) != nil {
		t.Error("renewed certificate not signed by the signing CA")
	}
}

func mustClientLeaf(t *testing.T, name string, v time.Duration) leaf {
	t.Helper()
	l, err := clientLeaf(name, v)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestPKIBundleTwoCAs is a rollover: the bundle holds the old and the new
// CA, the key is the new one's. Certificates of both verify; new ones are
// signed by the new CA; a member's next join keeps what the old CA signed
// (clients that know only the old CA still verify it) and a reissue, what a
// CA rotation runs, replaces them.
func TestPKIBundleTwoCAs(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	oldCA := newCA(t, st)
	dir := t.TempDir()
	if err := oldCA.IssueMember(t.Context(), dir, MemberRequest{Name: "etcd-a"}, Owner{-1, -1}); err != nil {
		t.Fatal(err)
	}
	oldServer := readCert(t, filepath.Join(dir, "server.crt"))

	newKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := selfSign(newKey, 365*24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := encodeKey(newKey)
	store.PutBytes(ctx, st, CACertKey, append(encodeCert(der), storeBytes(t, st, CACertKey)...), store.PutOptions{})
	store.PutBytes(ctx, st, CAKeyKey, keyPEM, store.PutOptions{})
	ca, err := LoadCA(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(ca.Bundle) != 2 || !bytes.Equal(ca.Cert.Raw, der) {
		t.Fatalf("bundle of %d, signer %s", len(ca.Bundle), ca.Cert.Subject)
	}
	if ca.Bundle[0].Subject.CommonName == ca.Bundle[1].Subject.CommonName {
		t.Errorf("both CAs are called %q", ca.Bundle[0].Subject.CommonName)
	}
	certPEM, _, err := ca.IssueClient("new", 0)
	if err != nil {
		t.Fatal(err)
	}
	newCert, _ := parseCerts(certPEM)
	for name, c := range map[string]*x509.Certificate{"old CA's": oldServer, "new CA's": newCert[0]} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s certificate with the bundle: %v", name, err)
		}
	}
	if newCert[0].CheckSignatureFrom(ca.Cert) != nil {
		t.Error("not signed by the CA of the key")
	}
	// The key may also be the old one's: the signer follows the key.
	store.PutBytes(ctx, st, CAKeyKey, storeBytes(t, newStoreWithCA(t, oldCA), CAKeyKey), store.PutOptions{})
	if back, err := LoadCA(ctx, st); err != nil || !bytes.Equal(back.Cert.Raw, oldCA.Cert.Raw) {
		t.Fatalf("signer with the old key: %v", err)
	}
	store.PutBytes(ctx, st, CAKeyKey, keyPEM, store.PutOptions{})

	issued, err := ca.issueMember(t.Context(), dir, MemberRequest{Name: "etcd-a"}, Owner{-1, -1}, time.Now(), false)
	if err != nil || len(issued) != 0 {
		t.Fatalf("join after the rollover: issued %v %v; want the old CA's certificates kept", issued, err)
	}
	issued, err = ca.issueMember(t.Context(), dir, MemberRequest{Name: "etcd-a"}, Owner{-1, -1}, time.Now(), true)
	if err != nil || len(issued) != 3 {
		t.Fatalf("reissue after the rollover: issued %v %v", issued, err)
	}
	if c := readCert(t, filepath.Join(dir, "server.crt")); c.CheckSignatureFrom(ca.Cert) != nil {
		t.Error("the reissued server certificate is not the new CA's")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); len(mustCerts(t, b)) != 2 {
		t.Error("the member's ca.crt is not the two-CA bundle")
	}
}

func mustCerts(t *testing.T, b []byte) []*x509.Certificate {
	t.Helper()
	c, err := parseCerts(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newStoreWithCA is a store holding ca's key, to read it back as PEM.
func newStoreWithCA(t *testing.T, ca *CA) store.Store {
	t.Helper()
	st := newStore(t)
	b, err := encodeKey(ca.key)
	if err != nil {
		t.Fatal(err)
	}
	store.PutBytes(context.Background(), st, CAKeyKey, b, store.PutOptions{})
	return st
}

func TestPKIAdoptForeignKeyFormats(t *testing.T) {
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	eb, _ := x509.MarshalECPrivateKey(ek)
	for name, b := range map[string][]byte{
		"PKCS#1": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)}),
		"SEC 1":  append(pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8, 42, 134, 72, 206, 61, 3, 1, 7}}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: eb})...),
	} {
		k, err := parseKey(b)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		der, err := selfSign(k, 48*time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseCA(encodeCert(der), b); err != nil {
			t.Errorf("%s CA: %v", name, err)
		}
	}
}

func TestPKICALimits(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	now := time.Now()
	if _, err := initCA(ctx, st, InitOptions{Validity: 48 * time.Hour}, now); err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.IssueMember(t.Context(), dir, MemberRequest{Name: "etcd-a"}, Owner{-1, -1}); err != nil {
		t.Fatal(err)
	}
	if c := readCert(t, filepath.Join(dir, "peer.crt")); !c.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("member certificate valid until %s, beyond the CA's %s", c.NotAfter, ca.Cert.NotAfter)
	}
	_, err = ca.issueMember(t.Context(), t.TempDir(), MemberRequest{Name: "etcd-a"}, Owner{-1, -1}, now.Add(49*time.Hour), false)
	if !errors.Is(err, ErrCAExpired) {
		t.Fatalf("issue with an expired CA: %v", err)
	}
	if _, err := ca.Renew(t.Context(), dir, Owner{-1, -1}, now.Add(49*time.Hour)); !errors.Is(err, ErrCAExpired) {
		t.Fatalf("renew with an expired CA: %v", err)
	}
}

func TestPKIExpiryAndInspect(t *testing.T) {
	ca := newCA(t, newStore(t))
	dir := t.TempDir()
	if err := ca.IssueMember(t.Context(), dir, MemberRequest{Name: "etcd-a", Validity: 30 * 24 * time.Hour}, Owner{-1, -1}); err != nil {
		t.Fatal(err)
	}
	exp, err := Expiry(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(exp) != 4 || !exp["ca.crt"].Equal(ca.Cert.NotAfter) || exp["server.crt"].Sub(time.Now()) > 31*24*time.Hour {
		t.Fatalf("expiry %v", exp)
	}
	infos, err := Inspect(dir, time.Now().Add(25*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range infos {
		if ci.File == "ca.crt" {
			if !ci.IsCA || ci.Due {
				t.Errorf("ca.crt %+v", ci)
			}
			continue
		}
		if !ci.Due || ci.Left <= 0 || ci.Left > 0.2 {
			t.Errorf("%s: due=%v left=%.2f at day 25 of 30", ci.File, ci.Due, ci.Left)
		}
	}
	os.WriteFile(filepath.Join(dir, "bad.crt"), []byte("nonsense"), 0o644)
	if _, err := Expiry(dir); err == nil || !strings.Contains(err.Error(), "bad.crt") {
		t.Errorf("a broken certificate file: %v", err)
	}
}

func TestPKIParseOwner(t *testing.T) {
	for in, want := range map[string]Owner{"": {-1, -1}, "1000:1001": {1000, 1001}, "root": {0, 0}, "0:root": {0, 0}, "232": {232, -1}} {
		got, err := ParseOwner(in)
		if err != nil || got != want {
			t.Errorf("ParseOwner(%q) = %v %v, want %v", in, got, err, want)
		}
	}
	if _, err := ParseOwner("no-such-user-here"); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown user: %v", err)
	}
	// An account database that answers with ids that are not numbers (a
	// broken NSS module) is an error, never uid or gid 0.
	badUser := func(string) (*user.User, error) { return &user.User{Uid: "S-1-5-18", Gid: "1000"}, nil }
	badGroup := func(string) (*user.Group, error) { return &user.Group{Gid: "wheel"}, nil }
	for _, in := range []string{"etcd", "etcd:etcd", "1000:etcd"} {
		if o, err := parseOwner(in, badUser, badGroup); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not a number") {
			t.Errorf("owner %q with a non-numeric id: %v %v, want ErrInvalid", in, o, err)
		}
	}
	okUser := func(string) (*user.User, error) { return &user.User{Uid: "232", Gid: "none"}, nil }
	if o, err := parseOwner("etcd", okUser, badGroup); err == nil {
		t.Errorf("user with a non-numeric primary gid: %v, want an error", o)
	}
}

// ownerToGive is an owner the test can give files to that differs from
// what a new file gets: nobody (65534) as root; otherwise the test's own
// uid and, when it has one, a supplementary group (chown(2) allows that
// without privilege). Without a supplementary group only the uid and
// primary group are left, and the checks below still run.
func ownerToGive(t *testing.T) Owner {
	t.Helper()
	if os.Geteuid() == 0 {
		return Owner{65534, 65534}
	}
	o := Owner{os.Geteuid(), os.Getegid()}
	groups, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if g != o.GID {
			o.GID = g
			break
		}
	}
	t.Logf("not root: giving files to %d:%d", o.UID, o.GID)
	return o
}

func TestPKIOwnership(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	ca := newCA(t, st)
	dir := filepath.Join(t.TempDir(), "pki")
	want := ownerToGive(t)
	if err := ca.IssueMember(t.Context(), dir, MemberRequest{Name: "etcd-a", Validity: time.Minute}, want); err != nil {
		t.Fatal(err)
	}
	owned := func(name string) {
		t.Helper()
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if s := fi.Sys().(*syscall.Stat_t); int(s.Uid) != want.UID || int(s.Gid) != want.GID {
			t.Errorf("%s owned by %d:%d, want %d:%d", name, s.Uid, s.Gid, want.UID, want.GID)
		}
	}
	for _, n := range []string{".", "ca.crt", "server.crt", "server.key", "client.key"} {
		owned(n)
	}
	// Renewed files keep the owner of the files they replace.
	renewed, err := RenewDir(ctx, st, dir, Owner{-1, -1}, time.Now())
	if err != nil || len(renewed) != 3 {
		t.Fatalf("renew: %v %v", renewed, err)
	}
	for _, n := range []string{"peer.key", "server.key", "client.crt"} {
		owned(n)
	}
}

func TestPKIConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	ca := newCA(t, st)
	dir := t.TempDir()
	req := MemberRequest{Name: "etcd-a", Validity: time.Minute} // always due
	if err := ca.IssueMember(t.Context(), dir, req, Owner{-1, -1}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 10 {
		wg.Go(func() {
			if i%2 == 0 {
				errs <- ca.IssueMember(t.Context(), dir, req, Owner{-1, -1})
			} else {
				_, err := RenewDir(ctx, st, dir, Owner{-1, -1}, time.Now())
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for _, base := range []string{"peer", "server", "client"} {
		if _, err := readPair(dir, base); err != nil {
			t.Errorf("%s after concurrent writers: %v", base, err)
		}
	}
}

// A writer waits for another writer's lock on the directory no longer
// than its context, and leaves the directory as it was.
func TestPKIDirLockBoundedByContext(t *testing.T) {
	ca := newCA(t, newStore(t))
	dir := filepath.Join(t.TempDir(), "pki")
	if err := ca.IssueMember(t.Context(), dir, MemberRequest{Name: "etcd-a"}, Owner{-1, -1}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	holder, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for name, write := range map[string]func(context.Context) error{
		"issue member": func(ctx context.Context) error {
			return ca.IssueMember(ctx, dir, MemberRequest{Name: "etcd-a"}, Owner{-1, -1})
		},
		"issue client": func(ctx context.Context) error {
			_, err := ca.IssueClientFiles(ctx, dir, "operator", time.Hour, Owner{-1, -1})
			return err
		},
		"renew": func(ctx context.Context) error {
			_, err := ca.Renew(ctx, dir, Owner{-1, -1}, time.Now().Add(300*24*time.Hour))
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		err := write(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with the directory locked elsewhere: %v, want context.DeadlineExceeded", name, err)
		}
	}
	if c := changed(before, snapshot(t, dir)); len(c) != 0 {
		t.Errorf("files changed without the lock: %v", c)
	}
}

// A client or etcd that loads a certificate and its key while renewals
// replace them never gets a pair that does not match (etcd reads both
// files on every handshake): 200 renewals under a reader in a loop.
func TestRenewNeverShowsAMismatchedPair(t *testing.T) {
	st := newStore(t)
	ca := newCA(t, st)
	dir := t.TempDir()
	now := time.Now()
	if _, err := ca.writeLeaves(t.Context(), dir, []leaf{mustClientLeaf(t, "client", 2*time.Hour)}, Owner{-1, -1}, now, true); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	bad := make(chan error, 1)
	go func() {
		defer close(bad)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")); err != nil {
				bad <- err
				return
			}
		}
	}()
	for i := 1; i <= 200; i++ {
		at := now.Add(time.Duration(i) * 90 * time.Minute)
		if renewed, err := ca.Renew(t.Context(), dir, Owner{-1, -1}, at); err != nil || len(renewed) != 1 {
			t.Fatalf("renewal %d: %v %v", i, renewed, err)
		}
	}
	close(done)
	if err := <-bad; err != nil {
		t.Fatalf("a reader loaded a pair that does not match during renewals: %v", err)
	}
}
