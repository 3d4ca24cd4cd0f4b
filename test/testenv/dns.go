package testenv

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// dnsReadyTimeout bounds how long a DNS server may take to serve its zone.
const dnsReadyTimeout = 20 * time.Second

// DNSServer is one authoritative DNS server on 127.0.0.1 serving one zone
// that accepts RFC 2136 updates signed with a TSIG key (hmac-sha256).
type DNSServer struct {
	Kind    string // "knot" or "coredns"
	Addr    string // 127.0.0.1:PORT, UDP and TCP
	Zone    string // fully qualified, e.g. "cluster.test."
	KeyName string // fully qualified
	Secret  string // base64
	Dir     string // config, zone and database
	LogFile string

	t     testing.TB
	args  []string
	bin   string
	p     *proc
	netns string // runs in this network namespace ("" = the test's)
}

// TSIGLine is the key in the registrar's --rfc2136-tsig-file form.
func (s *DNSServer) TSIGLine() string {
	return "hmac-sha256:" + s.KeyName + ":" + s.Secret + "\n"
}

func (s *DNSServer) String() string { return fmt.Sprintf("%s at %s", s.Kind, s.Addr) }

// StartKnot starts Knot DNS (Debian package knot) serving zone.
func StartKnot(t testing.TB, zone string) *DNSServer {
	t.Helper()
	return startKnot(t, newDNSServer(t, "knot", zone))
}

// StartKnotIn starts Knot serving zone on ip port 53 inside the network
// namespace netns (a path, e.g. /run/netns/NAME): the DNS server of the
// hosts on that network. Its readiness is asked with kdig from inside.
func StartKnotIn(t testing.TB, zone, netns, ip string) *DNSServer {
	t.Helper()
	s := newDNSServer(t, "knot", zone)
	s.Addr, s.netns = ip+":53", netns
	return startKnot(t, s)
}

func startKnot(t testing.TB, s *DNSServer) *DNSServer {
	t.Helper()
	bin := requireCmd(t, "knotd", "/usr/sbin/knotd")
	for _, d := range []string{"run", "db", "zones"} {
		// Knot running as root wants its run and database directories
		// owned by root: TempDir's belong to the user running the test.
		if err := os.MkdirAll(filepath.Join(s.Dir, d), 0o700); err != nil {
			t.Fatalf("testenv: knot: %v", err)
		}
	}
	writeZone(t, filepath.Join(s.Dir, "zones", strings.TrimSuffix(s.Zone, ".")+".zone"), s.Zone)
	host, port, _ := strings.Cut(s.Addr, ":")
	conf := fmt.Sprintf(`server:
    rundir: "%[1]s/run"
    listen: %[7]s@%[2]s
database:
    storage: "%[1]s/db"
log:
  - target: stderr
    any: info
key:
  - id: %[3]s
    algorithm: hmac-sha256
    secret: %[4]s
acl:
  - id: registrar
    key: %[3]s
    action: update
template:
  - id: default
    storage: "%[1]s/zones"
    zonefile-sync: -1
    journal-content: changes
zone:
  - domain: %[5]s
    file: "%[6]s.zone"
    acl: registrar
`, s.Dir, port, s.KeyName, s.Secret, s.Zone, strings.TrimSuffix(s.Zone, "."), host)
	confFile := filepath.Join(s.Dir, "knot.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatalf("testenv: knot: %v", err)
	}
	s.bin, s.args = bin, []string{"-c", confFile}
	s.Start()
	return s
}

// StartCoreDNS starts CoreDNS (built by `make components` with its
// dynupdate and tsig plugins) serving zone.
func StartCoreDNS(t testing.TB, zone string) *DNSServer {
	t.Helper()
	bin := requireBin(t, filepath.Join(CacheDir(), "bin", "coredns"))
	s := newDNSServer(t, "coredns", zone)
	zoneFile := filepath.Join(s.Dir, "zone.db")
	writeZone(t, zoneFile, s.Zone)
	_, port, _ := strings.Cut(s.Addr, ":")
	conf := fmt.Sprintf(`%[1]s:%[2]s {
    bind 127.0.0.1
    tsig {
        secret %[3]s %[4]s
        require_opcode UPDATE
    }
    dynupdate {
        file %[5]s
        database %[6]s
        allow %[3]s * A AAAA
    }
}
`, s.Zone, port, s.KeyName, s.Secret, zoneFile, filepath.Join(s.Dir, "dynupdate.bbolt"))
	confFile := filepath.Join(s.Dir, "Corefile")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatalf("testenv: coredns: %v", err)
	}
	s.bin, s.args = bin, []string{"-conf", confFile, "-quiet"}
	s.Start()
	return s
}

func newDNSServer(t testing.TB, kind, zone string) *DNSServer {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testenv: %s: %v", kind, err)
	}
	dir := t.TempDir()
	return &DNSServer{
		Kind:    kind,
		Addr:    "127.0.0.1:" + strconv.Itoa(FreePort(t)),
		Zone:    mdns.Fqdn(strings.ToLower(zone)),
		KeyName: "etcd-registrar-test.",
		Secret:  base64.StdEncoding.EncodeToString(b[:]),
		Dir:     dir,
		LogFile: filepath.Join(dir, kind+".log"),
		t:       t,
	}
}

func writeZone(t testing.TB, path, zone string) {
	t.Helper()
	z := fmt.Sprintf("$ORIGIN %s\n$TTL 300\n@ IN SOA ns1 hostmaster 1 3600 600 86400 60\n@ IN NS ns1\nns1 IN A 127.0.0.1\n", zone)
	if err := os.WriteFile(path, []byte(z), 0o644); err != nil {
		t.Fatalf("testenv: zone file: %v", err)
	}
}

// requireCmd finds a Debian-packaged command.
func requireCmd(t testing.TB, name, fallback string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if fi, err := os.Stat(fallback); err == nil && fi.Mode()&0o111 != 0 {
		return fallback
	}
	t.Fatalf("testenv: %s is missing: run `make components` to install it", name)
	return ""
}

// Start (re)starts the server on its address with its data, and waits until
// it serves the zone. Every start is stopped in cleanup.
func (s *DNSServer) Start() {
	s.t.Helper()
	if s.p != nil && s.p.running() {
		s.t.Fatalf("testenv: %s already running", s)
	}
	bin, args := s.bin, s.args
	ready := func() error {
		_, err := s.Query(mdns.TypeSOA, s.Zone)
		return err
	}
	if s.netns != "" {
		bin, args = "nsenter", append([]string{"--net=" + s.netns, "--", s.bin}, s.args...)
		host, port, _ := strings.Cut(s.Addr, ":")
		ready = func() error {
			out, err := exec.Command("nsenter", "--net="+s.netns, "--", "kdig", "+tcp", "+time=1", "+retry=0", "@"+host, "-p", port, "SOA", s.Zone).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "status: NOERROR") {
				return fmt.Errorf("kdig: %v: %s", err, out)
			}
			return nil
		}
	}
	s.p = startProc(s.t, s.Kind, s.LogFile, nil, bin, args...)
	err := waitFor(dnsReadyTimeout, 50*time.Millisecond, s.p.exited, ready)
	if err != nil {
		s.t.Fatalf("testenv: %s (log %s): %v", s, s.LogFile, err)
	}
}

// Stop stops the server (SIGTERM, bounded).
func (s *DNSServer) Stop() {
	s.t.Helper()
	if s.p == nil {
		return
	}
	if err := s.p.stop(); err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
}

// Query asks the server (over TCP, no recursion) for name's records of
// type t and returns the answer section, or an error unless the answer is
// NOERROR or NXDOMAIN.
// A server started with StartKnotIn answers only inside its namespace.
func (s *DNSServer) Query(t uint16, name string) ([]mdns.RR, error) {
	q := new(mdns.Msg)
	q.SetQuestion(mdns.Fqdn(name), t)
	q.RecursionDesired = false
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := &mdns.Client{Net: "tcp", Timeout: 2 * time.Second}
	r, _, err := c.ExchangeContext(ctx, q, s.Addr)
	if err != nil {
		return nil, err
	}
	if r.Rcode != mdns.RcodeSuccess && r.Rcode != mdns.RcodeNameError {
		return nil, fmt.Errorf("%s %s: %s", name, mdns.TypeToString[t], mdns.RcodeToString[r.Rcode])
	}
	return r.Answer, nil
}
