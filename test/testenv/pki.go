package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a throwaway certificate authority with the certificates an etcd
// cluster with mutual TLS needs, as PEM files in Dir.
type PKI struct {
	Dir                   string
	CACert                string
	CAKey                 string // the CA's private key (0600), to adopt the cluster
	ServerCert, ServerKey string
	PeerCert, PeerKey     string
	ClientCert, ClientKey string
}

// NewPKI creates an ECDSA P-256 CA and server, peer and client (CN root)
// certificates valid for localhost, 127.0.0.1 and ::1.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{
		Dir:        dir,
		CACert:     filepath.Join(dir, "ca.crt"),
		CAKey:      filepath.Join(dir, "ca.key"),
		ServerCert: filepath.Join(dir, "server.crt"),
		ServerKey:  filepath.Join(dir, "server.key"),
		PeerCert:   filepath.Join(dir, "peer.crt"),
		PeerKey:    filepath.Join(dir, "peer.key"),
		ClientCert: filepath.Join(dir, "client.crt"),
		ClientKey:  filepath.Join(dir, "client.key"),
	}
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "etcdadm test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testenv: create CA: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("testenv: parse CA: %v", err)
	}
	writePEM(t, p.CACert, "CERTIFICATE", caDER, 0o644)
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		t.Fatalf("testenv: CA key: %v", err)
	}
	writePEM(t, p.CAKey, "EC PRIVATE KEY", caKeyDER, 0o600)

	hosts := []string{"localhost"}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	// The server certificate gets client auth too: with --client-cert-auth
	// etcd's gRPC gateway dials its own client port with it.
	leaf(t, ca, caKey, "etcd server", hosts, ips, both, p.ServerCert, p.ServerKey)
	leaf(t, ca, caKey, "etcd peer", hosts, ips, both, p.PeerCert, p.PeerKey)
	leaf(t, ca, caKey, "root", nil, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, p.ClientCert, p.ClientKey)
	return p
}

// ClientTLS is a client configuration presenting the client certificate
// and trusting only the test CA.
func (p *PKI) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	c, err := p.clientTLS()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return c
}

func (p *PKI) clientTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("load client certificate: %w", err)
	}
	caPEM, err := os.ReadFile(p.CACert)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no certificate", p.CACert)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// Expired is a client certificate of p's CA whose validity ended an hour
// ago (files in a new directory).
type Expired struct{ Cert, Key string }

// ExpiredClient issues an expired client certificate from p's CA.
func ExpiredClient(t testing.TB, p *PKI) Expired {
	t.Helper()
	caPEM, err1 := os.ReadFile(p.CACert)
	keyPEM, err2 := os.ReadFile(p.CAKey)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		t.Fatal("testenv: CA files hold no PEM")
	}
	ca, err1 := x509.ParseCertificate(cb.Bytes)
	caKey, err2 := x509.ParseECPrivateKey(kb.Bytes)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	dir := t.TempDir()
	e := Expired{Cert: filepath.Join(dir, "expired.crt"), Key: filepath.Join(dir, "expired.key")}
	now := time.Now()
	leafValid(t, ca, caKey, "root", nil, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, e.Cert, e.Key, now.Add(-48*time.Hour), now.Add(-time.Hour))
	return e
}

func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, hosts []string, ips []net.IP, usage []x509.ExtKeyUsage, certFile, keyFile string) {
	t.Helper()
	now := time.Now()
	leafValid(t, ca, caKey, cn, hosts, ips, usage, certFile, keyFile, now.Add(-time.Hour), now.Add(7*24*time.Hour))
}

func leafValid(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, hosts []string, ips []net.IP, usage []x509.ExtKeyUsage, certFile, keyFile string, notBefore, notAfter time.Time) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     hosts,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testenv: create certificate %s: %v", cn, err)
	}
	writePEM(t, certFile, "CERTIFICATE", der, 0o644)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testenv: marshal key %s: %v", cn, err)
	}
	writePEM(t, keyFile, "PRIVATE KEY", keyDER, 0o600)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testenv: generate key: %v", err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("testenv: serial number: %v", err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte, mode os.FileMode) {
	t.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatalf("testenv: write %s: %v", path, err)
	}
}
