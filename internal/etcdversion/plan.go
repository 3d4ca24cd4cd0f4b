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
//
// A refusal names every reason at once, the most fundamental first: the
// path (an unsupported version, a downgrade of more than one minor, a
// skipped minor no release can bridge), then the gates (the minimum patch
// before a minor step), then the releases the hosts cannot get. Each
// reason says what to do, so the operator does not fix one only to meet
// the next.
func NewPlan(from, to Version, available []Version) (Plan, error) {
	p := Plan{From: from, To: to}
	for _, v := range []Version{from, to} {
		if err := Supported(v); err != nil {
			return p, fmt.Errorf("%w: %w", ErrRefused, err)
		}
	}
	var r refusal
	switch {
	case from == to:
	case SameMinor(from, to):
		p.Steps = []Step{{from, to, Patch}}
	case Compare(to, from) < 0:
		switch {
		case to.Minor != from.Minor-1:
			r.path = append(r.path, fmt.Sprintf("%s → %s goes down %d minors; etcd downgrades one minor at a time: run 'etcdadm upgrade --to 3.%d.x' first, then to %s", from, to, from.Minor-to.Minor, from.Minor-1, to))
		case from.Minor < 6:
			r.path = append(r.path, fmt.Sprintf("etcd %s has no downgrade API (it came with 3.6)", from))
		default:
			p.Steps = []Step{{from, to, MinorDown}}
		}
	default:
		p.Steps = upSteps(from, to, available, &r)
	}
	if !slices.Contains(available, to) {
		r.releases = append(r.releases, fmt.Sprintf("etcd %s is not available to the hosts (no release in the store, not baked on every host); run 'etcdadm release push %s --from DIR' or 'etcdadm release add %s --url URL --sha256-file FILE'", to, to, to))
	}
	if err := r.err(from, to); err != nil {
		p.Steps = nil
		return p, err
	}
	return p, nil
}

// upSteps is the way up from → to, one minor at a time, through the
// newest available patches. What is missing goes into r, and the walk
// goes on as if it were there, so that r names everything missing.
func upSteps(from, to Version, available []Version, r *refusal) []Step {
	var steps []Step
	cur := from
	for cur.Minor < to.Minor {
		if min, ok := MinimumBeforeNext(cur); ok && Compare(cur, min) < 0 {
			next, ok := newest(available, cur, min)
			if !ok {
				r.gates = append(r.gates, fmt.Sprintf("%s → 3.%d needs every member at %s or later first (older patches can bring back removed members or demote promoted voters); make a 3.%d release ≥ %s available ('etcdadm release push 3.%d.N --from DIR')", cur, cur.Minor+1, min, cur.Minor, min, cur.Minor))
				next = min
			}
			steps = append(steps, Step{cur, next, Patch})
			cur = next
		}
		next := to
		if cur.Minor+1 < to.Minor {
			// An intermediate minor: a patch the step after it may start from.
			atLeast := Version{3, cur.Minor + 1, 0}
			if min, ok := MinimumBeforeNext(atLeast); ok {
				atLeast = min
			}
			var ok bool
			if next, ok = newest(available, atLeast, atLeast); !ok {
				r.path = append(r.path, fmt.Sprintf("%s → %s skips minor 3.%d, and etcd moves one minor at a time (3.%d data under 3.%d panics): the rollout goes through 3.%d, and the hosts can get no 3.%d release ≥ %s; make one available ('etcdadm release push 3.%d.N --from DIR')", from, to, cur.Minor+1, cur.Minor, cur.Minor+2, cur.Minor+1, cur.Minor+1, atLeast, cur.Minor+1))
				next = atLeast
			}
		}
		steps = append(steps, Step{cur, next, MinorUp})
		cur = next
	}
	if cur != to {
		steps = append(steps, Step{cur, to, Patch})
	}
	return steps
}

// refusal collects why a plan is refused, by kind, in the order to fix
// them.
type refusal struct{ path, gates, releases []string }

func (r refusal) err(from, to Version) error {
	reasons := slices.Concat(r.path, r.gates, r.releases)
	switch len(reasons) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s", ErrRefused, reasons[0])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s → %s, for %d reasons, to fix in this order:", from, to, len(reasons))
	for i, s := range reasons {
		fmt.Fprintf(&b, " (%d) %s;", i+1, s)
	}
	return fmt.Errorf("%w: %s", ErrRefused, strings.TrimSuffix(b.String(), ";"))
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
