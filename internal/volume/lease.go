package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// DefaultLease is etcd-volume-attach's --lease; etcd-volume-renew.timer's
// 40s is RenewEvery(DefaultLease).
const DefaultLease = 2 * time.Minute

// RenewEvery is how often a lease is renewed: a third of it, so one
// failed renewal still leaves time for the next.
func RenewEvery(lease time.Duration) time.Duration { return (lease / 3).Truncate(time.Second) }

// ClaimPrefix is where claims live in the store: <prefix><volume>.json.
const ClaimPrefix = "etcdadm/volumes/"

// Claim is one volume's lease: which host holds it and until when.
// Generation counts the hosts that have held the volume: it grows by one
// on every takeover and stays put on renewal, so it can fence later.
type Claim struct {
	Volume     string    `json:"volume"`
	Holder     string    `json:"holder"`
	Expires    time.Time `json:"expires"`
	Generation int64     `json:"generation"`
	Acquired   time.Time `json:"acquired"`
	// Endpoints are the holder's member's etcd client URLs, once it runs:
	// a host that finds a claim expired asks etcd through the members
	// the claims name (Pool.Etcd).
	Endpoints []string `json:"endpoints,omitempty"`
	// ETag is the store's version of the claim as this host read or
	// wrote it last; not part of the stored object.
	ETag string `json:"-"`
}

// Live reports whether the lease still runs at now.
func (c Claim) Live(now time.Time) bool { return now.Before(c.Expires) }

// maxName: a volume's name is its member's name and its ext4 label,
// which holds 16 bytes.
const maxName = 16

// CheckName accepts volume names: member names (pki.CheckMemberName)
// short enough to be ext4 labels.
func CheckName(name string) error {
	if err := pki.CheckMemberName(name); err != nil {
		return fmt.Errorf("%w: volume: %w", ErrConfig, err)
	}
	if len(name) > maxName {
		return fmt.Errorf("%w: volume name %q: at most %d characters (it is the ext4 label)", ErrConfig, name, maxName)
	}
	return nil
}

// Names returns the pool of a cluster of n members: etcd-a, etcd-b, ...
func Names(n int) []string {
	var out []string
	for i := 0; i < n && i < 26; i++ {
		out = append(out, "etcd-"+string(rune('a'+i)))
	}
	return out
}

// Pool claims volumes through leases in the store. Claims are only ever
// written create-only or compare-and-swap on the ETag just read, so of
// two hosts racing for one volume exactly one wins, and a live lease is
// never taken.
type Pool struct {
	Store  store.Store
	HostID string
	Lease  time.Duration
	Now    func() time.Time
	Log    *slog.Logger
	// Attempts bounds the retries after store failures; 0 retries until
	// ctx ends. Backoff is the first pause between them, doubling up to
	// 15s (default 1s).
	Attempts int
	Backoff  time.Duration
	// WaitForFree: when every volume is held, wait (until ctx ends) for
	// the first live lease to run out instead of failing at once with
	// ErrNoFreeVolume. A replacement host booted while the dead host's
	// lease still runs thus claims the volume as soon as it may.
	WaitForFree bool
	// Endpoints: this host's member's etcd client URLs, recorded in its
	// claim on renewal (nil: keep what the claim has).
	Endpoints []string
	// Etcd opens the claims in etcd (EtcdClaims) through the members the
	// claims name. A store claim that expired is taken over only when
	// etcd holds no live claim for the volume, or when no etcd member
	// answers (quorum lost, every member dead: then replacements must
	// take volumes over to bring the cluster back). nil: the store's
	// expiry alone decides.
	Etcd EtcdDialer
}

// NoFreeError is ErrNoFreeVolume with the claim that runs out first.
type NoFreeError struct{ Next Claim }

func (e *NoFreeError) Error() string {
	return fmt.Sprintf("%v (the first to run out: %s, held by %s until %s)", ErrNoFreeVolume, e.Next.Volume, e.Next.Holder, e.Next.Expires.Format(time.RFC3339))
}

func (e *NoFreeError) Unwrap() error { return ErrNoFreeVolume }

func (p *Pool) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pool) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.New(slog.DiscardHandler)
}

func claimKey(name string) string { return ClaimPrefix + name + ".json" }

// Read returns a volume's claim and its ETag; ErrNotFound (wrapped) when
// nobody ever claimed it.
func (p *Pool) Read(ctx context.Context, name string) (Claim, string, error) {
	b, info, err := store.GetBytes(ctx, p.Store, claimKey(name), 1<<16)
	if err != nil {
		return Claim{}, "", fmt.Errorf("claim %s: %w", name, err)
	}
	var c Claim
	if err := json.Unmarshal(b, &c); err != nil {
		return Claim{}, "", fmt.Errorf("claim %s: %s: %w", name, claimKey(name), err)
	}
	c.ETag = info.ETag
	return c, info.ETag, nil
}

// write stores c under opts' condition and returns it with its new ETag.
func (p *Pool) write(ctx context.Context, c Claim, opts store.PutOptions) (Claim, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return c, err
	}
	info, err := store.PutBytes(ctx, p.Store, claimKey(c.Volume), b, opts)
	c.ETag = info.ETag
	return c, err
}

func (p *Pool) check() error {
	if p.Store == nil || p.HostID == "" || p.Lease <= 0 {
		return fmt.Errorf("%w: a pool needs a store, a host id and a positive lease", ErrConfig)
	}
	return nil
}

// Acquire gives this host one volume of names: the one it already holds
// (renewed), else the lowest-named free or expired one. Store failures
// are retried a bounded number of times; each attempt starts from a fresh
// read, so a write whose answer was lost is found as our own claim and
// kept, never followed by a second claim.
func (p *Pool) Acquire(ctx context.Context, names []string) (Claim, error) {
	if err := p.check(); err != nil {
		return Claim{}, err
	}
	if len(names) == 0 {
		return Claim{}, fmt.Errorf("%w: the pool has no volumes", ErrConfig)
	}
	for _, n := range names {
		if err := CheckName(n); err != nil {
			return Claim{}, err
		}
	}
	backoff := p.Backoff
	if backoff <= 0 {
		backoff = time.Second
	}
	sleep := func(d time.Duration, err error) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return fmt.Errorf("claim: %w (last error: %w)", ctx.Err(), err)
		}
	}
	var err error
	for failures := 0; ; {
		var c Claim
		c, err = p.acquireOnce(ctx, names)
		var nf *NoFreeError
		switch {
		case err == nil, errors.Is(err, ErrConfig):
			return c, err
		case errors.As(err, &nf):
			if !p.WaitForFree {
				return c, err
			}
			// Wait for the first lease to run out; a little after, so the
			// holder's clock and ours need not agree to the millisecond.
			wait := min(max(time.Until(nf.Next.Expires)+time.Second, time.Second), p.Lease)
			p.log().Info("every volume is held; waiting for the first lease to run out", "volume", nf.Next.Volume, "holder", nf.Next.Holder, "expires", nf.Next.Expires, "wait", wait.Round(time.Second))
			if err := sleep(wait, err); err != nil {
				return Claim{}, err
			}
			continue
		case errors.Is(err, ErrPaused):
			if !p.WaitForFree {
				return c, err
			}
			p.log().Info("waiting for 'etcdadm resume'", "reason", err)
			if err := sleep(min(15*time.Second, p.Lease), err); err != nil {
				return Claim{}, err
			}
			continue
		}
		failures++
		if p.Attempts > 0 && failures >= p.Attempts {
			return Claim{}, fmt.Errorf("claim: %w: giving up after %d attempts: %w", ErrStore, failures, err)
		}
		p.log().Warn("claim attempt failed; retrying", "attempt", failures, "err", err, "backoff", backoff)
		if err := sleep(backoff, err); err != nil {
			return Claim{}, fmt.Errorf("%w: %w", ErrStore, err)
		}
		backoff = min(2*backoff, 15*time.Second)
	}
}

type seen struct {
	claim  Claim
	etag   string
	exists bool
}

func (p *Pool) acquireOnce(ctx context.Context, names []string) (Claim, error) {
	// Read every claim first; any read error ends the attempt, so we never
	// act on a partial view.
	view := make([]seen, len(names))
	for i, n := range names {
		c, etag, err := p.Read(ctx, n)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return Claim{}, err
		default:
			view[i] = seen{c, etag, true}
		}
	}
	now := p.now()
	// Ours first, live or lapsed: nobody took it, so it is still ours.
	for i, n := range names {
		v := view[i]
		if !v.exists || v.claim.Holder != p.HostID {
			continue
		}
		c := v.claim
		c.Volume, c.Expires = n, now.Add(p.Lease)
		c, err := p.write(ctx, c, store.PutOptions{IfMatch: v.etag})
		if errors.Is(err, store.ErrPrecondition) {
			// Taken over between our read and write: look again.
			return Claim{}, fmt.Errorf("claim %s: changed while renewing: %w", n, err)
		}
		if err != nil {
			return Claim{}, fmt.Errorf("claim %s: renew: %w", n, err)
		}
		p.log().Info("kept the volume this host holds", "volume", n, "generation", c.Generation, "expires", c.Expires)
		return c, nil
	}
	var next *Claim // the live lease that runs out first
	held := ""      // why an expired volume was not taken over
	etcd := p.etcdView(view)
	defer etcd.close()
	for i, n := range names {
		v := view[i]
		c := Claim{Volume: n, Holder: p.HostID, Expires: now.Add(p.Lease), Generation: 1, Acquired: now}
		opts := store.PutOptions{IfNoneMatch: true}
		if v.exists {
			if v.claim.Live(now) {
				if next == nil || v.claim.Expires.Before(next.Expires) {
					next = &view[i].claim
					next.Volume = n
				}
				continue
			}
			// Its holder may still confirm the claim through etcd (the
			// store was out, or out of its reach).
			if ec, ok := etcd.live(ctx, n, now); ok {
				if next == nil || ec.Expires.Before(next.Expires) {
					next = &ec
				}
				continue
			}
			// Taking a dead host's member over is the automation's
			// call; the operator may be holding it.
			if pz, err := pause.Get(ctx, p.Store); err != nil {
				return Claim{}, err
			} else if pz != nil {
				held = fmt.Sprintf("volume %s (expired) is not taken over: %s", n, pz)
				continue
			}
			c.Generation = v.claim.Generation + 1
			opts = store.PutOptions{IfMatch: v.etag}
		}
		c, err := p.write(ctx, c, opts)
		if errors.Is(err, store.ErrPrecondition) {
			continue // another host was faster
		}
		if err != nil {
			// The write may or may not have happened: end the attempt
			// here rather than try the next volume.
			return Claim{}, fmt.Errorf("claim %s: %w", n, err)
		}
		if v.exists {
			p.log().Info("took over an expired volume", "volume", n, "previous_holder", v.claim.Holder, "expired", v.claim.Expires, "generation", c.Generation)
		} else {
			p.log().Info("claimed a new volume", "volume", n)
		}
		return c, nil
	}
	if next == nil && held != "" {
		return Claim{}, fmt.Errorf("claim: %s: %w", held, ErrPaused)
	}
	if next == nil {
		// Every free one was taken between our read and our write.
		return Claim{}, fmt.Errorf("claim: lost every race for a free volume; looking again: %w", store.ErrPrecondition)
	}
	return Claim{}, &NoFreeError{Next: *next}
}

// Renew extends this host's lease on name. ErrLost when another host has
// taken the volume over; a lapsed lease nobody took is renewed. last is
// the claim as this host wrote it last (ClaimFile), or nil: while the
// store's claim is still that version, one write conditional on its ETag
// renews it, without a read first. Whatever changed the claim since
// (another host's takeover) fails that condition, and a read tells what
// happened.
func (p *Pool) Renew(ctx context.Context, name string, last *Claim) (Claim, error) {
	if err := p.check(); err != nil {
		return Claim{}, err
	}
	if last != nil && last.Volume == name && last.Holder == p.HostID && last.ETag != "" {
		c := *last
		if p.Endpoints != nil {
			c.Endpoints = p.Endpoints
		}
		now := p.now()
		if !c.Live(now) {
			p.log().Warn("lease had lapsed; renewing unless another host took the volume", "volume", name, "expired", c.Expires)
		}
		c.Expires = now.Add(p.Lease)
		c, err := p.write(ctx, c, store.PutOptions{IfMatch: last.ETag})
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, store.ErrPrecondition) {
			return Claim{}, fmt.Errorf("renew %s: %w: %w", name, ErrStore, err)
		}
		// Changed since we wrote it: read it to learn by whom.
	}
	c, etag, err := p.Read(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return Claim{}, fmt.Errorf("renew %s: %w (the claim is gone)", name, ErrLost)
	}
	if err != nil {
		return Claim{}, fmt.Errorf("renew: %w: %w", ErrStore, err)
	}
	if c.Holder != p.HostID {
		return Claim{}, fmt.Errorf("renew %s: %w: held by %s since %s", name, ErrLost, c.Holder, c.Acquired.Format(time.RFC3339))
	}
	now := p.now()
	if !c.Live(now) {
		p.log().Warn("lease had lapsed; nobody took the volume, renewing", "volume", name, "expired", c.Expires)
	}
	if p.Endpoints != nil {
		c.Endpoints = p.Endpoints
	}
	c.Expires = now.Add(p.Lease)
	c, err = p.write(ctx, c, store.PutOptions{IfMatch: etag})
	if errors.Is(err, store.ErrPrecondition) {
		now, _, rerr := p.Read(ctx, name)
		if rerr == nil && now.Holder == p.HostID {
			return now, nil // renewed concurrently by another run on this host
		}
		return Claim{}, fmt.Errorf("renew %s: %w: the claim changed under us", name, ErrLost)
	}
	if err != nil {
		return Claim{}, fmt.Errorf("renew %s: %w: %w", name, ErrStore, err)
	}
	return c, nil
}

// etcdView is one claim attempt's look at the claims in etcd, opened on
// the first expired claim through the members every claim names.
type etcdView struct {
	p         *Pool
	endpoints []string
	kv        EtcdClaims
	err       error // why etcd could not be asked
	opened    bool
}

func (p *Pool) etcdView(view []seen) *etcdView {
	e := &etcdView{p: p}
	for _, v := range view {
		for _, ep := range v.claim.Endpoints {
			if v.exists && !slices.Contains(e.endpoints, ep) {
				e.endpoints = append(e.endpoints, ep)
			}
		}
	}
	return e
}

// live returns the live claim etcd holds for volume, if any. When etcd
// cannot be asked (no member known, none answers, no quorum) it returns
// none: the store's expiry decides, as it must when the cluster lost its
// quorum and replacements must take the volumes over.
func (e *etcdView) live(ctx context.Context, volume string, now time.Time) (Claim, bool) {
	log := e.p.log().With("volume", volume)
	if e.p.Etcd == nil {
		return Claim{}, false
	}
	if !e.opened {
		e.opened = true
		if len(e.endpoints) == 0 {
			e.err = errors.New("no claim names an etcd member")
		} else {
			e.kv, e.err = e.p.Etcd(ctx, e.endpoints)
		}
	}
	if e.err != nil {
		log.Warn("the store claim expired and etcd cannot be asked whether its holder still confirms it: going by the store's expiry alone", "err", e.err)
		return Claim{}, false
	}
	rctx, cancel := context.WithTimeout(ctx, etcdCheckTimeout)
	defer cancel()
	c, _, found, err := e.kv.Read(rctx, volume)
	switch {
	case err != nil:
		log.Warn("the store claim expired and no etcd member answered (no quorum?): going by the store's expiry alone", "endpoints", e.endpoints, "err", err)
		return Claim{}, false
	case found && c.Live(now):
		c.Volume = volume
		log.Info("the store claim expired but its holder still confirms it through etcd: not taking it over", "holder", c.Holder, "generation", c.Generation, "etcd_expires", c.Expires)
		return c, true
	case found:
		log.Info("the claim expired in the store and in etcd", "holder", c.Holder, "etcd_expired", c.Expires)
	default:
		log.Info("the store claim expired and etcd holds none")
	}
	return Claim{}, false
}

func (e *etcdView) close() {
	if e.kv != nil {
		e.kv.Close()
	}
}

// etcdCheckTimeout bounds a claimant's read of a claim in etcd.
const etcdCheckTimeout = 5 * time.Second
