//go:build linux

package e2e

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestClusterWithDNSNames: with a DNS suffix, members advertise
// NAME.suffix and etcd-dns-registrar (hosts provider) makes every name
// resolve on every host; the cluster forms over those names.
func TestClusterWithDNSNames(t *testing.T) {
	const suffix = "etcd.e2e.internal"
	c := newClusterWith(t, clusterOptions{members: 3, dnsSuffix: suffix, enable: []string{"etcd-dns-registrar.service"}})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	hosts := map[string]*harness.Host{}
	for _, n := range names {
		hosts[n] = c.boot(t, n)
	}
	waitHealthy(t, hosts["etcd-a"], names, 3*time.Minute)
	s, err := status(t, hosts["etcd-a"])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Members {
		if want := "https://" + m.Name + "." + suffix + ":2380"; len(m.PeerURLs) != 1 || m.PeerURLs[0] != want {
			t.Errorf("%s advertises %v, want %s", m.Name, m.PeerURLs, want)
		}
	}
	// Every registrar learns the others within its polling interval.
	resolve := func(from, to string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, _, err := hosts[from].Exec(t, ctx, "getent", "hosts", to+"."+suffix)
		return out, err
	}
	for _, from := range names {
		for _, to := range names {
			var out string
			var err error
			for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
				if out, err = resolve(from, to); err == nil && strings.HasPrefix(out, hosts[to].IP().String()+" ") {
					break
				}
			}
			if err != nil || !strings.HasPrefix(out, hosts[to].IP().String()+" ") {
				t.Errorf("on %s, %s.%s resolves to %q (%v), want %s", from, to, suffix, strings.TrimSpace(out), err, hosts[to].IP())
			}
		}
		if got := strings.TrimSpace(hosts[from].MustExec(t, "systemctl", "is-active", "etcd-dns-registrar.service")); got != "active" {
			t.Errorf("%s: etcd-dns-registrar is %s", from, got)
		}
	}
}

// TestDNSServerDown: the member names live in a real DNS server (Knot in
// the test network, RFC 2136 updates signed with TSIG; the hosts resolve
// through it). The cluster forms over those names. With the server down,
// the registrars report it and a member killed with SIGKILL cannot find its
// peers; once the server is back, that member rejoins by itself and every
// name resolves on every host again.
func TestDNSServerDown(t *testing.T) {
	c, dns := newDNSCluster(t, 3)
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	hosts := map[string]*harness.Host{}
	for _, n := range names {
		hosts[n] = c.boot(t, n)
	}
	a := hosts["etcd-a"]
	waitHealthy(t, a, names, 3*time.Minute)
	resolvesEverywhere := func() {
		t.Helper()
		for _, from := range names {
			for _, to := range names {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				out, _, err := hosts[from].Exec(t, ctx, "getent", "hosts", to+"."+dnsZone)
				cancel()
				if err != nil || !strings.HasPrefix(out, hosts[to].IP().String()+" ") {
					t.Errorf("on %s, %s.%s resolves to %q (%v), want %s", from, to, dnsZone, strings.TrimSpace(out), err, hosts[to].IP())
				}
			}
		}
	}
	resolvesEverywhere()

	dns.Stop()
	b := hosts["etcd-b"]
	b.MustExec(t, "systemctl", "kill", "--signal=KILL", "etcd.service")
	waitFor(t, 2*time.Minute, "the registrar on etcd-b to report the DNS server down", func() (bool, string) {
		line, _, _ := b.Exec(t, context.Background(), "systemctl", "show", "-p", "StatusText", "--value", "etcd-dns-registrar.service")
		return strings.HasPrefix(line, "degraded"), line
	})
	time.Sleep(10 * time.Second) // etcd restarts (RestartSec=5s) while no name resolves
	// The names come from the server alone, and etcd-b's peers cannot
	// reach it without them.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if out, _, err := a.Exec(t, ctx, "getent", "hosts", "etcd-c."+dnsZone); err == nil {
		t.Errorf("etcd-c.%s resolves on etcd-a with the DNS server down: %s", dnsZone, out)
	}
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	if out, _, err := b.Exec(t, ctx, "/opt/etcdadm/bin/etcdadm", "wait-healthy", "--timeout", "3s", "--dial-timeout", "2s"); err == nil {
		t.Errorf("etcd-b serves linearizable reads with the DNS server down: it found its peers without their names\n%s", out)
	}
	cancel()
	dns.Start()
	waitHealthy(t, a, names, 3*time.Minute)
	resolvesEverywhere()
	for _, h := range hosts {
		if got := strings.TrimSpace(h.MustExec(t, "systemctl", "is-active", "etcd-dns-registrar.service")); got != "active" {
			t.Errorf("%s: etcd-dns-registrar is %s after the DNS server came back", h.Name(), got)
		}
	}
}

// The zone of the member names in a DNS cluster, and its server: the
// switch of 10.77.0.0/24, known before the network exists.
const (
	dnsZone   = "etcd.e2e.internal"
	dnsServer = "10.77.0.254"
)

// newDNSCluster is a cluster whose member names live in Knot, in the test
// network at dnsServer: the registrars send it RFC 2136 updates signed
// with TSIG, and the hosts resolve through it (their resolv.conf).
func newDNSCluster(t *testing.T, members int) (*cluster, *testenv.DNSServer) {
	t.Helper()
	o, startDNS := withRFC2136(t, clusterOptions{members: members})
	c := newClusterWith(t, o)
	return c, startDNS(c)
}

// withRFC2136 adds to o the registrar publishing the member names in
// dnsZone by RFC 2136 with TSIG, the hosts resolving through that server;
// startDNS starts Knot in the cluster's network once it exists.
func withRFC2136(t testing.TB, o clusterOptions) (_ clusterOptions, startDNS func(*cluster) *testenv.DNSServer) {
	t.Helper()
	tsigDir, confDir := t.TempDir(), t.TempDir()
	resolv := filepath.Join(confDir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver "+dnsServer+"\noptions timeout:1 attempts:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.dnsSuffix = dnsZone
	if !slices.Contains(o.enable, "etcd-dns-registrar.service") {
		o.enable = append(o.enable, "etcd-dns-registrar.service")
	}
	if o.env == nil {
		o.env = map[string]string{}
	}
	maps.Copy(o.env, map[string]string{"ETCDADM_DNS_PROVIDER": "rfc2136", "ETCDADM_RFC2136_SERVER": dnsServer + ":53", "ETCDADM_RFC2136_TSIG_FILE": "/etc/etcdadm-dns/tsig"})
	o.binds = append(o.binds, harness.Bind{Source: tsigDir, Target: "/etc/etcdadm-dns", ReadOnly: true}, harness.Bind{Source: resolv, Target: "/etc/resolv.conf", ReadOnly: true})
	return o, func(c *cluster) *testenv.DNSServer {
		if got := c.n.SwitchIP().String(); got != dnsServer {
			t.Fatalf("the switch is at %s, the config names %s", got, dnsServer)
		}
		dns := testenv.StartKnotIn(t, dnsZone, c.n.NamespacePath(), dnsServer)
		if err := os.WriteFile(filepath.Join(tsigDir, "tsig"), []byte(dns.TSIGLine()), 0o600); err != nil {
			t.Fatal(err)
		}
		return dns
	}
}
