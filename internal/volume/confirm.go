package volume

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A pool claim is held in two places: the store (the authority: every
// takeover is a compare-and-swap there) and, once etcd runs, etcd (the
// pivot). A claimant takes a volume over only when its store claim has
// expired and etcd holds no live claim for it (Pool.Acquire), or when no
// etcd member answers at all. The holder renews both on every renewal
// and decides from what they said (Decide): it keeps its member while
// either confirms the claim, fences only when neither has for so long
// that the claim could be taken before the next renewal, and un-fences
// once the store confirms the claim again.

// SourceState is what one source said about this host's claim in one
// renewal.
type SourceState int

const (
	// Unreachable: the source could not be asked (store down, no etcd
	// quorum, no etcd client on this host). It says nothing.
	Unreachable SourceState = iota
	// Confirmed: the source holds this host's claim until Until.
	Confirmed
	// Unconfirmed: etcd answered but holds no live claim of this host
	// (none, an older holder's, or ours lapsed): it does not protect the
	// claim. Only the store can put it there again.
	Unconfirmed
	// Lost: the source holds another host's newer claim.
	Lost
)

func (s SourceState) String() string {
	switch s {
	case Confirmed:
		return "confirmed"
	case Unconfirmed:
		return "unconfirmed"
	case Lost:
		return "lost"
	}
	return "unreachable"
}

// SourceResult is one source's answer in one renewal.
type SourceResult struct {
	State SourceState
	Until time.Time // Confirmed: the claim's new expiry
	Err   error     // why it is not Confirmed
}

// Expiries are the latest expiries this host got confirmed by each
// source (kept in ClaimFile): no claimant can take the volume before
// the one of a source it can ask.
type Expiries struct {
	Store time.Time `json:"store,omitzero"`
	Etcd  time.Time `json:"etcd,omitzero"`
}

// Action is what a renewal does to the host.
type Action int

const (
	ActKeep       Action = iota // the member keeps running
	ActFence                    // stop the member and unmount the volume now
	ActStayFenced               // fenced already; not confirmed well enough to come back
	ActUnfence                  // fenced, and the store confirms the claim again: come back
)

func (a Action) String() string {
	return [...]string{"keep", "fence", "stay fenced", "unfence"}[a]
}

// Verdict is the decision of one renewal.
type Verdict struct {
	Action Action
	// Source is what confirmed the claim in this renewal: "store",
	// "etcd", "store+etcd", or "" for nothing.
	Source string
	// Until: no claimant that asks the sources can take the volume before
	// then (the later of the two expiries).
	Until  time.Time
	Lost   bool // another host holds the volume
	Reason string
}

// Decide is the holder's rule, for one renewal: st and et are what the
// store and etcd said now, prev the expiries confirmed before (this
// renewal's included when Confirmed), fenced whether the host is fenced.
// The store is the authority: its confirmation wins over an etcd claim
// that names another holder (an old one, left by a takeover made while
// no etcd member answered), and only it un-fences (coming back re-runs
// etcd-volume-attach, which claims through the store). Without a
// confirmation in this renewal the host keeps its member while the
// claim's expiry is more than one renewal interval (renewEvery) and a
// renewal's timeout away, and fences before it: with a lease of three
// intervals, after the second renewal in a row that nothing confirmed.
func Decide(renewEvery time.Duration, st, et SourceResult, prev Expiries, fenced bool, now time.Time) Verdict {
	if st.State == Confirmed {
		prev.Store = st.Until
	}
	if et.State == Confirmed {
		prev.Etcd = et.Until
	} else if et.State == Unconfirmed || et.State == Lost {
		prev.Etcd = time.Time{} // etcd answered: no live claim of ours protects us there
	}
	until := prev.Store
	if prev.Etcd.After(until) {
		until = prev.Etcd
	}
	v := Verdict{Until: until}
	switch {
	case st.State == Confirmed && et.State == Confirmed:
		v.Source = "store+etcd"
	case st.State == Confirmed:
		v.Source = "store"
	case et.State == Confirmed:
		v.Source = "etcd"
	}
	lost := func(src string, err error) Verdict {
		v.Action, v.Lost, v.Until = ActFence, true, time.Time{}
		if fenced {
			v.Action = ActStayFenced
		}
		v.Reason = fmt.Sprintf("the claim was taken over by another host (%s: %v)", src, err)
		return v
	}
	switch {
	case st.State == Lost:
		return lost("store", st.Err)
	case st.State == Confirmed && fenced:
		v.Action, v.Reason = ActUnfence, "the store confirms the claim again"
		return v
	case st.State == Confirmed:
		return v
	case et.State == Lost:
		return lost("etcd", et.Err)
	case fenced:
		v.Action, v.Reason = ActStayFenced, "waiting for the store to confirm the claim (store: "+errText(st.Err)+")"
		return v
	case et.State == Confirmed:
		return v
	}
	// The next renewal decides at most an interval and its calls'
	// timeout from now: it starts an interval later, and its calls to an
	// unreachable store or etcd may hang that long. Fence now if that
	// could be past the expiry.
	if left := until.Sub(now); left < renewEvery+RenewTimeout(renewEvery) {
		v.Action = ActFence
		v.Reason = fmt.Sprintf("neither the store (%s) nor an etcd quorum (%s: %s) confirmed the claim, and it could be taken in %s (at %s)",
			errText(st.Err), et.State, errText(et.Err), left.Round(time.Second), until.Format(time.RFC3339))
	}
	return v
}

// RenewTimeout bounds a renewal's calls to the store and etcd: a quarter
// of the renewal interval, so an unreachable source delays the decision
// by little, and far more than a store or etcd write takes.
func RenewTimeout(renewEvery time.Duration) time.Duration { return renewEvery / 4 }

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// renewEtcd renews this host's claim in etcd when etcd holds it, for
// this host's generation, and it is still live: one write through the
// quorum, conditional on the revision just read. A lapsed claim is not
// brought back here: a claimant may have taken the volume over in the
// store meanwhile, and only the store can tell (installEtcd).
func renewEtcd(ctx context.Context, kv EtcdClaims, mine Claim, lease time.Duration, now time.Time) SourceResult {
	c, rev, found, err := kv.Read(ctx, mine.Volume)
	if err != nil {
		return SourceResult{State: Unreachable, Err: err}
	}
	switch {
	case !found:
		return SourceResult{State: Unconfirmed, Err: errors.New("etcd holds no claim for " + mine.Volume)}
	case c.Generation > mine.Generation, c.Generation == mine.Generation && c.Holder != mine.Holder:
		return SourceResult{State: Lost, Err: fmt.Errorf("%w: etcd holds %s for %s (generation %d, ours %d)", ErrLost, mine.Volume, c.Holder, c.Generation, mine.Generation)}
	case c.Holder != mine.Holder || c.Generation < mine.Generation:
		return SourceResult{State: Unconfirmed, Err: fmt.Errorf("etcd holds an older claim on %s (%s, generation %d)", mine.Volume, c.Holder, c.Generation)}
	case !c.Live(now):
		return SourceResult{State: Unconfirmed, Err: fmt.Errorf("our claim in etcd lapsed at %s", c.Expires.Format(time.RFC3339))}
	}
	c.Expires = now.Add(lease)
	_, ok, err := kv.Write(ctx, c, rev)
	switch {
	case err != nil:
		return SourceResult{State: Unreachable, Err: err}
	case !ok:
		return SourceResult{State: Unconfirmed, Err: errors.New("the claim in etcd changed while renewing")}
	}
	return SourceResult{State: Confirmed, Until: c.Expires}
}

// installEtcd puts the claim the store just confirmed into etcd, over
// whatever etcd held (an older holder's claim, ours lapsed, none).
func installEtcd(ctx context.Context, kv EtcdClaims, c Claim) SourceResult {
	_, rev, _, err := kv.Read(ctx, c.Volume)
	if err != nil {
		return SourceResult{State: Unreachable, Err: err}
	}
	_, ok, err := kv.Write(ctx, c, rev)
	switch {
	case err != nil:
		return SourceResult{State: Unreachable, Err: err}
	case !ok:
		return SourceResult{State: Unconfirmed, Err: errors.New("the claim in etcd changed while writing it")}
	}
	return SourceResult{State: Confirmed, Until: c.Expires}
}
