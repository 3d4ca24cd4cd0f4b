package volume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// TestDecide: the holder's rule, store × etcd × what was confirmed
// before × fenced or not.
func TestDecide(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	every := 40 * time.Second
	ok := func(d time.Duration) SourceResult { return SourceResult{State: Confirmed, Until: now.Add(d)} }
	down := SourceResult{State: Unreachable, Err: store.ErrUnreachable}
	lost := SourceResult{State: Lost, Err: ErrLost}
	unconf := SourceResult{State: Unconfirmed, Err: errors.New("etcd holds no claim")}
	live := func(s, e time.Duration) Expiries { return Expiries{Store: now.Add(s), Etcd: now.Add(e)} }
	for _, tc := range []struct {
		name   string
		st, et SourceResult
		prev   Expiries
		fenced bool
		want   Action
		source string
		lost   bool
	}{
		{"both confirm", ok(2 * time.Minute), ok(2 * time.Minute), live(80*time.Second, 80*time.Second), false, ActKeep, "store+etcd", false},
		{"store only (no etcd yet)", ok(2 * time.Minute), down, Expiries{}, false, ActKeep, "store", false},
		{"store confirms, etcd names another holder: the store wins", ok(2 * time.Minute), lost, live(80*time.Second, 0), false, ActKeep, "store", false},
		{"store out, etcd confirms: keeps the member past the store's expiry", down, ok(2 * time.Minute), live(-5*time.Minute, 80*time.Second), false, ActKeep, "etcd", false},
		{"store out, no etcd quorum, claim still far from expiry", down, down, live(80*time.Second, 80*time.Second), false, ActKeep, "", false},
		{"store out, no etcd quorum, store expiry near, etcd's later", down, down, live(10*time.Second, 70*time.Second), false, ActKeep, "", false},
		{"store out, no etcd quorum, both near expiry: fence", down, down, live(39*time.Second, 30*time.Second), false, ActFence, "", false},
		{"store out, no etcd quorum, both lapsed: fence", down, down, live(-time.Minute, -time.Minute), false, ActFence, "", false},
		{"store out, etcd answers without our claim: it does not protect", down, unconf, live(30*time.Second, 100*time.Second), false, ActFence, "", false},
		{"store out, etcd holds a newer holder's claim: lost", down, lost, live(100*time.Second, 100*time.Second), false, ActFence, "", true},
		{"store says taken over: lost even when etcd still confirms", lost, ok(2 * time.Minute), live(100*time.Second, 100*time.Second), false, ActFence, "etcd", true},
		{"no claim file, nothing answers: fence", down, down, Expiries{}, false, ActFence, "", false},
		{"fenced, store confirms again: unfence", ok(2 * time.Minute), down, Expiries{}, true, ActUnfence, "store", false},
		{"fenced, store confirms, etcd holds an older claim: unfence", ok(2 * time.Minute), unconf, Expiries{}, true, ActUnfence, "store", false},
		{"fenced, store still out, etcd confirms: stays fenced", down, ok(2 * time.Minute), Expiries{}, true, ActStayFenced, "etcd", false},
		{"fenced, nothing answers: stays fenced", down, down, Expiries{}, true, ActStayFenced, "", false},
		{"fenced, claim taken over: stays fenced", lost, down, Expiries{}, true, ActStayFenced, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(every, tc.st, tc.et, tc.prev, tc.fenced, now)
			if v.Action != tc.want || v.Source != tc.source || v.Lost != tc.lost {
				t.Errorf("Decide = %s, source %q, lost %v (%s); want %s, source %q, lost %v", v.Action, v.Source, v.Lost, v.Reason, tc.want, tc.source, tc.lost)
			}
			if (v.Action == ActFence || v.Action == ActStayFenced) && v.Reason == "" {
				t.Error("no reason given for fencing")
			}
		})
	}
}

// memEtcd is EtcdClaims in memory; down makes every call fail.
type memEtcd struct {
	mu    sync.Mutex
	rev   int64
	kv    map[string]Claim
	revs  map[string]int64
	down  bool
	reads int
}

func newMemEtcd() *memEtcd { return &memEtcd{kv: map[string]Claim{}, revs: map[string]int64{}} }

func (m *memEtcd) Read(_ context.Context, v string) (Claim, int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if m.down {
		return Claim{}, 0, false, errors.New("etcdserver: request timed out")
	}
	c, ok := m.kv[v]
	return c, m.revs[v], ok, nil
}

func (m *memEtcd) Write(_ context.Context, c Claim, rev int64) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return 0, false, errors.New("etcdserver: request timed out")
	}
	if m.revs[c.Volume] != rev {
		return 0, false, nil
	}
	m.rev++
	c.ETag = ""
	m.kv[c.Volume], m.revs[c.Volume] = c, m.rev
	return m.rev, true, nil
}

func (m *memEtcd) Close() error { return nil }

// downStore fails every call: the store's outage.
type downStore struct{ store.Store }

func (downStore) Get(context.Context, string) (io.ReadCloser, store.Info, error) {
	return nil, store.Info{}, fmt.Errorf("dial tcp: %w", store.ErrUnreachable)
}

func (downStore) Stat(context.Context, string) (store.Info, error) {
	return store.Info{}, fmt.Errorf("dial tcp: %w", store.ErrUnreachable)
}

func (downStore) Put(context.Context, string, io.Reader, store.PutOptions) (store.Info, error) {
	return store.Info{}, fmt.Errorf("dial tcp: %w", store.ErrUnreachable)
}

// TestRenewThroughStoreOutage: a holder renews in the store and in etcd;
// with the store out etcd alone keeps the claim live for as long as the
// outage lasts; without etcd either, it fences before the claim could be
// taken; back, the store un-fences it. A claimant meanwhile takes the
// volume only once neither source holds it.
func TestRenewThroughStoreOutage(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := func() time.Time { return now }
	lease := 30 * time.Second
	fs, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	etcd := newMemEtcd()
	cfg := Config{Provider: ProviderPool, Volumes: []string{"etcd-a"}, Lease: lease, HostID: "host-1", Root: t.TempDir()}
	if err := writeAtomic(cfg.path(IdentityFile), Identity{Member: "etcd-a", Volume: "etcd-a"}.Env(), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := cfg.pool(Deps{Store: fs, Now: clk}).Acquire(t.Context(), cfg.Volumes)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeClaimFile(cfg.path(ClaimFile), c); err != nil {
		t.Fatal(err)
	}
	d := Deps{Store: fs, Now: clk, Etcd: etcd, Endpoints: []string{"https://10.0.0.1:2379"}}
	renew := func(want Action, source string) *Renewal {
		t.Helper()
		r, err := Renew(t.Context(), cfg, d)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict.Action != want || r.Verdict.Source != source {
			t.Fatalf("at +%s: %s by %q (%s; store %s %v, etcd %s %v), want %s by %q", now.Sub(c.Acquired), r.Verdict.Action, r.Verdict.Source, r.Verdict.Reason, r.Store.State, r.Store.Err, r.Etcd.State, r.Etcd.Err, want, source)
		}
		return r
	}
	// First renewal: the store confirms, so the claim goes into etcd too.
	renew(ActKeep, "store+etcd")
	if got := etcd.kv["etcd-a"]; got.Holder != "host-1" || got.Generation != 1 {
		t.Fatalf("etcd holds %+v", got)
	}
	// A claimant sees the store claim with this host's endpoints.
	sc, _, _ := (&Pool{Store: fs}).Read(t.Context(), "etcd-a")
	if !slices.Equal(sc.Endpoints, d.Endpoints) {
		t.Errorf("store claim endpoints %v, want %v", sc.Endpoints, d.Endpoints)
	}

	// The store goes out for 10 minutes: etcd alone keeps the claim.
	d.Store = downStore{fs}
	claimant := &Pool{Store: fs, HostID: "host-2", Lease: lease, Now: clk, Attempts: 1,
		Etcd: func(context.Context, []string) (EtcdClaims, error) { return etcd, nil }}
	for range 60 {
		now = now.Add(RenewEvery(lease))
		renew(ActKeep, "etcd")
		// The store is back for the claimant only (the residual case is
		// the other way round): it must not take the volume.
		if _, err := claimant.Acquire(t.Context(), cfg.Volumes); !errors.Is(err, ErrNoFreeVolume) {
			t.Fatalf("at +%s: the claimant got %v, want ErrNoFreeVolume (the holder confirms through etcd)", now.Sub(c.Acquired), err)
		}
	}
	// The store is back: the lapsed store claim nobody took is renewed.
	d.Store = fs
	now = now.Add(RenewEvery(lease))
	renew(ActKeep, "store+etcd")

	// Cut off from both: it keeps the member while the claim is more than
	// a renewal interval from its expiry, then fences.
	d.Store, etcd.down = downStore{fs}, true
	now = now.Add(RenewEvery(lease))
	renew(ActKeep, "")
	now = now.Add(RenewEvery(lease))
	r := renew(ActFence, "")
	if r.Verdict.Until.Sub(now) <= 0 {
		t.Errorf("fenced after the claim ran out (%s)", r.Verdict.Until)
	}
	if err := writeJSON(cfg.path(FencedFile), fenceRecord{Reason: r.Verdict.Reason}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(RenewEvery(lease))
	renew(ActStayFenced, "")
	// etcd alone does not bring it back: its claim there lapsed.
	etcd.down = false
	now = now.Add(RenewEvery(lease))
	renew(ActStayFenced, "")
	// The store confirms again: un-fence, and etcd holds the claim again.
	d.Store = fs
	now = now.Add(RenewEvery(lease))
	renew(ActUnfence, "store+etcd")
	os.Remove(cfg.path(FencedFile))
	now = now.Add(RenewEvery(lease))
	renew(ActKeep, "store+etcd")

	// Cut off again, long enough for the claimant to take it over once
	// neither source holds the claim; back, the holder finds it lost.
	d.Store, etcd.down = downStore{fs}, true
	etcdOnlyForClaimant := newMemEtcd()
	etcdOnlyForClaimant.kv, etcdOnlyForClaimant.revs = etcd.kv, etcd.revs
	claimant.Etcd = func(context.Context, []string) (EtcdClaims, error) { return etcdOnlyForClaimant, nil }
	now = now.Add(lease - time.Second)
	if _, err := claimant.Acquire(t.Context(), cfg.Volumes); !errors.Is(err, ErrNoFreeVolume) {
		t.Fatalf("a second before expiry the claimant got %v", err)
	}
	now = now.Add(2 * time.Second)
	taken, err := claimant.Acquire(t.Context(), cfg.Volumes)
	if err != nil || taken.Generation != 2 {
		t.Fatalf("after expiry the claimant got %+v, %v", taken, err)
	}
	// The new holder's claim reaches etcd on its first renewal.
	if _, ok, err := etcdOnlyForClaimant.Write(t.Context(), taken, etcd.revs["etcd-a"]); !ok || err != nil {
		t.Fatal("could not write the new holder's claim", err)
	}
	etcd.down = false
	now = now.Add(time.Second)
	if r := renew(ActFence, ""); !r.Verdict.Lost {
		t.Errorf("the old holder did not see its claim lost in etcd: %s", r.Verdict.Reason)
	}
	d.Store = fs
	if r := renew(ActFence, ""); !r.Verdict.Lost || r.Store.State != Lost {
		t.Errorf("the old holder did not see its claim lost in the store: %s", r.Verdict.Reason)
	}
}

// TestClaimantWithoutEtcd: when no etcd member answers (quorum lost,
// every member dead), an expired store claim is taken over on the
// store's expiry alone, as replacements must to bring the cluster back.
func TestClaimantWithoutEtcd(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := func() time.Time { return now }
	fs, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	holder := &Pool{Store: fs, HostID: "host-1", Lease: 30 * time.Second, Now: clk, Endpoints: []string{"https://10.0.0.1:2379"}}
	c, err := holder.Acquire(t.Context(), []string{"etcd-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Renew(t.Context(), "etcd-a", &c); err != nil {
		t.Fatal(err)
	}
	etcd := newMemEtcd()
	etcd.kv["etcd-a"] = Claim{Volume: "etcd-a", Holder: "host-1", Generation: 1, Expires: now.Add(time.Hour)}
	etcd.down = true
	var dialed []string
	claimant := &Pool{Store: fs, HostID: "host-2", Lease: 30 * time.Second, Now: clk, Attempts: 1,
		Etcd: func(_ context.Context, eps []string) (EtcdClaims, error) { dialed = eps; return etcd, nil }}
	now = now.Add(31 * time.Second)
	got, err := claimant.Acquire(t.Context(), []string{"etcd-a"})
	if err != nil || got.Holder != "host-2" {
		t.Fatalf("claimant got %+v, %v; want etcd-a (no etcd member answers)", got, err)
	}
	if !slices.Equal(dialed, holder.Endpoints) || etcd.reads != 1 {
		t.Errorf("asked etcd at %v (%d reads), want %v once", dialed, etcd.reads, holder.Endpoints)
	}
}

// fakeUnits records what Fence and Unfence ask of systemd.
type fakeUnits struct {
	active map[string]bool
	calls  []string
	fail   string
}

func (f *fakeUnits) Active(_ context.Context, u string) (bool, error) { return f.active[u], nil }
func (f *fakeUnits) Stop(_ context.Context, u string) error {
	f.calls = append(f.calls, "stop "+u)
	if u == f.fail {
		return errors.New("job failed")
	}
	return nil
}
func (f *fakeUnits) Start(_ context.Context, u string, wait bool) error {
	f.calls = append(f.calls, fmt.Sprintf("start %s wait=%v", u, wait))
	if u == f.fail {
		return errors.New("job failed")
	}
	return nil
}

func TestFenceAndUnfence(t *testing.T) {
	root := t.TempDir()
	u := &fakeUnits{active: map[string]bool{"etcd.service": true, "var-lib-etcd.mount": true, "etcd-volume-attach.service": true,
		"etcd-dns-registrar.service": true, "etcd-member-join.timer": true, "etcd-snapshot-uploader.timer": true}, fail: "etcd.service"}
	log := slog.New(slog.DiscardHandler)
	err := Fence(t.Context(), root, u, "test", time.Now(), log)
	var stops []string
	for _, c := range u.calls {
		stops = append(stops, strings.TrimPrefix(c, "stop "))
	}
	if !slices.Equal(stops, FenceUnits()) {
		t.Errorf("stopped %v, want %v", stops, FenceUnits())
	}
	if err == nil || !strings.Contains(err.Error(), "stop etcd.service: job failed") {
		t.Errorf("error %v, want the failed stop named", err)
	}
	if slices.Index(FenceUnits(), "etcd.service") > slices.Index(FenceUnits(), "var-lib-etcd.mount") {
		t.Error("the mount is stopped before etcd")
	}
	if !Fenced(root) {
		t.Fatal("not marked fenced")
	}
	// Fencing again keeps the list of what was running before the first.
	u.active = map[string]bool{}
	Fence(t.Context(), root, u, "again", time.Now(), log)

	u.calls, u.fail = nil, "etcd-volume-attach.service"
	if err := Unfence(t.Context(), root, u, log); err == nil || !Fenced(root) {
		t.Fatalf("attach failed, yet un-fenced (%v)", err)
	}
	u.calls, u.fail = nil, ""
	if err := Unfence(t.Context(), root, u, log); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"start etcd-volume-attach.service wait=true", "start etcd-member-join.service wait=false",
		"start etcd-dns-registrar.service wait=false", "start etcd-snapshot-uploader.timer wait=false", "start etcd-member-join.timer wait=false",
	}
	if !slices.Equal(u.calls, want) {
		t.Errorf("un-fence did\n%v\nwant\n%v", u.calls, want)
	}
	if Fenced(root) {
		t.Error("still marked fenced")
	}
}

func TestClaimFileOfOlderVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claim.json")
	os.WriteFile(path, []byte(`{"volume":"etcd-b","holder":"h","expires":"2030-01-01T00:00:00Z","generation":3,"etag":"x"}`), 0o644)
	r, err := readClaimRecord(path)
	if err != nil || r.Confirmed.Store != time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) || r.Claim.ETag != "x" {
		t.Errorf("read %+v, %v", r, err)
	}
}

func TestAddressURLs(t *testing.T) {
	got := addressURLs([]string{"https://10.0.0.1:2379", "https://localhost:2379", "http://[::1]:2379", "https://no-such-host.invalid:2379", "%zz"})
	for _, want := range []string{"https://10.0.0.1:2379", "https://127.0.0.1:2379", "http://[::1]:2379", "https://no-such-host.invalid:2379", "%zz"} {
		if !slices.Contains(got, want) {
			t.Errorf("addressURLs: %v lacks %s", got, want)
		}
	}
	if slices.Contains(got, "https://localhost:2379") {
		t.Errorf("addressURLs kept a resolvable name: %v", got)
	}
}
