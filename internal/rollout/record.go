// Package rollout moves a cluster's members from one etcd version to
// another, one member at a time: the plan and its progress in the store
// (etcdadm/rollout.json), the checks that refuse an unsupported target
// (etcdadm upgrade, spec set), and the switcher each host runs
// (etcd-version-switcher): take the cluster-wide rollout lock, check every
// gate, back up, swap the binary, restart etcd over D-Bus, wait until the
// member is healthy and caught up at the new version, and roll it back
// when it is not. Imported by cmd/etcd-version-switcher and internal/adm.
package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// RecordKey is where the rollout lives in the store.
const RecordKey = backup.RolloutKey

// State of a rollout.
type State string

// States.
const (
	Running State = "running"
	Done    State = "done"
	// Failed: a member did not come up at the new version and was rolled
	// back; nothing moves until the operator acts (upgrade --abort, or a
	// new target).
	Failed State = "failed"
)

// Errors.
var (
	ErrRunning  = errors.New("a rollout is running")
	ErrStopped  = errors.New("the rollout stopped")
	ErrConflict = errors.New("the rollout record changed meanwhile; run the command again")
)

// Failure says which member failed where, and why.
type Failure struct {
	Member  string    `json:"member"`
	Version string    `json:"version"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// Record is the plan and its progress. Which members are done is not
// stored: it is what they run, read from etcd.
type Record struct {
	Target string `json:"target"`
	// Path is every version the cluster passes through, from first.
	Path  []string           `json:"path"`
	Steps []etcdversion.Step `json:"steps"`
	State State              `json:"state"`
	// Abort: the operator asked to return the step in flight to the
	// version it started from (etcdadm upgrade --abort); a switcher turns
	// the record into that return trip.
	Abort bool `json:"abort,omitempty"`
	// AbortOf names the target of the rollout this one aborted.
	AbortOf string    `json:"abortOf,omitempty"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	// Backups: the verified backup taken before each step, by the
	// step's target version.
	Backups map[string]string `json:"backups,omitempty"`
	Failed  *Failure          `json:"failed,omitempty"`
	// Note is the last thing a switcher reported (for etcdadm status).
	Note string `json:"note,omitempty"`
}

// NewRecord records a plan.
func NewRecord(p etcdversion.Plan, now time.Time) Record {
	r := Record{Target: p.To.String(), Path: []string{p.From.String()}, Steps: p.Steps, State: Running, Started: now.UTC(), Updated: now.UTC()}
	for _, s := range p.Steps {
		r.Path = append(r.Path, s.To.String())
	}
	if len(p.Steps) == 0 {
		r.State = Done
	}
	return r
}

// Index is v's position on the path, -1 if absent.
func (r Record) Index(v string) int { return slices.Index(r.Path, v) }

// Active reports a rollout that is not finished (running or failed).
func (r Record) Active() bool { return r.State == Running || r.State == Failed }

// Load reads the record; nil when there is none.
func Load(ctx context.Context, st store.Store) (*Record, string, error) {
	b, info, err := store.GetBytes(ctx, st, RecordKey, 1<<20)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("rollout: %w", err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, "", fmt.Errorf("rollout: %s: %w (move it aside to plan again)", RecordKey, err)
	}
	return &r, info.ETag, nil
}

// Save writes the record if it is still the one read (etag; "" = there
// was none).
func Save(ctx context.Context, st store.Store, r Record, etag string, now time.Time) (string, error) {
	r.Updated = now.UTC()
	tag, err := store.PutJSON(ctx, st, RecordKey, r, store.Since(etag))
	if errors.Is(err, store.ErrPrecondition) {
		return "", fmt.Errorf("rollout: %w", ErrConflict)
	}
	if err != nil {
		return "", fmt.Errorf("rollout: write %s: %w", RecordKey, err)
	}
	return tag, nil
}
