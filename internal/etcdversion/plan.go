package etcdversion

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Kind is how one step moves the cluster.
type Kind string

// Step kinds.
const (
	// Patch: the same minor; binaries swapped one member at a time.
	Patch Kind = "patch"
	// MinorUp: one minor up; binaries swapped one member at a time, leader
	// last; cluster and storage version move after the last member.
	MinorUp Kind = "minor-up"
	// MinorDown: one minor down through etcd's downgrade API (validate,
	// enable, storage versions at the target), then binaries swapped
	// leader last; the leader ends the downgrade.
	MinorDown Kind = "minor-down"
)

// Step is one move of the whole cluster.
type Step struct {
	From Version `json:"from"`
	To   Version `json:"to"`
	Kind Kind    `json:"kind"`
}

func (s Step) String() string { return fmt.Sprintf("%s → %s (%s)", s.From, s.To, s.Kind) }

// ErrRefused: no supported path.
var ErrRefused = errors.New("refused")

// Plan is the path from the version a cluster runs to a target.
type Plan struct {
	From  Version `json:"from"`
	To    Version `json:"to"`
	Steps []Step  `json:"steps"`
}

// Path renders "3.5.20 → 3.5.35 → 3.6.16".
func (p Plan) Path() string {
	parts := []string{p.From.String()}
	for _, s := range p.Steps {
		parts = append(parts, s.To.String())
	}
	return strings.Join(parts, " → ")
}

// NewPlan finds the path from → to through the versions the hosts can
// get (available): a patch, or minors one at a time, each minor step
// from at least its minimum patch (going through the newest available
// patch first when below it), a downgrade of one minor at most.
func NewPlan(from, to Version, available []Version) (Plan, error) {
	p := Plan{From: from, To: to}
	for _, v := range []Version{from, to} {
		if err := Supported(v); err != nil {
			return p, fmt.Errorf("%w: %w", ErrRefused, err)
		}
	}
	has := func(v Version) bool { return slices.Contains(available, v) }
	if !has(to) {
		return p, fmt.Errorf("%w: etcd %s is not available to the hosts (no release in the store, not baked on every host); run 'etcdadm release push %s --from DIR' or 'etcdadm release add %s --url URL --sha256-file FILE' first", ErrRefused, to, to, to)
	}
	switch {
	case from == to:
		return p, nil
	case SameMinor(from, to):
		p.Steps = []Step{{from, to, Patch}}
		return p, nil
	case Compare(to, from) < 0:
		if to.Minor != from.Minor-1 {
			return p, fmt.Errorf("%w: %s → %s goes down %d minors; etcd downgrades one minor at a time: run 'etcdadm upgrade --to 3.%d.x' first, then to %s", ErrRefused, from, to, from.Minor-to.Minor, from.Minor-1, to)
		}
		if from.Minor < 6 {
			return p, fmt.Errorf("%w: etcd %s has no downgrade API (it came with 3.6)", ErrRefused, from)
		}
		p.Steps = []Step{{from, to, MinorDown}}
		return p, nil
	}
	cur := from
	for cur.Minor < to.Minor {
		if min, ok := MinimumBeforeNext(cur); ok && Compare(cur, min) < 0 {
			next, ok := newest(available, cur, min)
			if !ok {
				return p, fmt.Errorf("%w: %s → 3.%d needs every member at %s or later first (older patches can bring back removed members or demote promoted voters); make a 3.%d release ≥ %s available ('etcdadm release push') and plan again", ErrRefused, cur, cur.Minor+1, min, cur.Minor, min)
			}
			p.Steps = append(p.Steps, Step{cur, next, Patch})
			cur = next
		}
		var next Version
		if cur.Minor+1 == to.Minor {
			next = to
		} else {
			var ok bool
			next, ok = newest(available, Version{3, cur.Minor + 1, 0}, Version{3, cur.Minor + 1, 0})
			if !ok {
				return p, fmt.Errorf("%w: %s → %s skips minor 3.%d, and etcd moves one minor at a time; make a 3.%d release available to the hosts ('etcdadm release push') and plan again", ErrRefused, from, to, cur.Minor+1, cur.Minor+1)
			}
		}
		p.Steps = append(p.Steps, Step{cur, next, MinorUp})
		cur = next
	}
	if cur != to {
		p.Steps = append(p.Steps, Step{cur, to, Patch})
	}
	return p, nil
}

// newest is the newest available version of like's minor that is at
// least atLeast.
func newest(available []Version, like, atLeast Version) (Version, bool) {
	var best Version
	ok := false
	for _, v := range available {
		if SameMinor(v, like) && Compare(v, atLeast) >= 0 && (!ok || Compare(v, best) > 0) {
			best, ok = v, true
		}
	}
	return best, ok
}

// NeedsFreshSnapshot: etcd 3.7 cannot replay raft entries written while
// the cluster ran 3.5 (v2 requests: "unmarshal should never fail", found
// by our rollout test), so before a member first starts 3.7 its log must
// be covered by a snapshot taken at 3.6, after the cluster left 3.5.
func NeedsFreshSnapshot(from, to Version) bool { return from.Minor < 7 && to.Minor >= 7 }
