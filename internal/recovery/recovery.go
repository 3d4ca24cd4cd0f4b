// Package recovery restores a whole cluster from a backup: the operator's
// request (etcdadm restore writes etcd-manager's restore command, so either
// tool's command is acted on by the other) and each host's part of it
// (run by etcd-member-join before it decides anything else): stop etcd,
// move the data aside, restore the backup with the cluster's membership, a
// new cluster token and a revision bump, start, and, once every member is
// back, retire the command. Imported by cmd/etcd-member-join and
// internal/adm.
package recovery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// recordPrefix keeps our record of each restore (kept when done).
const recordPrefix = "etcdadm/restores/"

// RevisionBump is added to the restored revision, which is marked
// compacted: clients that watched the old cluster re-list instead of
// seeing revisions go back (etcd's disaster-recovery guide uses 1e9).
const RevisionBump = 1_000_000_000

// Errors.
var (
	ErrPending = errors.New("a restore is already requested")
	ErrTooNew  = errors.New("the backup is from a newer etcd than the cluster runs")
)

// State of a restore.
type State string

// States.
const (
	Running State = "running"
	Done    State = "done"
	// Refused: the command cannot be carried out (its backup is missing
	// or corrupt); nothing was stopped. Delete the command.
	Refused State = "refused"
)

// Record is our account of one restore command.
type Record struct {
	Command string        `json:"command"`
	Backup  string        `json:"backup"`
	Token   string        `json:"token"`
	Members []member.Peer `json:"members"`
	// Restored: the members whose data is restored and etcd started.
	Restored map[string]time.Time `json:"restored,omitempty"`
	State    State                `json:"state"`
	Reason   string               `json:"reason,omitempty"`
	Started  time.Time            `json:"started"`
	Updated  time.Time            `json:"updated"`
}

// Pending is a restore command waiting in control/.
type Pending backup.Command

// FindPending returns the oldest restore command in control/, or nil.
func FindPending(ctx context.Context, st store.Store) (*Pending, error) {
	cmds, err := backup.Commands(ctx, st)
	if err != nil || len(cmds) == 0 {
		return nil, err
	}
	p := Pending(cmds[0])
	return &p, nil
}

// Request checks a backup and writes the restore command for it. The
// backup is verified first (sha256 and the snapshot's own hash); one that
// is missing, corrupt, or from a newer etcd minor than the cluster runs
// is refused, and nothing is written.
func Request(ctx context.Context, st store.Store, name string, now time.Time) (Pending, backup.Report, error) {
	if err := checkRequest(ctx, st, kindRestore, now); err != nil {
		return Pending{}, backup.Report{}, err
	}
	cl, err := clusterspec.Load(ctx, st)
	if err != nil {
		return Pending{}, backup.Report{}, err
	}
	if p, err := FindPending(ctx, st); err != nil || p != nil {
		if p != nil {
			err = fmt.Errorf("%w (%s, backup %s): wait for it, or withdraw it with 'etcdadm restore --cancel' if no host has begun", ErrPending, p.ID, p.Command.Backup)
		}
		return Pending{}, backup.Report{}, err
	}
	rep, err := backup.Verify(ctx, st, name, "")
	if err != nil {
		return Pending{}, rep, err
	}
	bv, err1 := etcdversion.Parse(rep.Backup.Meta.EtcdVersion)
	cv, err2 := etcdversion.Parse(cl.Spec.EtcdVersion)
	if err := errors.Join(err1, err2); err != nil {
		return Pending{}, rep, fmt.Errorf("recovery: %w", err)
	}
	if bv.Minor > cv.Minor || bv.Major != cv.Major {
		return Pending{}, rep, fmt.Errorf("%w: backup %s is from etcd %s, the cluster runs %s; upgrade first ('etcdadm upgrade --to %s.x'), then restore", ErrTooNew, rep.Backup.Name, bv, cv, bv.MinorString())
	}
	c := etcdmanager.RestoreCommand{Timestamp: now.UnixNano(), ClusterSpec: cl.Spec, Backup: rep.Backup.Name}
	b, err := etcdmanager.MarshalRestoreCommand(c)
	if err != nil {
		return Pending{}, rep, err
	}
	key := etcdmanager.CommandKey(now)
	if err := takeRequestSlot(ctx, st, etcdmanager.CommandID(key), now); err != nil {
		return Pending{}, rep, err
	}
	if _, err := store.PutBytes(ctx, st, key, b, store.PutOptions{IfNoneMatch: true}); err != nil {
		return Pending{}, rep, fmt.Errorf("recovery: write %s: %w", key, err)
	}
	return Pending{Key: key, ID: etcdmanager.CommandID(key), Command: c}, rep, nil
}

// requestSlotKey names the restore command requested last. Commands live
// under their own timestamped keys (etcd-manager's layout), so two
// requesters would both write one; each first swaps this one object from
// the command it names (no longer pending) to its own, and only one swap
// of the same version succeeds.
const requestSlotKey = "etcdadm/restore-request.json"

func takeRequestSlot(ctx context.Context, st store.Store, id string, now time.Time) error {
	var cur struct {
		ID string    `json:"id"`
		At time.Time `json:"at"`
	}
	etag, err := store.GetJSON(ctx, st, requestSlotKey, &cur)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("recovery: %w", err)
	}
	if err == nil {
		p, err := FindPending(ctx, st)
		if err != nil {
			return err
		}
		if p != nil {
			return fmt.Errorf("%w (%s, backup %s): wait for it, or withdraw it with 'etcdadm restore --cancel' if no host has begun", ErrPending, p.ID, p.Command.Backup)
		}
		// Named but not written yet: another requester is between the
		// two writes (or crashed there, which a minute settles).
		_, serr := st.Stat(ctx, etcdmanager.ControlPrefix+cur.ID+"/"+etcdmanager.CommandFile)
		if errors.Is(serr, store.ErrNotFound) && now.Sub(cur.At) < time.Minute {
			return fmt.Errorf("%w: another restore (%s) is being requested right now; 'etcdadm status' shows it in a moment", ErrPending, cur.ID)
		}
	}
	b, err := json.Marshal(map[string]any{"id": id, "at": now.UTC()})
	if err != nil {
		return err
	}
	if _, err := store.PutBytes(ctx, st, requestSlotKey, b, store.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""}); errors.Is(err, store.ErrPrecondition) {
		return fmt.Errorf("%w: another restore was requested at the same moment; 'etcdadm status' shows it", ErrPending)
	} else if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	return nil
}

// Load reads our record of a command; nil when there is none yet.
func Load(ctx context.Context, st store.Store, id string) (*Record, string, error) {
	var r Record
	etag, err := store.GetJSON(ctx, st, recordPrefix+id+".json", &r)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("recovery: %w", err)
	}
	return &r, etag, nil
}

// Latest returns the newest record (for etcdadm status), nil if none.
func Latest(ctx context.Context, st store.Store) (*Record, error) {
	es, err := st.List(ctx, recordPrefix)
	if err != nil {
		return nil, fmt.Errorf("recovery: %w", err)
	}
	var names []string
	for _, e := range es {
		if !e.Dir {
			names = append(names, e.Name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	id := names[len(names)-1]
	r, _, err := Load(ctx, st, id[:len(id)-len(".json")])
	return r, err
}

func save(ctx context.Context, st store.Store, r Record, etag string, now time.Time) (string, error) {
	r.Updated = now.UTC()
	tag, err := store.PutJSON(ctx, st, recordPrefix+r.Command+".json", r, store.Since(etag))
	if err != nil {
		return "", fmt.Errorf("recovery: record %s: %w", r.Command, err)
	}
	return tag, nil
}

func newToken(name string) (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return name + "-restored-" + hex.EncodeToString(b[:]), nil
}
