package dns

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

func TestReadTSIGFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ text, name string }{
		{"hmac-sha256:Key1:c2VjcmV0\n", "key1."},
		{"# comment\nkey2.:c2VjcmV0", "key2."},
		{"hmac-md5:k:c2VjcmV0", ""},
		{"", ""},
		{"k:", ""},
	} {
		p := filepath.Join(dir, "key")
		os.WriteFile(p, []byte(tc.text), 0o600)
		k, err := ReadTSIGFile(p)
		if tc.name == "" {
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Errorf("%q: want ErrInvalid, got %+v, %v", tc.text, k, err)
			}
			continue
		}
		if err != nil || k.Name != tc.name || k.Secret != "c2VjcmV0" {
			t.Errorf("%q: got %+v, %v", tc.text, k, err)
		}
	}
}

// resolves asks the server directly for fqdn's A and AAAA records.
func resolves(t *testing.T, s *testenv.DNSServer, fqdn string) []string {
	t.Helper()
	var out []string
	for _, typ := range []uint16{mdns.TypeA, mdns.TypeAAAA} {
		rrs, err := s.Query(typ, fqdn)
		if err != nil {
			t.Fatalf("query %s: %v", fqdn, err)
		}
		for _, rr := range rrs {
			switch v := rr.(type) {
			case *mdns.A:
				out = append(out, v.A.String())
			case *mdns.AAAA:
				out = append(out, v.AAAA.String())
			}
			if rr.Header().Ttl != 30 {
				t.Errorf("%s: TTL %d, want 30", rr, rr.Header().Ttl)
			}
		}
	}
	slices.Sort(out)
	return out
}

func testRFC2136(t *testing.T, srv *testenv.DNSServer) {
	ctx := context.Background()
	keyFile := filepath.Join(t.TempDir(), "tsig")
	os.WriteFile(keyFile, []byte(srv.TSIGLine()), 0o600)
	key, err := ReadTSIGFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	suffix := strings.TrimSuffix(srv.Zone, ".")
	newProvider := func() *RFC2136 {
		return &RFC2136{Server: srv.Addr, Zone: suffix, Key: key, TTL: 30, Timeout: time.Second}
	}
	st := fileStore(t)
	clk := &clock{t: time.Now()}
	newReg := func(name, addr string) *registrar {
		cfg := testConfig(name, addr)
		cfg.Suffix = suffix
		cfg.OpTimeout = 5 * time.Second
		return &registrar{cfg: cfg, st: st, p: newProvider(), log: quiet, now: clk.now, seen: map[string]bool{}}
	}
	a, b := newReg("etcd-a", "127.0.0.11"), newReg("etcd-b", "127.0.0.12,fd00::12")
	round := func(r *registrar) Status {
		t.Helper()
		s := r.round(ctx)
		if s.Degraded {
			t.Fatalf("%s: %v", r.cfg.Name, s.Err)
		}
		return s
	}
	name := func(n string) string { return n + "." + suffix }
	round(b)
	if s := round(a); !s.Changed || s.Published != 2 {
		t.Fatalf("first round: %+v", s)
	}
	if got := resolves(t, srv, name("etcd-a")); !slices.Equal(got, []string{"127.0.0.11"}) {
		t.Fatalf("etcd-a: %v", got)
	}
	if got := resolves(t, srv, name("etcd-b")); !slices.Equal(got, []string{"127.0.0.12", "fd00::12"}) {
		t.Fatalf("etcd-b: %v", got)
	}
	if s := round(a); s.Changed {
		t.Errorf("unchanged round sent an update")
	}

	// A wrong key is refused by the server.
	bad := newProvider()
	bad.Key.Secret = "d3Jvbmcgc2VjcmV0IHdyb25nIHNlY3JldCB3cm9uZyE="
	if _, err := bad.Sync(ctx, []Host{{FQDN: name("etcd-x"), Addresses: []netip.Addr{netip.MustParseAddr("127.0.0.99")}}}); err == nil {
		t.Error("update with a wrong TSIG secret succeeded")
	}
	if got := resolves(t, srv, name("etcd-x")); len(got) != 0 {
		t.Errorf("etcd-x resolves after a refused update: %v", got)
	}

	// etcd-b's lease runs out: its records go.
	clk.add(13 * time.Second)
	round(a)
	if got := resolves(t, srv, name("etcd-b")); len(got) != 0 {
		t.Fatalf("etcd-b still resolves after its lease: %v", got)
	}

	// The server goes away: degraded, Run-level code keeps going; meanwhile
	// etcd-b comes back elsewhere and etcd-a moves. After the restart the
	// records converge.
	srv.Stop()
	if s := a.round(ctx); !s.Degraded || !errors.Is(s.Err, ErrProvider) {
		t.Fatalf("server down: want degraded with ErrProvider, got %+v", s)
	}
	a.cfg.Addresses = []netip.Addr{netip.MustParseAddr("127.0.0.21")}
	b2 := newReg("etcd-b", "127.0.0.22")
	if s := b2.round(ctx); !s.Degraded {
		t.Fatalf("server down: b2 not degraded: %+v", s)
	}
	srv.Start()
	round(b2)
	round(a)
	if got := resolves(t, srv, name("etcd-a")); !slices.Equal(got, []string{"127.0.0.21"}) {
		t.Fatalf("etcd-a after restart: %v", got)
	}
	if got := resolves(t, srv, name("etcd-b")); !slices.Equal(got, []string{"127.0.0.22"}) {
		t.Fatalf("etcd-b after restart: %v", got)
	}
}

func TestRFC2136Knot(t *testing.T) { testRFC2136(t, testenv.StartKnot(t, "cluster.test")) }

func TestRFC2136CoreDNS(t *testing.T) { testRFC2136(t, testenv.StartCoreDNS(t, "cluster.test")) }
