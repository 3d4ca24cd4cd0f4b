package volume_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storetest"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
	"github.com/etcdadm/etcdadm-immutable/internal/volume"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// forEachStore runs fn against a fresh filestore and a fresh prefix of
// one MinIO server per call of open.
func forEachStore(t *testing.T, fn func(t *testing.T, open func(t *testing.T) store.Store)) {
	t.Run("filestore", func(t *testing.T) {
		fn(t, func(t *testing.T) store.Store {
			s, err := filestore.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("minio", func(t *testing.T) {
		srv := testenv.StartMinIO(t)
		var n atomic.Int64
		fn(t, func(t *testing.T) store.Store {
			s, err := storeurl.Open(t.Context(), srv.URL(fmt.Sprintf("volume/%d/", n.Add(1))), srv.Env())
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

// clock is a settable time source shared by the hosts of a test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newPool(s store.Store, host string, clk *clock) *volume.Pool {
	p := &volume.Pool{Store: s, HostID: host, Lease: 2 * time.Minute, Attempts: 5, Backoff: time.Millisecond}
	if clk != nil {
		p.Now = clk.Now
	}
	return p
}

// holders reads who holds each volume.
func holders(t *testing.T, s store.Store, names []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	p := &volume.Pool{Store: s}
	for _, n := range names {
		c, _, err := p.Read(t.Context(), n)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[n] = c.Holder
	}
	return out
}

func TestPool(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		t.Run("RaceOneVolume", func(t *testing.T) {
			for round := 0; round < 50; round++ {
				s := open(t)
				var wg sync.WaitGroup
				results := make([]error, 2)
				claims := make([]volume.Claim, 2)
				start := make(chan struct{})
				for i := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						claims[i], results[i] = newPool(s, fmt.Sprintf("host-%d", i), nil).Acquire(t.Context(), []string{"etcd-a"})
					}()
				}
				close(start)
				wg.Wait()
				winners := 0
				for i, err := range results {
					switch {
					case err == nil:
						winners++
						if claims[i].Volume != "etcd-a" || claims[i].Holder != fmt.Sprintf("host-%d", i) {
							t.Errorf("round %d: host-%d got %+v", round, i, claims[i])
						}
					case errors.Is(err, volume.ErrNoFreeVolume):
					default:
						t.Fatalf("round %d: host-%d: %v", round, i, err)
					}
				}
				if winners != 1 {
					t.Fatalf("round %d: %d winners (%v), want exactly 1", round, winners, results)
				}
				h := holders(t, s, []string{"etcd-a"})["etcd-a"]
				if (h == "host-0") != (results[0] == nil) {
					t.Fatalf("round %d: store says %s holds etcd-a, results %v", round, h, results)
				}
			}
		})

		t.Run("ThreeHostsThreeVolumes", func(t *testing.T) {
			s := open(t)
			names := volume.Names(3)
			var wg sync.WaitGroup
			got := make([]volume.Claim, 4)
			errs := make([]error, 4)
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i], errs[i] = newPool(s, fmt.Sprintf("host-%d", i), nil).Acquire(t.Context(), names)
				}()
			}
			wg.Wait()
			seen := map[string]bool{}
			losers := 0
			for i := range 4 {
				if errors.Is(errs[i], volume.ErrNoFreeVolume) {
					losers++
					continue
				}
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				if seen[got[i].Volume] {
					t.Errorf("%s claimed twice", got[i].Volume)
				}
				seen[got[i].Volume] = true
			}
			if losers != 1 || len(seen) != 3 {
				t.Errorf("claims %v, errors %v: want each volume once and one host without", got, errs)
			}
		})

		t.Run("RerunKeepsClaim", func(t *testing.T) {
			s := open(t)
			clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
			names := volume.Names(3)
			a, b := newPool(s, "host-a", clk), newPool(s, "host-b", clk)
			first, err := a.Acquire(t.Context(), names)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Acquire(t.Context(), names); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Minute)
			again, err := a.Acquire(t.Context(), names)
			if err != nil {
				t.Fatal(err)
			}
			if again.Volume != first.Volume || again.Generation != first.Generation || !again.Expires.After(first.Expires) {
				t.Errorf("re-run: %+v, first %+v: want the same volume and generation, a later expiry", again, first)
			}
			// Even after its lease lapsed, a claim nobody took is kept.
			clk.Add(time.Hour)
			again, err = a.Acquire(t.Context(), names)
			if err != nil || again.Volume != first.Volume || again.Generation != first.Generation {
				t.Errorf("after lapse: %+v, %v; want %s generation %d", again, err, first.Volume, first.Generation)
			}
			if n := countHeld(holders(t, s, names), "host-a"); n != 1 {
				t.Errorf("host-a holds %d volumes, want 1", n)
			}
		})

		t.Run("ExpiryTakeover", func(t *testing.T) {
			s := open(t)
			clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
			names := []string{"etcd-a"}
			a, b := newPool(s, "host-a", clk), newPool(s, "host-b", clk)
			ca, err := a.Acquire(t.Context(), names)
			if err != nil {
				t.Fatal(err)
			}
			// Live (also renewed at 1m40s): never taken.
			for _, step := range []time.Duration{time.Second, 59 * time.Second, 40 * time.Second} {
				clk.Add(step)
				if _, err := b.Acquire(t.Context(), names); !errors.Is(err, volume.ErrNoFreeVolume) {
					t.Fatalf("takeover of a live lease: %v", err)
				}
			}
			// One request renews it: a write conditional on the ETag
			// Acquire wrote.
			counted := &storetest.Counting{Store: s}
			a.Store = counted
			ra, err := a.Renew(t.Context(), "etcd-a", &ca)
			if err != nil {
				t.Fatal(err)
			}
			if g, p := counted.Gets.Load(), counted.Puts.Load(); g != 0 || p != 1 {
				t.Errorf("renewal from the claim this host wrote: %d reads and %d writes, want 0 and 1", g, p)
			}
			a.Store = s
			// Renewed meanwhile by another run on this host: the stale
			// ETag fails, the read finds the claim still ours.
			if ra, err = a.Renew(t.Context(), "etcd-a", &ca); err != nil || ra.Holder != "host-a" {
				t.Fatalf("renewal from a stale copy of our own claim: %+v, %v", ra, err)
			}
			clk.Add(119 * time.Second)
			if _, err := b.Acquire(t.Context(), names); !errors.Is(err, volume.ErrNoFreeVolume) {
				t.Fatalf("takeover of a renewed lease: %v", err)
			}
			clk.Add(2 * time.Second) // now past the renewed expiry
			cb, err := b.Acquire(t.Context(), names)
			if err != nil {
				t.Fatalf("takeover of an expired lease: %v", err)
			}
			if cb.Holder != "host-b" || cb.Generation != ca.Generation+1 {
				t.Errorf("takeover claim %+v, want host-b generation %d", cb, ca.Generation+1)
			}
			for _, last := range []*volume.Claim{&ra, nil} {
				if _, err := a.Renew(t.Context(), "etcd-a", last); !errors.Is(err, volume.ErrLost) {
					t.Errorf("renew by the old holder (from %v): %v, want ErrLost", last, err)
				}
			}
			if _, err := a.Acquire(t.Context(), names); !errors.Is(err, volume.ErrNoFreeVolume) {
				t.Errorf("old holder re-acquires: %v, want ErrNoFreeVolume", err)
			}
		})

		t.Run("WaitForFree", func(t *testing.T) {
			// Real time, with a 2s lease (Config's 10s minimum is not
			// Pool's concern).
			s := open(t)
			names := volume.Names(1)
			a, b := newPool(s, "host-a", nil), newPool(s, "host-b", nil)
			a.Lease, b.Lease = 2*time.Second, 2*time.Second
			ca, err := a.Acquire(t.Context(), names)
			if err != nil {
				t.Fatal(err)
			}
			var nf *volume.NoFreeError
			if _, err := b.Acquire(t.Context(), names); !errors.As(err, &nf) || nf.Next.Holder != "host-a" || !nf.Next.Expires.Equal(ca.Expires) {
				t.Fatalf("without waiting: %v, want NoFreeError naming host-a's claim until %s", err, ca.Expires)
			}
			// With a deadline before the lease runs out: no claim.
			b.WaitForFree = true
			short, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			if _, err := b.Acquire(short, names); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("deadline before expiry: %v", err)
			}
			cb, err := b.Acquire(t.Context(), names)
			if err != nil {
				t.Fatalf("waiting for the lease to run out: %v", err)
			}
			if cb.Holder != "host-b" || !time.Now().After(ca.Expires) {
				t.Fatalf("claim %+v at %s: taken before host-a's lease ran out at %s", cb, time.Now(), ca.Expires)
			}
		})

		t.Run("FlakyStore", func(t *testing.T) {
			names := volume.Names(2)
			for round := 0; round < 20; round++ {
				s := open(t)
				rng := rand.New(rand.NewPCG(uint64(round), 7))
				var mu sync.Mutex
				flaky := func(h string) store.Store {
					return &flakyStore{Store: s, fail: func() bool { mu.Lock(); defer mu.Unlock(); return rng.IntN(3) == 0 }}
				}
				var wg sync.WaitGroup
				for i := range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						host := fmt.Sprintf("host-%d", i)
						p := newPool(flaky(host), host, nil)
						p.Attempts = 3
						// Runs twice, as a restarted unit would.
						for range 2 {
							c, err := p.Acquire(t.Context(), names)
							if err == nil && c.Holder != host {
								t.Errorf("%s got a claim of %s", host, c.Holder)
							}
						}
					}()
				}
				wg.Wait()
				h := holders(t, s, names)
				for i := range 3 {
					if n := countHeld(h, fmt.Sprintf("host-%d", i)); n > 1 {
						t.Fatalf("round %d: host-%d holds %d volumes: %v", round, i, n, h)
					}
				}
			}
		})

		t.Run("StoreDown", func(t *testing.T) {
			s := open(t)
			down := &flakyStore{Store: s, fail: func() bool { return true }}
			p := newPool(down, "host-a", nil)
			p.Attempts = 3
			if _, err := p.Acquire(t.Context(), volume.Names(3)); !errors.Is(err, volume.ErrStore) || !errors.Is(err, store.ErrUnreachable) {
				t.Errorf("store down: %v, want ErrStore wrapping ErrUnreachable", err)
			}
			if h := holders(t, s, volume.Names(3)); len(h) != 0 {
				t.Errorf("claims written while the store was down: %v", h)
			}
		})
	})
}

func countHeld(h map[string]string, host string) int {
	n := 0
	for _, v := range h {
		if v == host {
			n++
		}
	}
	return n
}

// flakyStore fails calls when fail says so: reads before reaching the
// store, writes either before or after (the write happened but its answer
// was lost), the worst case for a claim.
type flakyStore struct {
	store.Store
	fail  func() bool
	calls atomic.Int64
}

var errInjected = fmt.Errorf("injected failure: %w", store.ErrUnreachable)

func (f *flakyStore) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	if f.fail() {
		return nil, store.Info{}, errInjected
	}
	return f.Store.Get(ctx, key)
}

func (f *flakyStore) Put(ctx context.Context, key string, r io.Reader, opts store.PutOptions) (store.Info, error) {
	if f.fail() {
		if f.calls.Add(1)%2 == 0 {
			return store.Info{}, errInjected
		}
		if _, err := f.Store.Put(ctx, key, r, opts); err != nil {
			return store.Info{}, err
		}
		return store.Info{}, errInjected
	}
	return f.Store.Put(ctx, key, r, opts)
}
