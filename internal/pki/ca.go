// Package pki is the cluster PKI: a CA kept in the store, the certificates
// each member issues for itself when it joins, client certificates for
// consumers (kube-apiserver, an operator's etcdctl), and their renewal.
//
// In the store:
//
//	etcdadm/pki/ca.key   the CA's private key (PEM), written first
//	etcdadm/pki/ca.crt   the CA certificate, or a bundle of several for a rollover
//
// Anyone who can read the store can therefore sign certificates for the
// cluster: the store needs the access control of a CA key.
//
// In a member's directory (/etc/etcd/pki): ca.crt (the bundle), peer, server
// and client certificates with their keys. Files are replaced atomically
// and never churned: what is valid and fresh stays.
//
// Used by etcd-member-join (LoadCA, IssueMember), the renewal timer and the
// etcdadm CLI. It needs a store.Store and the local directory it writes.
package pki

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Where the CA lives in the store.
const (
	CACertKey = "etcdadm/pki/ca.crt"
	CAKeyKey  = "etcdadm/pki/ca.key"
)

// Defaults of the validities.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity = 365 * 24 * time.Hour
)

// MinLeafValidity bounds a member certificate's lifetime from below: the
// renewal timer must get several runs into its last third
// (ignition.PKIRenewEvery), and clocks may be minutes apart.
const MinLeafValidity = 6 * time.Minute

// CheckLeafValidity is the one rule for a member certificate's lifetime
// (ETCDADM_CERT_VALIDITY): render and member join apply it.
func CheckLeafValidity(d time.Duration) error {
	if d < MinLeafValidity || d > DefaultCAValidity {
		return fmt.Errorf("%w: certificate validity %s: want %s to %s (e.g. 8760h, a year: the default)", ErrInvalid, d, MinLeafValidity, time.Duration(DefaultCAValidity))
	}
	return nil
}

// maxObject bounds what LoadCA reads: a bundle of a few certificates.
const maxObject = 1 << 20

// InitOptions say what CA Init creates.
type InitOptions struct {
	// Algorithm is "ecdsa" (the default: P-256) or "rsa".
	Algorithm string
	// RSABits is 2048 (the default) or 3072; only with "rsa".
	RSABits int
	// Validity of the CA certificate; default 10 years.
	Validity time.Duration
}

func (o *InitOptions) defaults() {
	if o.Algorithm == "" {
		o.Algorithm = "ecdsa"
	}
	if o.Algorithm == "rsa" && o.RSABits == 0 {
		o.RSABits = 2048
	}
	if o.Validity == 0 {
		o.Validity = DefaultCAValidity
	}
}

// Validate checks the options after defaults.
func (o InitOptions) Validate() error {
	o.defaults()
	switch o.Algorithm {
	case "ecdsa":
		if o.RSABits != 0 {
			return fmt.Errorf("%w: RSA bits (%d) given with algorithm ecdsa; use --algorithm rsa", ErrInvalid, o.RSABits)
		}
	case "rsa":
		if o.RSABits != 2048 && o.RSABits != 3072 {
			return fmt.Errorf("%w: RSA key size %d: use 2048 or 3072", ErrInvalid, o.RSABits)
		}
	default:
		return fmt.Errorf("%w: algorithm %q: use ecdsa or rsa", ErrInvalid, o.Algorithm)
	}
	if o.Validity < 24*time.Hour {
		return fmt.Errorf("%w: CA validity %s is too short: certificates it signs end with it (use e.g. 87600h)", ErrInvalid, o.Validity)
	}
	return nil
}

func (o InitOptions) keySpec() keySpec {
	if o.Algorithm == "rsa" {
		return keySpec{"rsa", o.RSABits}
	}
	return keySpec{"ecdsa", 256}
}

// Init creates the cluster CA in the store unless one exists: created is
// false, and nothing is changed, when the store already holds a CA.
//
// The key is written first and the certificate second, both create-only.
// Interrupted in between, the store holds only the key; a re-run then
// signs a certificate for that stored key, so re-running always finishes
// the job. Hosts racing to init end up with the one key that won and a
// certificate for it.
func Init(ctx context.Context, st store.Store, opts InitOptions) (created bool, err error) {
	return initCA(ctx, st, opts, time.Now())
}

func initCA(ctx context.Context, st store.Store, opts InitOptions, now time.Time) (bool, error) {
	if err := opts.Validate(); err != nil {
		return false, fmt.Errorf("pki: init: %w", err)
	}
	opts.defaults()
	if _, err := st.Stat(ctx, CACertKey); err == nil {
		// A CA exists; LoadCA says whether it is whole and usable.
		if _, err := LoadCA(ctx, st); err != nil {
			return false, err
		}
		return false, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("pki: init: %s in %s: %w", CACertKey, st, err)
	}

	key, err := storedKey(ctx, st)
	if errors.Is(err, store.ErrNotFound) {
		key, err = createKey(ctx, st, CAKeyKey, opts.keySpec())
	}
	if err != nil {
		return false, err
	}
	der, err := selfSign(key, opts.Validity, now)
	if err != nil {
		return false, fmt.Errorf("pki: init: sign the CA certificate: %w", err)
	}
	_, err = store.PutBytes(ctx, st, CACertKey, encodeCert(der), store.PutOptions{IfNoneMatch: true})
	if errors.Is(err, store.ErrPrecondition) {
		// Another init finished first, for the same key.
		if _, err := LoadCA(ctx, st); err != nil {
			return false, err
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pki: init: write %s to %s: %w", CACertKey, st, err)
	}
	return true, nil
}

// storedKey reads ca.key; store.ErrNotFound when there is none.
func storedKey(ctx context.Context, st store.Store) (crypto.Signer, error) {
	return storedKeyAt(ctx, st, CAKeyKey)
}

// storedKeyAt reads the key stored under name (ca.key, or a rotation's
// next key); store.ErrNotFound when there is none.
func storedKeyAt(ctx context.Context, st store.Store, name string) (crypto.Signer, error) {
	b, _, err := store.GetBytes(ctx, st, name, maxObject)
	if errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("pki: read %s from %s: %w", name, st, err)
	}
	k, err := parseKey(b)
	if err != nil {
		return nil, fmt.Errorf("pki: %s in %s: %w (delete it to create it again)", name, st, err)
	}
	return k, nil
}

// createKey generates a CA key and stores it create-only under name;
// when another run stored one first, that one is returned.
func createKey(ctx context.Context, st store.Store, name string, spec keySpec) (crypto.Signer, error) {
	key, err := spec.generate()
	if err != nil {
		return nil, fmt.Errorf("pki: generate %s key: %w", spec, err)
	}
	b, err := encodeKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	_, err = store.PutBytes(ctx, st, name, b, store.PutOptions{IfNoneMatch: true})
	if errors.Is(err, store.ErrPrecondition) {
		return storedKeyAt(ctx, st, name)
	}
	if err != nil {
		return nil, fmt.Errorf("pki: write %s to %s: %w", name, st, err)
	}
	return key, nil
}

func selfSign(key crypto.Signer, validity time.Duration, now time.Time) ([]byte, error) {
	id, err := keyID(key.Public())
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		// The key ID in the name tells CAs of a rollover bundle apart.
		Subject:               pkix.Name{CommonName: "etcdadm etcd CA " + hex.EncodeToString(id[:4])},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          id,
	}
	// A nil SerialNumber makes CreateCertificate pick a random one.
	return x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
}

// CA is the cluster CA as loaded from the store.
type CA struct {
	// Bundle is every certificate of ca.crt, in order: verification
	// trusts all of them (old and new CA during a rollover).
	Bundle []*x509.Certificate
	// Cert is the certificate of the bundle that belongs to the key: the
	// one that signs.
	Cert *x509.Certificate

	key       crypto.Signer
	bundlePEM []byte
}

// LoadCA reads the CA from the store: ErrNoCA when there is none,
// ErrIncompleteCA or ErrCAKeyMissing when only half of it is there.
func LoadCA(ctx context.Context, st store.Store) (*CA, error) {
	certPEM, _, certErr := store.GetBytes(ctx, st, CACertKey, maxObject)
	keyPEM, _, keyErr := store.GetBytes(ctx, st, CAKeyKey, maxObject)
	noCert, noKey := errors.Is(certErr, store.ErrNotFound), errors.Is(keyErr, store.ErrNotFound)
	switch {
	case noCert && noKey:
		return nil, fmt.Errorf("pki: %s: %w", st, ErrNoCA)
	case certErr != nil && !noCert:
		return nil, fmt.Errorf("pki: read %s from %s: %w", CACertKey, st, certErr)
	case keyErr != nil && !noKey:
		return nil, fmt.Errorf("pki: read %s from %s: %w", CAKeyKey, st, keyErr)
	case noCert:
		return nil, fmt.Errorf("pki: %s: %w", st, ErrIncompleteCA)
	case noKey:
		return nil, fmt.Errorf("pki: %s: %w", st, ErrCAKeyMissing)
	}
	ca, err := parseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", st, err)
	}
	return ca, nil
}

// parseCA pairs the bundle with the key. Several bundle certificates may
// hold the key (a CA certificate renewed for the same key): the one valid
// longest signs.
func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	bundle, err := parseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CACertKey, err)
	}
	for i, c := range bundle {
		if !c.IsCA {
			return nil, fmt.Errorf("%s: certificate %d (%s) is not a CA certificate", CACertKey, i+1, c.Subject)
		}
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CAKeyKey, err)
	}
	ca := &CA{Bundle: bundle, key: key}
	for _, c := range bundle {
		if samePublicKey(c.PublicKey, key.Public()) && (ca.Cert == nil || c.NotAfter.After(ca.Cert.NotAfter)) {
			ca.Cert = c
		}
	}
	if ca.Cert == nil {
		return nil, ErrCAMismatch
	}
	for _, c := range bundle {
		ca.bundlePEM = append(ca.bundlePEM, encodeCert(c.Raw)...)
	}
	return ca, nil
}

// Pool is a pool of every CA of the bundle, to verify peers with.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range ca.Bundle {
		p.AddCert(c)
	}
	return p
}

// BundlePEM is the bundle as written to a directory's ca.crt.
func (ca *CA) BundlePEM() []byte { return append([]byte(nil), ca.bundlePEM...) }

// KeyAlgorithm describes the CA's key, e.g. "ECDSA P-256".
func (ca *CA) KeyAlgorithm() string {
	s, err := specOf(ca.key.Public())
	if err != nil {
		return "unknown"
	}
	return s.String()
}

// Issued reports whether a CA of the bundle signed c (signature only:
// expired certificates count, so they can be renewed).
func (ca *CA) Issued(c *x509.Certificate) bool {
	return ca.issuer(c) != nil
}

func (ca *CA) issuer(c *x509.Certificate) *x509.Certificate {
	for _, p := range ca.Bundle {
		if c.CheckSignatureFrom(p) == nil {
			return p
		}
	}
	return nil
}

// CAWarnBefore is how long before the CA runs out etcdadm status and the
// EtcdadmCAExpiring alert say so: a rotation takes several steps and
// every client reissued.
const CAWarnBefore = 90 * 24 * time.Hour

// CAExpiry reads only the CA bundle (ca.crt, public) from the store and
// returns when the last of its CAs runs out: what status and the alert
// watch (no certificate outlives the CA that signed it).
func CAExpiry(ctx context.Context, st store.Store) (time.Time, error) {
	b, _, err := store.GetBytes(ctx, st, CACertKey, maxObject)
	if errors.Is(err, store.ErrNotFound) {
		return time.Time{}, fmt.Errorf("pki: %s: %w", st, ErrNoCA)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("pki: read %s: %w", CACertKey, err)
	}
	certs, err := parseCerts(b)
	if err != nil {
		return time.Time{}, fmt.Errorf("pki: %s: %w", CACertKey, err)
	}
	var last time.Time
	for _, c := range certs {
		if c.NotAfter.After(last) {
			last = c.NotAfter
		}
	}
	return last, nil
}
