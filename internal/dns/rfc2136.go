package dns

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
)

// TSIGKey authenticates dynamic updates (HMAC-SHA256 only).
type TSIGKey struct {
	Name   string // fully qualified, e.g. "etcd-registrar."
	Secret string // base64
}

// ReadTSIGFile reads a key file in nsupdate/knsupdate -y form, one line:
// "hmac-sha256:NAME:BASE64SECRET" (the "hmac-sha256:" is optional). Lines
// starting with '#' are comments. The secret never appears on a command
// line or in the environment.
func ReadTSIGFile(path string) (TSIGKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return TSIGKey{}, fmt.Errorf("%w: tsig file: %w", ErrInvalid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, ":")
		switch {
		case len(parts) == 3 && strings.EqualFold(parts[0], "hmac-sha256"):
			parts = parts[1:]
		case len(parts) == 3:
			return TSIGKey{}, fmt.Errorf("%w: tsig file %s: algorithm %q: only hmac-sha256 is supported", ErrInvalid, path, parts[0])
		case len(parts) != 2:
			return TSIGKey{}, fmt.Errorf("%w: tsig file %s: want one line hmac-sha256:NAME:SECRET", ErrInvalid, path)
		}
		if parts[0] == "" || parts[1] == "" {
			return TSIGKey{}, fmt.Errorf("%w: tsig file %s: empty key name or secret", ErrInvalid, path)
		}
		return TSIGKey{Name: mdns.Fqdn(strings.ToLower(parts[0])), Secret: parts[1]}, nil
	}
	return TSIGKey{}, fmt.Errorf("%w: tsig file %s: no key", ErrInvalid, path)
}

// RFC2136 publishes A/AAAA records by dynamic update (RFC 2136) signed
// with TSIG to one authoritative server, after asking that server what it
// holds, so an unchanged zone gets no update (and no serial bump).
type RFC2136 struct {
	Server  string // host:port
	Zone    string // e.g. "cluster.example.internal"
	Key     TSIGKey
	TTL     uint32
	Timeout time.Duration // per exchange; 0 = 5s
}

var _ Provider = (*RFC2136)(nil)

// Name implements Provider.
func (p *RFC2136) Name() string { return "rfc2136 " + p.Server + " zone " + mdns.Fqdn(p.Zone) }

func (p *RFC2136) client(net string) *mdns.Client {
	t := p.Timeout
	if t == 0 {
		t = 5 * time.Second
	}
	return &mdns.Client{Net: net, Timeout: t, TsigSecret: map[string]string{p.Key.Name: p.Key.Secret}}
}

// Sync implements Provider. Every changed name goes in one update message
// (the server applies it atomically): delete its A and AAAA sets, add the
// wanted records.
func (p *RFC2136) Sync(ctx context.Context, hosts []Host) (bool, error) {
	zone := mdns.Fqdn(strings.ToLower(p.Zone))
	m := new(mdns.Msg)
	m.SetUpdate(zone)
	changed := 0
	for _, h := range hosts {
		fqdn := mdns.Fqdn(strings.ToLower(h.FQDN))
		if !mdns.IsSubDomain(zone, fqdn) {
			return false, fmt.Errorf("%w: %s is not in zone %s", ErrInvalid, fqdn, zone)
		}
		have, err := p.Lookup(ctx, fqdn)
		if err != nil {
			return false, err
		}
		want := slices.Clone(h.Addresses)
		slices.SortFunc(want, func(a, b netip.Addr) int { return a.Compare(b) })
		if slices.Equal(have, want) {
			continue
		}
		changed++
		m.RemoveRRset([]mdns.RR{
			&mdns.A{Hdr: mdns.RR_Header{Name: fqdn, Rrtype: mdns.TypeA, Class: mdns.ClassINET}},
			&mdns.AAAA{Hdr: mdns.RR_Header{Name: fqdn, Rrtype: mdns.TypeAAAA, Class: mdns.ClassINET}},
		})
		var add []mdns.RR
		for _, a := range want {
			add = append(add, addrRR(fqdn, a, p.TTL))
		}
		if len(add) > 0 {
			m.Insert(add)
		}
	}
	if changed == 0 {
		return false, nil
	}
	m.SetTsig(p.Key.Name, mdns.HmacSHA256, 300, time.Now().Unix())
	r, _, err := p.client("tcp").ExchangeContext(ctx, m, p.Server)
	if err != nil {
		return false, fmt.Errorf("%w: update %s at %s: %w", ErrProvider, zone, p.Server, err)
	}
	if r.Rcode != mdns.RcodeSuccess {
		return false, fmt.Errorf("%w: update %s at %s: %s", ErrProvider, zone, p.Server, mdns.RcodeToString[r.Rcode])
	}
	return true, nil
}

func addrRR(fqdn string, a netip.Addr, ttl uint32) mdns.RR {
	if a.Is4() {
		return &mdns.A{Hdr: mdns.RR_Header{Name: fqdn, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: ttl}, A: a.AsSlice()}
	}
	return &mdns.AAAA{Hdr: mdns.RR_Header{Name: fqdn, Rrtype: mdns.TypeAAAA, Class: mdns.ClassINET, Ttl: ttl}, AAAA: a.AsSlice()}
}

// Lookup asks the server for fqdn's A and AAAA records, sorted.
func (p *RFC2136) Lookup(ctx context.Context, fqdn string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, t := range []uint16{mdns.TypeA, mdns.TypeAAAA} {
		q := new(mdns.Msg)
		q.SetQuestion(mdns.Fqdn(fqdn), t)
		q.RecursionDesired = false
		r, _, err := p.client("tcp").ExchangeContext(ctx, q, p.Server)
		if err != nil {
			return nil, fmt.Errorf("%w: query %s at %s: %w", ErrProvider, fqdn, p.Server, err)
		}
		if r.Rcode != mdns.RcodeSuccess && r.Rcode != mdns.RcodeNameError {
			return nil, fmt.Errorf("%w: query %s at %s: %s", ErrProvider, fqdn, p.Server, mdns.RcodeToString[r.Rcode])
		}
		for _, rr := range r.Answer {
			switch v := rr.(type) {
			case *mdns.A:
				if a, ok := netip.AddrFromSlice(v.A.To4()); ok && strings.EqualFold(v.Hdr.Name, mdns.Fqdn(fqdn)) {
					out = append(out, a)
				}
			case *mdns.AAAA:
				if a, ok := netip.AddrFromSlice(v.AAAA); ok && strings.EqualFold(v.Hdr.Name, mdns.Fqdn(fqdn)) {
					out = append(out, a)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out, nil
}
