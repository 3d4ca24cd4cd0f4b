package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Available lists the versions the hosts can get: a release in the
// store, or baked (or installed) on every registered host.
func Available(ctx context.Context, st store.Store) ([]etcdversion.Version, error) {
	out, err := etcdbin.Releases{Store: st}.List(ctx)
	if err != nil {
		return nil, err
	}
	peers, err := member.Peers(ctx, st)
	if err != nil {
		return nil, err
	}
	var common []string
	for i, p := range peers {
		if i == 0 {
			common = slices.Clone(p.Versions)
			continue
		}
		common = slices.DeleteFunc(common, func(v string) bool { return !slices.Contains(p.Versions, v) })
	}
	for _, s := range common {
		if v, err := etcdversion.Parse(s); err == nil && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, etcdversion.Compare)
	return out, nil
}

// Declared is what Declare decided.
type Declared struct {
	Plan etcdversion.Plan
	// Unchanged: the target was already declared (nothing written).
	Unchanged bool
}

// Declare plans the cluster's move from its declared version to `to`
// and, unless dryRun, records the plan and then the spec's new
// etcdVersion. Refused, with nothing written: an unsupported or
// unavailable version, a skipped minor, a minor step from below its
// minimum patch, a downgrade of more than one minor, and a new target
// while another rollout is unfinished.
func Declare(ctx context.Context, st store.Store, to etcdversion.Version, dryRun bool, now time.Time) (Declared, error) {
	cl, err := clusterspec.Load(ctx, st)
	if err != nil {
		return Declared{}, err
	}
	from, err := etcdversion.Parse(cl.Spec.EtcdVersion)
	if err != nil {
		return Declared{}, err
	}
	rec, etag, err := Load(ctx, st)
	if err != nil {
		return Declared{}, err
	}
	if rec != nil && rec.Active() {
		if rec.Target == to.String() && !rec.Abort {
			if from != to && !dryRun {
				// The plan was recorded, the spec not (an interrupted run).
				if _, _, err := clusterspec.SetSpec(ctx, st, 0, to.String()); err != nil {
					return Declared{}, fmt.Errorf("rollout: %s: %w", etcdmanager.ClusterSpecKey, err)
				}
			}
			p := etcdversion.Plan{From: etcdversion.MustParse(rec.Path[0]), To: to, Steps: rec.Steps}
			return Declared{Plan: p, Unchanged: true}, nil
		}
		if rec.Abort {
			return Declared{}, fmt.Errorf("%w (%s, %s): its abort is under way; wait until the switchers have put the members back ('etcdadm status' shows it), then declare the new target", ErrRunning, PathString(rec.Path), rec.State)
		}
		return Declared{}, fmt.Errorf("%w (%s, %s): wait for it to finish, or run 'etcdadm upgrade --abort' first", ErrRunning, PathString(rec.Path), rec.State)
	}
	if from == to {
		// Nothing to move: whether the hosts could fetch it is moot.
		return Declared{Plan: etcdversion.Plan{From: from, To: to}, Unchanged: true}, nil
	}
	avail, err := Available(ctx, st)
	if err != nil {
		return Declared{}, err
	}
	p, err := etcdversion.NewPlan(from, to, avail)
	if err != nil {
		return Declared{Plan: p}, err
	}
	d := Declared{Plan: p, Unchanged: from == to}
	if dryRun || d.Unchanged {
		return d, nil
	}
	if _, err := Save(ctx, st, NewRecord(p, now), etag, now); err != nil {
		return d, err
	}
	if _, _, err := clusterspec.SetSpec(ctx, st, 0, to.String()); err != nil {
		return d, fmt.Errorf("rollout: the plan is recorded but %s was not written (run the command again): %w", etcdmanager.ClusterSpecKey, err)
	}
	return d, nil
}

// setSpecVersion writes etcdVersion into etcd-manager's spec (etcd-manager
// reads it as where the cluster is going), for a switcher: another
// switcher writing it at the same moment is not an error.
func setSpecVersion(ctx context.Context, st store.Store, v etcdversion.Version) error {
	_, _, err := clusterspec.SetSpec(ctx, st, 0, v.String())
	if errors.Is(err, store.ErrPrecondition) {
		return nil // another switcher wrote it meanwhile: the next look sees it
	}
	if err != nil {
		return fmt.Errorf("rollout: %s: %w", etcdmanager.ClusterSpecKey, err)
	}
	return nil
}

// RequestAbort asks the switchers to return the members of the step in
// flight to the version that step started from (a downgrade in progress
// is cancelled). Steps already complete stay: undoing them is a
// downgrade of its own ('etcdadm upgrade --to').
func RequestAbort(ctx context.Context, st store.Store, now time.Time) (Record, error) {
	rec, etag, err := Load(ctx, st)
	if err != nil {
		return Record{}, err
	}
	if rec == nil || !rec.Active() {
		return Record{}, fmt.Errorf("rollout: no rollout to abort (etcdadm status shows the versions)")
	}
	if rec.Abort {
		return *rec, nil
	}
	rec.Abort = true
	rec.Note = "abort requested"
	if _, err := Save(ctx, st, *rec, etag, now); err != nil {
		return Record{}, err
	}
	return *rec, nil
}

// PathString renders a rollout's path: "3.5.35 → 3.6.16".
func PathString(p []string) string { return strings.Join(p, " → ") }
