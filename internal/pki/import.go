package pki

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// ErrOtherCA: the store already holds a CA other than the one imported.
var ErrOtherCA = errors.New("the store already holds a different cluster CA")

// Import makes an existing CA (certificate and key, PEM) the cluster CA,
// so that every certificate it signed keeps working: adopting an etcd
// that kubeadm or a hand-made PKI set up. The pair is checked first (the
// key must belong to a CA certificate of the bundle). Like Init, the key
// is written first and the certificate second, both create-only, so an
// interrupted import finishes when run again. created is false when the
// store already held exactly this CA; a different CA is ErrOtherCA and
// nothing is written.
func Import(ctx context.Context, st store.Store, certPEM, keyPEM []byte) (created bool, err error) {
	ca, err := parseCA(certPEM, keyPEM)
	if err != nil {
		return false, fmt.Errorf("pki: import: %w: %w", ErrInvalid, err)
	}
	keyNorm, err := encodeKey(ca.key)
	if err != nil {
		return false, fmt.Errorf("pki: import: %w", err)
	}
	stored, err := LoadCA(ctx, st)
	switch {
	case err == nil:
		if !stored.Cert.Equal(ca.Cert) || !samePublicKey(stored.key.Public(), ca.key.Public()) {
			return false, fmt.Errorf("pki: import: %w (%q in %s, not %q): adopt into an empty store, or import the CA that store holds", ErrOtherCA, stored.Cert.Subject.CommonName, st, ca.Cert.Subject.CommonName)
		}
		return false, nil
	case errors.Is(err, ErrIncompleteCA):
		k, kerr := storedKey(ctx, st)
		if kerr != nil {
			return false, kerr
		}
		if !samePublicKey(k.Public(), ca.key.Public()) {
			return false, fmt.Errorf("pki: import: %w: %s holds another key", ErrOtherCA, CAKeyKey)
		}
	case errors.Is(err, ErrNoCA):
		if _, err := store.PutBytes(ctx, st, CAKeyKey, keyNorm, store.PutOptions{IfNoneMatch: true}); err != nil {
			return false, fmt.Errorf("pki: import: write %s to %s: %w", CAKeyKey, st, err)
		}
	default:
		return false, err
	}
	if _, err := store.PutBytes(ctx, st, CACertKey, ca.BundlePEM(), store.PutOptions{IfNoneMatch: true}); err != nil {
		return false, fmt.Errorf("pki: import: write %s to %s: %w", CACertKey, st, err)
	}
	if again, err := LoadCA(ctx, st); err != nil || !bytes.Equal(again.BundlePEM(), ca.BundlePEM()) {
		return false, fmt.Errorf("pki: import: reading the CA back from %s: %v", st, err)
	}
	return true, nil
}

// ParseCertificates reads every PEM certificate in b, in order.
func ParseCertificates(b []byte) ([]*x509.Certificate, error) { return parseCerts(b) }

// IssuedPEM reports whether the CA bundle signed the first
// certificate in certPEM.
func (ca *CA) IssuedPEM(certPEM []byte) (bool, error) {
	cs, err := parseCerts(certPEM)
	if err != nil {
		return false, err
	}
	return ca.Issued(cs[0]), nil
}

// ParseCA pairs a CA certificate (or bundle) with its key, as the store
// would hold them, without storing anything.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) { return parseCA(certPEM, keyPEM) }
