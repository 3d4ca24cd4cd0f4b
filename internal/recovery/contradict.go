package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// ErrContradicts: the request contradicts what the store says is pending
// or in force (a pause, a teardown, a recovery, a restore); nothing was
// written. The error says why and which command clears it.
var ErrContradicts = errors.New("refused")

// Request kinds checkRequest knows.
const (
	kindRestore  = "restore"
	kindRecover  = "recovery"
	kindTeardown = "teardown"
)

// checkRequest refuses a request of kind that the hosts would not carry
// out, or would carry out against another one pending: member join acts
// on nothing while the automation is paused, on a teardown before
// anything else, on a recovery before a restore. One read of each
// control object, before anything is written.
func checkRequest(ctx context.Context, st store.Store, kind string, now time.Time) error {
	p, err := pause.Get(ctx, st)
	if err != nil {
		return err
	}
	if p != nil {
		return fmt.Errorf("%w: the automation is %s: no host acts on a %s while it is paused; run 'etcdadm resume' first, then ask again", ErrContradicts, p, kind)
	}
	t, err := TornDown(ctx, st)
	if err != nil {
		return err
	}
	if t != nil && kind != kindTeardown {
		return fmt.Errorf("%w: %s was torn down at %s: no host runs etcd on it, so none would carry out a %s; 'etcdadm seed --force ...' declares a new cluster on it first", ErrContradicts, st, t.At.UTC().Format(time.RFC3339), kind)
	}
	if kind == kindRestore {
		r, err := LoadRecover(ctx, st)
		if err != nil {
			return err
		}
		if r != nil && r.State == Running && !r.Expired(now) {
			return fmt.Errorf("%w: a recovery from member %s is in progress (%s, asked for at %s), and the hosts act on it before any restore; let it finish ('etcdadm status --store URL' shows it), then restore", ErrContradicts, r.Member, r.ID, r.At.UTC().Format(time.RFC3339))
		}
	}
	if kind == kindRecover {
		pend, err := FindPending(ctx, st)
		if err != nil {
			return err
		}
		if pend != nil {
			return fmt.Errorf("%w: a restore of backup %s is pending (%s): the cluster is to be rebuilt from it; 'etcdadm restore --cancel' withdraws it if no host has begun", ErrContradicts, pend.Command.Backup, pend.ID)
		}
	}
	return nil
}

// ErrBegun: a restore cannot be withdrawn once a host has acted on it.
var ErrBegun = errors.New("the hosts have begun the restore")

// Cancel withdraws the pending restore command before any host acts on
// it (a host records the restore before it stops etcd): it deletes the
// command, then looks again, and puts the command back when a host began
// in between. A command the hosts refused (its backup is gone) is
// withdrawn too. nil, nil when no restore is pending.
func Cancel(ctx context.Context, st store.Store) (*Pending, error) {
	p, err := FindPending(ctx, st)
	if err != nil || p == nil {
		return nil, err
	}
	begun := func() (*Record, error) {
		r, _, err := Load(ctx, st, p.ID)
		if err != nil || r == nil || r.State == Refused {
			return nil, err
		}
		return r, nil
	}
	if r, err := begun(); err != nil {
		return nil, err
	} else if r != nil {
		return p, fmt.Errorf("%w (%s, backup %s, state %s since %s): it must finish, or the members would hold different data; 'etcdadm status --store URL' shows it", ErrBegun, p.ID, p.Command.Backup, r.State, r.Started.UTC().Format(time.RFC3339))
	}
	b, _, err := store.GetBytes(ctx, st, p.Key, 1<<16)
	if err != nil {
		return nil, fmt.Errorf("recovery: %w", err)
	}
	if err := st.Delete(ctx, p.Key); err != nil {
		return nil, fmt.Errorf("recovery: delete %s: %w", p.Key, err)
	}
	if r, err := begun(); err != nil || r != nil {
		if _, perr := store.PutBytes(ctx, st, p.Key, b, store.PutOptions{IfNoneMatch: true}); perr != nil && !errors.Is(perr, store.ErrPrecondition) {
			return p, fmt.Errorf("recovery: a host began the restore while it was withdrawn, and %s could not be put back (%w): put it back, or every member will not be restored", p.Key, perr)
		}
		if err == nil {
			err = fmt.Errorf("%w (%s): it must finish", ErrBegun, p.ID)
		}
		return p, err
	}
	return p, nil
}
