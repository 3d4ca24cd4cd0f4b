//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/etcdadm/etcdadm-immutable/test/chaos"
	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// soakDuration is how long faults are injected: ETCDADM_SOAK_DURATION
// (make soak: 30m), 3 minutes in make test.
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("ETCDADM_SOAK_DURATION")
	if v == "" {
		return 3 * time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("ETCDADM_SOAK_DURATION=%q: want a duration such as 30m", v)
	}
	return d
}

func soakSeed(t *testing.T) uint64 {
	v := os.Getenv("ETCDADM_SOAK_SEED")
	if v == "" {
		return 20261125
	}
	s, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("ETCDADM_SOAK_SEED=%q: want a number", v)
	}
	return s
}

// soak is a cluster under faults: the hosts by member name, the spec's
// member names, and what was injected.
type soak struct {
	c      *cluster
	dns    *testenv.DNSServer
	rng    *rand.Rand
	hosts  map[string]*harness.Host
	extra  map[*harness.Host][]string // nspawn arguments a host boots with
	names  []string
	faults map[string]int
	fresh  int
}

// TestChaosSoak: three masters serve clients doing gets, puts (some with
// a lease), txns and a watch, while faults are injected in an order drawn
// from a fixed seed: kill -9 of etcd and of our binaries, a host's power
// cut, a host cut off the network, the store down, the DNS server down, a
// host replaced by a fresh one, a resize 3→5→3. The member names live in
// the DNS server (RFC 2136). After each fault the cluster must be healthy
// at the spec's size again. At the end porcupine checks the history
// against a key-value model, every acknowledged write is in etcd's
// history, the watch delivered every change once and in order, the lease
// lived, and every backup the store lists verifies.
func TestChaosSoak(t *testing.T) {
	dur, seed := soakDuration(t), soakSeed(t)
	c, dns := newDNSCluster(t, 3)
	s := &soak{c: c, dns: dns, rng: rand.New(rand.NewPCG(seed, 0)), hosts: map[string]*harness.Host{},
		extra: map[*harness.Host][]string{}, names: []string{"etcd-a", "etcd-b", "etcd-c"}, faults: map[string]int{}}
	for _, n := range s.names {
		s.hosts[n] = s.c.boot(t, n)
	}
	s.waitHealthy(t)
	eps := memberURLs(s.names, dnsZone)
	viz := filepath.Join(t.TempDir(), "history.html")
	load := startHelper(t, s.c, "soak", eps, "E2E_SEED="+strconv.FormatUint(seed, 10), "E2E_VIZ="+viz, "E2E_DNS="+dnsServer+":53")

	kinds := []struct {
		name string
		do   func(*testing.T)
	}{
		{"kill -9 etcd", s.killEtcd},
		{"kill -9 one of our binaries", s.killOurs},
		{"power cut", s.powerCut},
		{"network partition", s.partition},
		{"store down", s.storeDown},
		{"DNS server down", s.dnsDown},
		{"host replaced", s.replace},
		{"resize 3→5→3", s.resize},
	}
	start := time.Now()
	var deck []int
	for time.Since(start) < dur {
		if len(deck) == 0 {
			deck = s.rng.Perm(len(kinds))
		}
		k := kinds[deck[0]]
		deck = deck[1:]
		t.Logf("soak %v: %s", time.Since(start).Round(time.Second), k.name)
		k.do(t)
		s.faults[k.name]++
		s.waitHealthy(t)
		time.Sleep(time.Duration(2+s.rng.IntN(5)) * time.Second)
	}
	var r chaos.Report
	load.finish(t, 20*time.Minute, &r)
	b, _ := json.MarshalIndent(r, "", "  ")
	t.Logf("soak report:\n%s", b)
	var fs []string
	total := 0
	for _, k := range kinds {
		fs = append(fs, fmt.Sprintf("%s %d", k.name, s.faults[k.name]))
		total += s.faults[k.name]
	}
	t.Logf("FIGURE chaos soak (seed %d): %v of faults, %v in all; %d operations (%d writes acknowledged), %d faults (%s); linearizability %s (checked in %s), %d violations, %d lost writes, %d watch events, %d watch gaps",
		seed, dur, time.Since(start).Round(time.Second), r.Operations, r.Acked, total, strings.Join(fs, ", "), r.Linearizable, r.CheckTook, r.Violations, r.Lost, r.WatchEvents, r.WatchGaps)
	if why := r.Failed(); why != "" {
		t.Errorf("soak verdict: %s (history drawn in %s)", why, r.Visualized)
	}
	if r.Operations == 0 || r.Acked == 0 {
		t.Errorf("the clients did nothing: %+v", r)
	}
	for _, n := range backupNames(t, s.c) {
		if out, err := s.c.adm(t, "backup", "verify", n, "--store", s.c.storeURL); err != nil {
			t.Errorf("listed backup %s does not verify: %v\n%s", n, err, out)
		}
	}
}

func (s *soak) waitHealthy(t *testing.T) {
	t.Helper()
	waitHealthy(t, s.hosts[s.names[0]], s.names, 5*time.Minute)
}

// member picks a member's host at random.
func (s *soak) member() (string, *harness.Host) {
	n := s.names[s.rng.IntN(len(s.names))]
	return n, s.hosts[n]
}

func (s *soak) pause(min, max int) {
	time.Sleep(time.Duration(min*1000+s.rng.IntN((max-min)*1000+1)) * time.Millisecond)
}

func (s *soak) killEtcd(t *testing.T) {
	n, h := s.member()
	t.Logf("soak: kill -9 etcd on %s", n)
	h.MustExec(t, "systemctl", "kill", "--signal=KILL", "etcd.service")
}

// killOurs starts one of our programs on a member's host and kills it
// with SIGKILL somewhere in its run.
func (s *soak) killOurs(t *testing.T) {
	n, h := s.member()
	units := []string{"etcd-member-join.service", "etcd-snapshot-uploader.service", "etcd-version-switcher.service", "etcd-reconcile.service", "etcd-dns-registrar.service", "etcdadm"}
	u := units[s.rng.IntN(len(units))]
	after := time.Duration(100+s.rng.IntN(1500)) * time.Millisecond
	t.Logf("soak: kill -9 %s on %s after %v", u, n, after)
	if u == "etcdadm" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h.Exec(t, ctx, "timeout", "--signal=KILL", fmt.Sprintf("%.1f", after.Seconds()), "/opt/etcdadm/bin/etcdadm", "backup", "now")
		return
	}
	h.MustExec(t, "systemctl", "start", "--no-block", u)
	time.Sleep(after)
	h.MustExec(t, "systemctl", "kill", "--signal=KILL", u)
}

func (s *soak) powerCut(t *testing.T) {
	n, h := s.member()
	t.Logf("soak: power cut of %s", n)
	h.Crash(t)
	s.pause(1, 5)
	h.PowerOn(t, s.c.hostOptions(s.extra[h]...))
}

func (s *soak) partition(t *testing.T) {
	n, h := s.member()
	t.Logf("soak: %s cut off the network", n)
	h.Partition(t, true)
	s.pause(5, 20)
	h.Partition(t, false)
}

// storeDown stops MinIO while an uploader runs, then starts it again.
func (s *soak) storeDown(t *testing.T) {
	t.Log("soak: the store goes down")
	s.c.stopStore()
	for _, n := range s.names {
		s.hosts[n].MustExec(t, "systemctl", "start", "--no-block", "etcd-snapshot-uploader.service")
	}
	s.pause(10, 25)
	if err := s.c.runStore(); err != nil {
		t.Fatalf("the store does not start again: %v", err)
	}
}

// dnsDown stops the DNS server that holds the member names and kills a
// member's etcd meanwhile: it cannot find its peers until the server is
// back.
func (s *soak) dnsDown(t *testing.T) {
	n, h := s.member()
	t.Logf("soak: the DNS server goes down; etcd on %s is killed meanwhile", n)
	s.dns.Stop()
	h.MustExec(t, "systemctl", "kill", "--signal=KILL", "etcd.service")
	s.pause(10, 20)
	s.dns.Start()
}

// boot boots a fresh machine named after the member it will be.
func (s *soak) boot(t *testing.T, name string) *harness.Host {
	s.fresh++
	extra := []string{"--hostname=" + name}
	h := s.c.n.Boot(t, fmt.Sprintf("%s-%d", name, s.fresh), s.c.hostOptions(extra...))
	s.extra[h] = extra
	return h
}

// replace powers a member's host off for good; a fresh host takes its name.
func (s *soak) replace(t *testing.T) {
	n, h := s.member()
	t.Logf("soak: %s's host dies; a fresh host takes its place", n)
	h.Crash(t)
	s.hosts[n] = s.boot(t, n)
	if n == s.names[0] {
		// waitHealthy asks the first member's host, which is new.
		s.waitHealthy(t)
	}
}

// resize grows the cluster to five members on two fresh hosts, then
// shrinks it back to three; the hosts whose members reconcile removed
// are powered off.
func (s *soak) resize(t *testing.T) {
	if out, err := s.c.adm(t, "spec", "set", "--members", "5", "--store", s.c.storeURL); err != nil {
		t.Fatalf("spec set --members 5: %v\n%s", err, out)
	}
	// The two names reconcile removed last time may be any two: their
	// hosts, powered off with a removed member's data, come back (member
	// join moves that data aside and joins anew); a name never used gets
	// a fresh host.
	five := []string{"etcd-a", "etcd-b", "etcd-c", "etcd-d", "etcd-e"}
	for _, n := range five {
		switch h, ok := s.hosts[n]; {
		case !ok:
			s.hosts[n] = s.boot(t, n)
		case !h.Running():
			h.PowerOn(t, s.c.hostOptions(s.extra[h]...))
		}
	}
	s.names = five
	s.waitHealthy(t)
	t.Log("soak: five members; back to three")
	if out, err := s.c.adm(t, "spec", "set", "--members", "3", "--store", s.c.storeURL); err != nil {
		t.Fatalf("spec set --members 3: %v\n%s", err, out)
	}
	var left []string
	for deadline := time.Now().Add(4 * time.Minute); time.Now().Before(deadline); time.Sleep(3 * time.Second) {
		for _, n := range s.names {
			s.hosts[n].Exec(t, context.Background(), "systemctl", "start", "--no-block", "etcd-reconcile.service")
		}
		// Any of the five may be removed (its etcd stops): ask each.
		for _, n := range s.names {
			if st, err := status(t, s.hosts[n]); err == nil && len(st.Members) == 3 {
				for _, m := range st.Members {
					left = append(left, m.Name)
				}
				break
			}
		}
		if len(left) == 3 {
			break
		}
		left = nil
	}
	if len(left) != 3 {
		t.Fatalf("reconcile did not shrink the cluster to 3 members within 4 minutes")
	}
	slices.Sort(left)
	for _, n := range s.names {
		if !slices.Contains(left, n) {
			t.Logf("soak: reconcile removed %s; its host is powered off", n)
			s.hosts[n].PowerOff(t)
		}
	}
	s.names = left
}

// runSoakHelper is the helper's body (E2E_HELPER=soak): the workload
// until SIGTERM, then its verdict as one JSON line.
func runSoakHelper() error {
	tc, err := helperTLS()
	if err != nil {
		return err
	}
	seed, _ := strconv.ParseUint(os.Getenv("E2E_SEED"), 10, 64)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	// The member names resolve through the test network's DNS server
	// (the helper runs with the test machine's resolv.conf).
	server := os.Getenv("E2E_DNS")
	dialer := &net.Dialer{Resolver: &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, server)
	}}}
	dial := func() (*clientv3.Client, error) {
		// Members come and go (replaced, added, removed): the clients
		// follow the member list, as kube-apiserver's do not but a
		// long-lived client should.
		return clientv3.New(clientv3.Config{Endpoints: strings.Split(os.Getenv("E2E_ENDPOINTS"), ","), TLS: tc, DialTimeout: 2 * time.Second,
			AutoSyncInterval: 5 * time.Second, Logger: zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return dialer.DialContext(ctx, "tcp", addr)
			})}})
	}
	ctx := context.Background()
	w, err := chaos.Start(ctx, dial, chaos.Config{Seed: seed})
	if err != nil {
		return err
	}
	<-stop
	r, err := w.Stop(ctx, 10*time.Minute, os.Getenv("E2E_VIZ"))
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(b))
	return err
}
