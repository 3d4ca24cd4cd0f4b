package pki

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// File names in a member's directory (/etc/etcd/pki).
const (
	CAFile         = "ca.crt"
	PeerCertFile   = "peer.crt"
	PeerKeyFile    = "peer.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
	ClientCertFile = "client.crt"
	ClientKeyFile  = "client.key"
)

// clockSkew backdates NotBefore, so hosts whose clocks lag a little accept
// a new certificate at once.
const clockSkew = 5 * time.Minute

// MemberRequest is what a member asks for when it joins.
type MemberRequest struct {
	// Name is the member's name (etcd-a); it is also a DNS SAN.
	Name string
	// DNSNames and IPs are further SANs: the member's DNS name, its
	// addresses. localhost, 127.0.0.1 and ::1 are always added.
	DNSNames []string
	IPs      []net.IP
	// Validity of each certificate; default 1 year.
	Validity time.Duration
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// IsDNSLabel reports whether s is one lowercase DNS label (1-63 of a-z,
// 0-9 and inner '-'): what a member name must be.
func IsDNSLabel(s string) bool { return dnsLabel.MatchString(s) }

// CheckMemberName is the one rule for member names, applied by member
// join, the DNS registrar, volume attach and render: a name is a DNS label
// (IsDNSLabel), since it becomes NAME.<dnsSuffix> and a certificate SAN.
func CheckMemberName(name string) error {
	if !IsDNSLabel(name) {
		return fmt.Errorf("member name %q: want 1 to 63 of a-z, 0-9 and inner '-' (a DNS label)", name)
	}
	return nil
}

// IsDNSName reports whether s is a DNS name: dot-separated DNS labels
// (IsDNSLabel, any case), at most 253 characters, no trailing dot.
func IsDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.ToLower(s), ".") {
		if !dnsLabel.MatchString(l) {
			return false
		}
	}
	return true
}

// Validate checks the request.
func (r MemberRequest) Validate() error {
	if !IsDNSName(r.Name) {
		return fmt.Errorf("%w: member name %q must be a DNS name (letters, digits, '-' and '.')", ErrInvalid, r.Name)
	}
	for _, d := range r.DNSNames {
		if !IsDNSName(d) {
			return fmt.Errorf("%w: member %s: DNS name %q is not a valid DNS name", ErrInvalid, r.Name, d)
		}
	}
	for i, ip := range r.IPs {
		if len(ip) != net.IPv4len && len(ip) != net.IPv6len {
			return fmt.Errorf("%w: member %s: IP address %d is not an IP address", ErrInvalid, r.Name, i+1)
		}
	}
	if r.Validity < 0 {
		return fmt.Errorf("%w: member %s: negative validity %s", ErrInvalid, r.Name, r.Validity)
	}
	return nil
}

// leaf is one certificate to issue or keep: dir/<base>.crt and .key.
type leaf struct {
	base     string
	subject  pkix.Name
	raw      []byte // the subject exactly, when renewing
	dns      []string
	ips      []net.IP
	uris     []*url.URL
	emails   []string
	usage    []x509.ExtKeyUsage
	validity time.Duration
}

func serverClient() []x509.ExtKeyUsage {
	return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
}

func clientOnly() []x509.ExtKeyUsage { return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }

func (r MemberRequest) leaves() []leaf {
	v := r.Validity
	if v == 0 {
		v = DefaultLeafValidity
	}
	dns := normDNS(append([]string{r.Name, "localhost"}, r.DNSNames...))
	ips := normIPs(append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, r.IPs...))
	return []leaf{
		// Peers dial each other, so the peer certificate is a client too.
		{base: "peer", subject: pkix.Name{CommonName: "etcd-peer-" + r.Name}, dns: dns, ips: ips, usage: serverClient(), validity: v},
		// With --client-cert-auth etcd's gRPC gateway dials its own client
		// port with the server certificate.
		{base: "server", subject: pkix.Name{CommonName: "etcd-server-" + r.Name}, dns: dns, ips: ips, usage: serverClient(), validity: v},
		{base: "client", subject: pkix.Name{CommonName: "etcd-member-" + r.Name}, usage: clientOnly(), validity: v},
	}
}

func normDNS(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, strings.ToLower(n))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func normIPs(ips []net.IP) []net.IP {
	out := make([]net.IP, 0, len(ips))
	for _, ip := range ips {
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		out = append(out, ip)
	}
	slices.SortFunc(out, func(a, b net.IP) int { return bytes.Compare(a.To16(), b.To16()) })
	return slices.CompactFunc(out, net.IP.Equal)
}

// IssueMember writes a member's certificates into dir (created 0700 when
// missing): ca.crt (the bundle), peer.crt/key, server.crt/key and
// client.crt/key (CN etcd-member-NAME, for the member's own tools). Keys
// are 0600 and certificates 0644, owned by owner; every file is replaced
// atomically. Certificates that are already right (this CA signed them,
// same names and usages, more than a third of their lifetime left) are
// kept, so re-running a join changes nothing. A certificate of another
// valid CA of the bundle counts as right: during a CA rotation members keep
// the old CA's certificates until the rotation reissues them
// (ReissueMember), so clients that know only the old CA still verify them.
func (ca *CA) IssueMember(ctx context.Context, dir string, req MemberRequest, owner Owner) error {
	_, err := ca.issueMember(ctx, dir, req, owner, time.Now(), false)
	return err
}

// ReissueMember is IssueMember where only certificates of the signing CA
// count as right: what a CA rotation runs on each member.
func (ca *CA) ReissueMember(ctx context.Context, dir string, req MemberRequest, owner Owner) (issued []string, err error) {
	return ca.issueMember(ctx, dir, req, owner, time.Now(), true)
}

func (ca *CA) issueMember(ctx context.Context, dir string, req MemberRequest, owner Owner, now time.Time, strict bool) ([]string, error) {
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return ca.writeLeaves(ctx, dir, req.leaves(), owner, now, strict)
}

// IssueClient signs a client certificate with CN name and a new key, for
// a consumer such as kube-apiserver (validity 0: 1 year). The key is
// returned, not kept.
func (ca *CA) IssueClient(name string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	l, err := clientLeaf(name, validity)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	if err := ca.usable(time.Now()); err != nil {
		return nil, nil, err
	}
	return ca.sign(l, time.Now())
}

func clientLeaf(name string, validity time.Duration) (leaf, error) {
	if name == "" || len(name) > 64 || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return leaf{}, fmt.Errorf("%w: client name %q: want 1 to 64 printable characters", ErrInvalid, name)
	}
	if validity < 0 {
		return leaf{}, fmt.Errorf("%w: client %s: negative validity %s", ErrInvalid, name, validity)
	}
	if validity == 0 {
		validity = DefaultLeafValidity
	}
	return leaf{base: name, subject: pkix.Name{CommonName: name}, usage: clientOnly(), validity: validity}, nil
}

var fileName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// IssueClientFiles writes NAME.crt, NAME.key and ca.crt into dir, like
// IssueMember: atomically, keeping a certificate that is still right.
// issued is false when it was kept.
func (ca *CA) IssueClientFiles(ctx context.Context, dir, name string, validity time.Duration, owner Owner) (issued bool, err error) {
	if !fileName.MatchString(name) {
		return false, fmt.Errorf("pki: %w: client name %q: it names the files, so use letters, digits, '.', '_' and '-'", ErrInvalid, name)
	}
	switch name {
	case "ca", "peer", "server", "client":
		return false, fmt.Errorf("pki: %w: client name %q would replace a member's own files; pick another name", ErrInvalid, name)
	}
	l, err := clientLeaf(name, validity)
	if err != nil {
		return false, fmt.Errorf("pki: %w", err)
	}
	out, err := ca.writeLeaves(ctx, dir, []leaf{l}, owner, time.Now(), true)
	return len(out) > 0, err
}

func (ca *CA) usable(now time.Time) error {
	if !now.Before(ca.Cert.NotAfter) {
		return fmt.Errorf("pki: CA %q (valid until %s): %w", ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.RFC3339), ErrCAExpired)
	}
	return nil
}

// writeLeaves brings ca.crt and each leaf in dir up to date, and returns
// the certificate files it (re)issued; strict: see current.
func (ca *CA) writeLeaves(ctx context.Context, dir string, leaves []leaf, owner Owner, now time.Time, strict bool) (issued []string, err error) {
	if err := ca.usable(now); err != nil {
		return nil, err
	}
	if err := ensureDir(dir, owner); err != nil {
		return nil, fmt.Errorf("pki: directory %s: %w", dir, err)
	}
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	defer unlock()
	if _, err := ca.writeBundle(dir, owner); err != nil {
		return nil, err
	}
	spec, err := specOf(ca.key.Public())
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	for _, l := range leaves {
		crt, key := filepath.Join(dir, l.base+".crt"), filepath.Join(dir, l.base+".key")
		if ca.current(dir, l, now, strict) {
			if err := fixFile(key, keyMode, owner); err != nil {
				return issued, fmt.Errorf("pki: %w", err)
			}
			if err := fixFile(crt, certMode, owner); err != nil {
				return issued, fmt.Errorf("pki: %w", err)
			}
			continue
		}
		if err := ca.issueFiles(dir, l, spec, owner, now); err != nil {
			return issued, err
		}
		issued = append(issued, l.base+".crt")
	}
	return issued, nil
}

// writeBundle makes dir/ca.crt the store's bundle; changed when it was not.
func (ca *CA) writeBundle(dir string, owner Owner) (changed bool, err error) {
	cur, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err == nil && bytes.Equal(cur, ca.bundlePEM) {
		if err := fixFile(filepath.Join(dir, CAFile), certMode, owner); err != nil {
			return false, fmt.Errorf("pki: %w", err)
		}
		return false, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("pki: %w", err)
	}
	if err := writeFile(dir, CAFile, ca.bundlePEM, certMode, owner); err != nil {
		return false, fmt.Errorf("pki: %w", err)
	}
	return true, nil
}

// issueFiles signs l and replaces its key, then its certificate. A crash
// in between leaves a key that does not match the certificate, which the
// next IssueMember or RenewDir sees and re-issues.
func (ca *CA) issueFiles(dir string, l leaf, spec keySpec, owner Owner, now time.Time) error {
	certPEM, keyPEM, err := ca.signWith(l, spec, now)
	if err != nil {
		return err
	}
	if err := writeFile(dir, l.base+".key", keyPEM, keyMode, owner); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := writeFile(dir, l.base+".crt", certPEM, certMode, owner); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

// sign issues l with a new key of the CA's algorithm.
func (ca *CA) sign(l leaf, now time.Time) (certPEM, keyPEM []byte, err error) {
	spec, err := specOf(ca.key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CA key: %w", err)
	}
	return ca.signWith(l, spec, now)
}

// signWith issues l with a new key of spec, never valid beyond the CA.
func (ca *CA) signWith(l leaf, spec keySpec, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := spec.generate()
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: generate %s key: %w", l.base, spec, err)
	}
	certPEM, err = ca.signKey(l, key.Public(), now)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: encode key: %w", l.base, err)
	}
	return certPEM, keyPEM, nil
}

// signKey issues l for the public key pub, never valid beyond the CA.
func (ca *CA) signKey(l leaf, pub crypto.PublicKey, now time.Time) ([]byte, error) {
	notBefore, notAfter := now.Add(-clockSkew), now.Add(l.validity)
	if notBefore.Before(ca.Cert.NotBefore) {
		notBefore = ca.Cert.NotBefore
	}
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:        l.subject,
		RawSubject:     l.raw,
		NotBefore:      notBefore,
		NotAfter:       notAfter,
		KeyUsage:       keyUsage(pub),
		ExtKeyUsage:    l.usage,
		DNSNames:       l.dns,
		IPAddresses:    l.ips,
		URIs:           l.uris,
		EmailAddresses: l.emails,
	}
	// A nil SerialNumber makes CreateCertificate pick a random one.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: sign: %w", l.base, err)
	}
	return encodeCert(der), nil
}

// current reports whether dir holds l as this CA's signer would issue it
// now, with more than a third of its lifetime left. Unless strict, a CA of
// the bundle that is still valid may have signed it instead.
func (ca *CA) current(dir string, l leaf, now time.Time, strict bool) bool {
	c, err := readPair(dir, l.base)
	if err != nil {
		return false
	}
	signed := c.CheckSignatureFrom(ca.Cert) == nil
	if p := ca.issuer(c); !strict && p != nil && now.Before(p.NotAfter) {
		signed = true
	}
	return signed &&
		c.Subject.String() == l.subject.String() &&
		slices.Equal(normDNS(c.DNSNames), l.dns) &&
		slices.EqualFunc(normIPs(c.IPAddresses), l.ips, net.IP.Equal) &&
		slices.Equal(c.ExtKeyUsage, l.usage) &&
		!now.Before(c.NotBefore) && !Due(c, now)
}

// readPair reads dir/<base>.crt and the key beside it, and checks that
// they belong together.
func readPair(dir, base string) (*x509.Certificate, error) {
	cb, err := os.ReadFile(filepath.Join(dir, base+".crt"))
	if err != nil {
		return nil, err
	}
	certs, err := parseCerts(cb)
	if err != nil {
		return nil, fmt.Errorf("%s.crt: %w", base, err)
	}
	kb, err := os.ReadFile(filepath.Join(dir, base+".key"))
	if err != nil {
		return certs[0], err
	}
	key, err := parseKey(kb)
	if err != nil {
		return certs[0], fmt.Errorf("%s.key: %w", base, err)
	}
	if !samePublicKey(certs[0].PublicKey, key.Public()) {
		return certs[0], fmt.Errorf("%s.key does not belong to %s.crt", base, base)
	}
	return certs[0], nil
}

// Due reports whether c has a third of its lifetime or less left at now:
// then it is renewed.
func Due(c *x509.Certificate, now time.Time) bool {
	return 3*c.NotAfter.Sub(now) <= c.NotAfter.Sub(c.NotBefore)
}

// RenewAfter is when c becomes Due.
func RenewAfter(c *x509.Certificate) time.Time {
	return c.NotAfter.Add(-c.NotAfter.Sub(c.NotBefore) / 3)
}
