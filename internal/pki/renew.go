package pki

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// RenewDir renews the certificates in dir that are due, with the CA in
// the store: see CA.Renew.
func RenewDir(ctx context.Context, st store.Store, dir string, owner Owner, now time.Time) (renewed []string, err error) {
	ca, err := LoadCA(ctx, st)
	if err != nil {
		return nil, err
	}
	return ca.Renew(ctx, dir, owner, now)
}

// Renew renews every NAME.crt in dir (with NAME.key beside it) that a CA
// of the bundle signed and that has a third of its lifetime or less left:
// same subject, SANs, usages and validity, signed by the current CA, for
// the key it has. Only the certificate file is replaced, in one rename:
// etcd and its clients read a certificate and its key as two files on
// every handshake, so a new key would leave a moment in which the two do
// not match (measured: a failed request in about 10,000 during renewals).
// A new key comes with a re-issue (etcdadm pki rotate-ca, member join).
// A certificate whose key no longer matches it (an interrupted write) is
// issued again with a new key of the same kind. It also brings ca.crt up to date with
// the bundle. It returns the files it wrote, "ca.crt" included when the
// bundle changed. Certificates of other CAs are left alone.
func (ca *CA) Renew(ctx context.Context, dir string, owner Owner, now time.Time) (renewed []string, err error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("pki: renew %s: %w", dir, err)
	}
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("pki: renew: %w", err)
	}
	defer unlock()
	changed, err := ca.writeBundle(dir, owner)
	if err != nil {
		return nil, err
	}
	if changed {
		renewed = append(renewed, CAFile)
	}
	names, err := certFiles(dir)
	if err != nil {
		return renewed, fmt.Errorf("pki: renew: %w", err)
	}
	var errs []error
	for _, name := range names {
		if name == CAFile {
			continue
		}
		did, err := ca.renewOne(dir, strings.TrimSuffix(name, ".crt"), owner, now)
		if err != nil {
			errs = append(errs, err)
		}
		if did {
			renewed = append(renewed, name)
		}
	}
	return renewed, errors.Join(errs...)
}

func (ca *CA) renewOne(dir, base string, owner Owner, now time.Time) (bool, error) {
	c, pairErr := readPair(dir, base)
	if errors.Is(pairErr, fs.ErrNotExist) {
		return false, nil // no key beside it: not a pair we issue
	}
	if c == nil {
		return false, fmt.Errorf("pki: renew %s: %w", filepath.Join(dir, base+".crt"), pairErr)
	}
	if !ca.Issued(c) || (pairErr == nil && !Due(c, now)) {
		return false, nil
	}
	if err := ca.usable(now); err != nil {
		return false, err
	}
	spec, err := specOf(c.PublicKey)
	if err != nil {
		return false, fmt.Errorf("pki: renew %s.crt: %w", base, err)
	}
	// Issued at t, a certificate runs from t-clockSkew to t+validity.
	validity := c.NotAfter.Sub(c.NotBefore)
	if validity > 2*clockSkew {
		validity -= clockSkew
	}
	l := leaf{
		base: base, subject: c.Subject, raw: c.RawSubject,
		dns: c.DNSNames, ips: c.IPAddresses, uris: c.URIs, emails: c.EmailAddresses,
		usage: c.ExtKeyUsage, validity: validity,
	}
	if pairErr != nil {
		if err := ca.issueFiles(dir, l, spec, owner, now); err != nil {
			return false, err
		}
		return true, nil
	}
	certPEM, err := ca.signKey(l, c.PublicKey, now)
	if err != nil {
		return false, err
	}
	if err := writeFile(dir, base+".crt", certPEM, certMode, owner); err != nil {
		return false, fmt.Errorf("pki: %w", err)
	}
	return true, nil
}

func certFiles(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, de := range des {
		if n := de.Name(); strings.HasSuffix(n, ".crt") && !strings.HasPrefix(n, ".") && de.Type().IsRegular() {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// CertInfo describes one certificate, for status and 'etcdadm pki show'.
type CertInfo struct {
	// File is the certificate's file name ("" for the store's CA).
	File         string    `json:"file,omitempty"`
	Subject      string    `json:"subject"`
	Issuer       string    `json:"issuer"`
	Serial       string    `json:"serial"`
	KeyAlgorithm string    `json:"keyAlgorithm"`
	IsCA         bool      `json:"isCA,omitempty"`
	DNSNames     []string  `json:"dnsNames,omitempty"`
	IPs          []string  `json:"ipAddresses,omitempty"`
	Usages       []string  `json:"usages,omitempty"`
	NotBefore    time.Time `json:"notBefore"`
	NotAfter     time.Time `json:"notAfter"`
	// Left is the fraction of the lifetime left, 0 once expired.
	Left float64 `json:"left"`
	// Due: a third of the lifetime or less is left; RenewAfter is when
	// that began or begins.
	Due        bool      `json:"renewalDue"`
	RenewAfter time.Time `json:"renewAfter"`

	Cert *x509.Certificate `json:"-"`
}

// Describe summarizes c at now.
func Describe(c *x509.Certificate, now time.Time) CertInfo {
	ci := CertInfo{
		Subject: c.Subject.String(), Issuer: c.Issuer.String(), Serial: hex.EncodeToString(c.SerialNumber.Bytes()),
		KeyAlgorithm: "unknown", IsCA: c.IsCA, DNSNames: c.DNSNames,
		NotBefore: c.NotBefore, NotAfter: c.NotAfter, Due: Due(c, now), RenewAfter: RenewAfter(c), Cert: c,
	}
	if s, err := specOf(c.PublicKey); err == nil {
		ci.KeyAlgorithm = s.String()
	}
	for _, ip := range c.IPAddresses {
		ci.IPs = append(ci.IPs, ip.String())
	}
	for _, u := range c.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			ci.Usages = append(ci.Usages, "server")
		case x509.ExtKeyUsageClientAuth:
			ci.Usages = append(ci.Usages, "client")
		default:
			ci.Usages = append(ci.Usages, fmt.Sprintf("other(%d)", u))
		}
	}
	if life := c.NotAfter.Sub(c.NotBefore); life > 0 && now.Before(c.NotAfter) {
		ci.Left = min(1, float64(c.NotAfter.Sub(now))/float64(life))
	}
	return ci
}

// Inspect describes every certificate of the *.crt files in dir at now,
// each certificate of a bundle on its own.
func Inspect(dir string, now time.Time) ([]CertInfo, error) {
	names, err := certFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	var out []CertInfo
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
		certs, err := parseCerts(b)
		if err != nil {
			return nil, fmt.Errorf("pki: %s: %w", filepath.Join(dir, n), err)
		}
		for _, c := range certs {
			ci := Describe(c, now)
			ci.File = n
			out = append(out, ci)
		}
	}
	return out, nil
}

// Expiry is the NotAfter of each certificate file in dir; for a bundle
// (ca.crt) the latest, as the bundle works as long as one of its CAs does.
func Expiry(dir string) (map[string]time.Time, error) {
	infos, err := Inspect(dir, time.Now())
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(infos))
	for _, ci := range infos {
		if t, ok := out[ci.File]; !ok || ci.NotAfter.After(t) {
			out[ci.File] = ci.NotAfter
		}
	}
	return out, nil
}
