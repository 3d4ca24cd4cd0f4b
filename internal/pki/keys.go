package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// keySpec is a key algorithm and size: what Init generates for the CA and
// what every certificate of the cluster then gets.
type keySpec struct {
	alg  string // "ecdsa" or "rsa"
	bits int    // curve size or modulus size
}

func (k keySpec) String() string {
	if k.alg == "ecdsa" {
		return fmt.Sprintf("ECDSA P-%d", k.bits)
	}
	return fmt.Sprintf("RSA %d", k.bits)
}

func (k keySpec) generate() (crypto.Signer, error) {
	switch k.alg {
	case "ecdsa":
		var c elliptic.Curve
		switch k.bits {
		case 256:
			c = elliptic.P256()
		case 384:
			c = elliptic.P384()
		case 521:
			c = elliptic.P521()
		default:
			return nil, fmt.Errorf("%w: ECDSA curve P-%d is not supported", ErrInvalid, k.bits)
		}
		return ecdsa.GenerateKey(c, rand.Reader)
	case "rsa":
		return rsa.GenerateKey(rand.Reader, k.bits)
	}
	return nil, fmt.Errorf("%w: key algorithm %q", ErrInvalid, k.alg)
}

// specOf is the spec of an existing key, so a renewed certificate gets a
// new key like its old one.
func specOf(pub crypto.PublicKey) (keySpec, error) {
	switch p := pub.(type) {
	case *ecdsa.PublicKey:
		return keySpec{"ecdsa", p.Curve.Params().BitSize}, nil
	case *rsa.PublicKey:
		return keySpec{"rsa", p.N.BitLen()}, nil
	}
	return keySpec{}, fmt.Errorf("%w: unsupported key type %T (want ECDSA or RSA)", ErrInvalid, pub)
}

// keyUsage is what a TLS leaf needs for its key type: RSA keys also
// encipher (TLS 1.2 RSA key exchange).
func keyUsage(pub crypto.PublicKey) x509.KeyUsage {
	if _, ok := pub.(*rsa.PublicKey); ok {
		return x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	}
	return x509.KeyUsageDigitalSignature
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseKey reads a PEM private key: PKCS#8 (ours), or PKCS#1 and SEC 1
// (what openssl, kubeadm and etcd-manager wrote), so an existing CA can be
// adopted by copying it into the store.
func parseKey(b []byte) (crypto.Signer, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no PEM private key")
		}
		var k any
		var err error
		switch blk.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(blk.Bytes)
		default:
			continue // "EC PARAMETERS" and the like
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", blk.Type, err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported private key type %T", k)
		}
		if _, err := specOf(s.Public()); err != nil {
			return nil, err
		}
		return s, nil
	}
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// parseCerts reads every CERTIFICATE block in b, in order.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// samePublicKey reports whether a and b are the same public key.
func samePublicKey(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

// keyID identifies a public key: the first 160 bits of the SHA-256 of its
// DER (RFC 7093 style). It is the CA's SubjectKeyId and part of its name,
// so two CAs in a bundle never look alike.
func keyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	return sum[:20], nil
}
