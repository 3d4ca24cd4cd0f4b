package dns

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storetest"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// clock is a settable now().
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func fileStore(t *testing.T) store.Store {
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func testConfig(name, addr string) Config {
	var addrs []netip.Addr
	for _, a := range strings.Split(addr, ",") {
		addrs = append(addrs, netip.MustParseAddr(a))
	}
	return Config{Name: name, Addresses: addrs, Suffix: "c.test", Interval: time.Second, Lease: 12 * time.Second}
}

// Three hosts share a store: each one's hosts file lists all three; when
// one stops renewing, its name disappears everywhere after its lease; when
// a new host takes its name, the name follows it.
func testRegistry(t *testing.T, st store.Store) {
	clk := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	type host struct {
		r    *registrar
		path string
	}
	newHost := func(name, addr string) host {
		p := filepath.Join(t.TempDir(), "hosts")
		os.WriteFile(p, []byte("127.0.0.1 localhost\n"), 0o644)
		return host{&registrar{cfg: testConfig(name, addr), st: st, p: &HostsFile{Path: p}, log: quiet, now: clk.now, seen: map[string]bool{}}, p}
	}
	a, b, c := newHost("etcd-a", "10.0.0.1"), newHost("etcd-b", "10.0.0.2"), newHost("etcd-c", "10.0.0.3")
	round := func(hs ...host) {
		t.Helper()
		for _, h := range hs {
			if s := h.r.round(context.Background()); s.Degraded {
				t.Fatalf("%s: %v", h.r.cfg.Name, s.Err)
			}
		}
	}
	check := func(h host, want ...string) {
		t.Helper()
		got, _ := os.ReadFile(h.path)
		wantText := "127.0.0.1 localhost\n"
		if len(want) > 0 {
			wantText += hostsBegin + "\n" + strings.Join(want, "\n") + "\n" + hostsEnd + "\n"
		}
		if string(got) != wantText {
			t.Fatalf("%s: hosts file\n%s\nwant\n%s", h.r.cfg.Name, got, wantText)
		}
	}
	round(a, b, c)
	round(a) // a learns b and c
	all := []string{"10.0.0.1\tetcd-a.c.test", "10.0.0.2\tetcd-b.c.test", "10.0.0.3\tetcd-c.c.test"}
	check(a, all...)
	check(c, all...)

	recs, _, _, err := Load(context.Background(), st)
	if err != nil || len(recs) != 3 || !recs[1].Expires.Equal(clk.now().Add(12*time.Second)) {
		t.Fatalf("registry: %+v, %v", recs, err)
	}

	// Rounds read; only a record due for renewal (a third of its lease
	// left) is written.
	counted := &storetest.Counting{Store: st}
	a.r.st = counted
	round(a)
	clk.add(8 * time.Second)
	round(a)
	if g, p := counted.Gets.Load(), counted.Puts.Load(); g != 2 || p != 1 {
		t.Errorf("two rounds, the second with 4s of a 12s lease left: %d reads and %d writes, want 2 and 1", g, p)
	}
	a.r.st = st

	// b's host dies: a and c renew, b does not; after the lease b is gone.
	round(c)
	clk.add(5 * time.Second)
	round(a, c)
	check(a, all[0], all[2])
	check(c, all[0], all[2])

	// A new host claims etcd-b's volume and with it the name.
	b2 := newHost("etcd-b", "10.0.0.22")
	round(b2, a)
	check(a, all[0], "10.0.0.22\tetcd-b.c.test", all[2])
	check(b2, all[0], "10.0.0.22\tetcd-b.c.test", all[2])

	// The registry replaced by something that does not parse: the next
	// round writes our record into a fresh one, the others theirs at
	// their next round.
	if _, err := store.PutBytes(context.Background(), st, RegistryKey, []byte("{not json"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	round(a, c, b2, a)
	check(a, all[0], "10.0.0.22\tetcd-b.c.test", all[2])

	// etcd-c's host gone for good, nobody took its name: gone from a's
	// file once its lease ran out, and from the registry at the next
	// write after another lease.
	clk.add(9 * time.Second)
	round(a, b2)
	clk.add(4 * time.Second)
	round(a, b2)
	check(a, all[0], "10.0.0.22\tetcd-b.c.test")
	clk.add(12 * time.Second)
	round(a, b2)
	if recs, _, _, err := Load(context.Background(), st); err != nil || len(recs) != 2 || hasName(recs, "etcd-c") {
		t.Errorf("registry after etcd-c's lease ran out twice over: %+v, %v", recs, err)
	}
}

// Two hosts that write the registry at once: both records are kept (the
// loser of the compare-and-swap reads again).
func TestPublishRace(t *testing.T) {
	st := fileStore(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs, _, etag, err := Load(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	a := Record{Name: "etcd-a", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Expires: now.Add(time.Minute)}
	if _, _, err := Publish(context.Background(), st, recs, etag, a, now); err != nil {
		t.Fatal(err)
	}
	b := Record{Name: "etcd-b", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.2")}, Expires: now.Add(time.Minute)}
	if _, _, err := Publish(context.Background(), st, recs, etag, b, now); !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("a write on a registry that changed since it was read: %v, want ErrPrecondition", err)
	}
	r := &registrar{cfg: testConfig("etcd-b", "10.0.0.2"), st: st, log: quiet}
	got, err := r.publish(context.Background(), b, now)
	if err != nil || len(got) != 2 {
		t.Fatalf("publish after the race: %+v, %v", got, err)
	}
}

func TestRegistryFileStore(t *testing.T) { testRegistry(t, fileStore(t)) }

func TestRegistryMinIO(t *testing.T) {
	s3 := testenv.StartMinIO(t)
	st, err := storeurl.Open(context.Background(), s3.URL("dns-test/"), s3.Env())
	if err != nil {
		t.Fatal(err)
	}
	testRegistry(t, st)
}

// failingStore fails every call while down is set.
type failingStore struct {
	store.Store
	mu   sync.Mutex
	down bool
}

func (f *failingStore) setDown(v bool) { f.mu.Lock(); f.down = v; f.mu.Unlock() }
func (f *failingStore) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return store.ErrUnreachable
	}
	return nil
}
func (f *failingStore) Put(ctx context.Context, key string, r io.Reader, o store.PutOptions) (store.Info, error) {
	if err := f.err(); err != nil {
		return store.Info{}, err
	}
	return f.Store.Put(ctx, key, r, o)
}
func (f *failingStore) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	if err := f.err(); err != nil {
		return nil, store.Info{}, err
	}
	return f.Store.Get(ctx, key)
}

// notes records sd_notify states.
type notes struct {
	mu     sync.Mutex
	states []string
}

func (n *notes) Notify(s string) { n.mu.Lock(); n.states = append(n.states, s); n.mu.Unlock() }
func (n *notes) lastStatus() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.states) - 1; i >= 0; i-- {
		if strings.HasPrefix(n.states[i], "STATUS=") {
			return n.states[i]
		}
	}
	return ""
}
func (n *notes) has(s string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range n.states {
		if x == s {
			return true
		}
	}
	return false
}

// waitUntil polls cond (bounded).
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The daemon loop: ready, then degraded while the store is down (status,
// metrics), still running, and ok again when it is back.
func TestRunDegradedStore(t *testing.T) {
	fs := &failingStore{Store: fileStore(t)}
	dir := t.TempDir()
	hostsPath, metrics := filepath.Join(dir, "hosts"), filepath.Join(dir, "etcd_dns.prom")
	cfg := testConfig("etcd-a", "10.0.0.1")
	cfg.Interval, cfg.Lease, cfg.MaxBackoff, cfg.MetricsFile = 50*time.Millisecond, time.Minute, 100*time.Millisecond, metrics
	n := &notes{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, fs, &HostsFile{Path: hostsPath}, n, quiet, 40*time.Millisecond, time.Now)
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	}()
	metricsHave := func(s string) func() bool {
		return func() bool { b, _ := os.ReadFile(metrics); return strings.Contains(string(b), s) }
	}
	waitUntil(t, "ready and ok", 5*time.Second, func() bool {
		return n.has("READY=1") && strings.HasPrefix(n.lastStatus(), "STATUS=ok: 1 names")
	})
	waitUntil(t, "metrics ok", 5*time.Second, metricsHave("etcdadm_dns_degraded 0"))
	if b, _ := os.ReadFile(hostsPath); !strings.Contains(string(b), "10.0.0.1\tetcd-a.c.test") {
		t.Fatalf("hosts file:\n%s", b)
	}
	fs.setDown(true)
	waitUntil(t, "degraded status", 5*time.Second, func() bool { return strings.HasPrefix(n.lastStatus(), "STATUS=degraded: store") })
	waitUntil(t, "degraded metric", 5*time.Second, metricsHave("etcdadm_dns_degraded 1"))
	if b, _ := os.ReadFile(hostsPath); !strings.Contains(string(b), "10.0.0.1\tetcd-a.c.test") {
		t.Fatalf("the store being down must not drop names:\n%s", b)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned while degraded: %v", err)
	default:
	}
	fs.setDown(false)
	waitUntil(t, "ok again", 5*time.Second, func() bool { return strings.HasPrefix(n.lastStatus(), "STATUS=ok") })
	waitUntil(t, "metrics ok again", 5*time.Second, metricsHave("etcdadm_dns_degraded 0"))
	if !n.has("WATCHDOG=1") {
		t.Error("no WATCHDOG=1 sent")
	}
	b, _ := os.ReadFile(metrics)
	for _, m := range []string{"etcdadm_dns_records_published 1", "etcdadm_dns_last_success_timestamp_seconds 1"} {
		if !strings.Contains(string(b), m) {
			t.Errorf("metrics lack %q:\n%s", m, b)
		}
	}
}

// Rounds come quickly while the registrar settles after its start, then
// every Interval: a host booted with the others learns their names in
// seconds.
func TestRunSettlesFast(t *testing.T) {
	counted := &storetest.Counting{Store: fileStore(t)}
	cfg := testConfig("etcd-a", "10.0.0.1")
	cfg.Interval, cfg.Lease, cfg.Settle = time.Hour, 6*time.Hour, 400*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := Run(ctx, cfg, counted, &HostsFile{Path: filepath.Join(t.TempDir(), "hosts")}, nil, quiet, 0, time.Now); err != nil {
		t.Fatal(err)
	}
	// Settling: a round at once, then every 100 ms for 400 ms; then none
	// for an hour.
	if n := counted.Gets.Load(); n < 3 || n > 6 {
		t.Errorf("%d rounds in 1.5 s (settling for 0.4 s at 0.1 s, then hourly), want 3 to 6", n)
	}
}

func TestConfigValidate(t *testing.T) {
	good := testConfig("etcd-a", "10.0.0.1")
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"bad name":      func(c *Config) { c.Name = "Etcd_A" },
		"no address":    func(c *Config) { c.Addresses = nil },
		"no suffix":     func(c *Config) { c.Suffix = "" },
		"short lease":   func(c *Config) { c.Lease = c.Interval },
		"zero interval": func(c *Config) { c.Interval = 0 },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestUnreadableRegistryDropsNoName: the registry object turns to
// garbage; the registrar rewrites it with its own record (the others add
// theirs at their next round), and meanwhile every name it knew and whose
// lease runs still resolves.
func TestUnreadableRegistryDropsNoName(t *testing.T) {
	st := fileStore(t)
	ctx := context.Background()
	now := time.Now()
	var recs []Record
	var etag string
	for _, o := range []struct{ name, addr string }{{"etcd-b", "10.0.0.2"}, {"etcd-c", "10.0.0.3"}} {
		r := Record{Name: o.name, Addresses: []netip.Addr{netip.MustParseAddr(o.addr)}, Updated: now, Expires: now.Add(time.Hour)}
		var err error
		if recs, etag, err = Publish(ctx, st, recs, etag, r, now.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	hostsPath := filepath.Join(t.TempDir(), "hosts")
	cfg := testConfig("etcd-a", "10.0.0.1")
	cfg.Interval, cfg.Lease, cfg.MaxBackoff = 50*time.Millisecond, time.Minute, 100*time.Millisecond
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(rctx, cfg, st, &HostsFile{Path: hostsPath}, &notes{}, quiet, 0, time.Now) }()
	defer func() { cancel(); <-done }()
	all := func() bool {
		b, _ := os.ReadFile(hostsPath)
		return strings.Contains(string(b), "10.0.0.1\tetcd-a.c.test") && strings.Contains(string(b), "10.0.0.2\tetcd-b.c.test") && strings.Contains(string(b), "10.0.0.3\tetcd-c.c.test")
	}
	waitUntil(t, "all three names", 5*time.Second, all)
	if _, err := store.PutBytes(ctx, st, RegistryKey, []byte("{not json"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the registry rewritten", 5*time.Second, func() bool {
		recs, bad, _, err := Load(ctx, st)
		return err == nil && len(bad) == 0 && hasName(recs, "etcd-a")
	})
	time.Sleep(10 * cfg.Interval) // rounds on the rewritten registry
	if !all() {
		b, _ := os.ReadFile(hostsPath)
		t.Fatalf("after the unreadable registry was rewritten, names whose lease runs were dropped:\n%s", b)
	}
}
