package recovery

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Requests are what the operator asked of every host and no host has
// finished: a teardown, a quorum-loss recovery, a restore command. A
// member-join run reads them once, at its start and all at once (one
// round trip to the store rather than one per kind), and decides on that
// one read; a step that writes a request back compares and swaps against
// what was read, so a request changed since fails the write instead of
// being acted on.
type Requests struct {
	Teardown    *Teardown
	Recover     *Recover
	recoverETag string
	Restore     *Pending
}

// ReadRequests reads the requests from the store.
func ReadRequests(ctx context.Context, st store.Store) (Requests, error) {
	var q Requests
	errs := make([]error, 3)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); q.Teardown, errs[0] = TornDown(ctx, st) }()
	go func() { defer wg.Done(); q.Recover, q.recoverETag, errs[1] = loadRecover(ctx, st) }()
	go func() { defer wg.Done(); q.Restore, errs[2] = FindPending(ctx, st) }()
	wg.Wait()
	return q, errors.Join(errs...)
}

// Act does this host's part of the requests, in the order they must
// come: a teardown ends everything; a recovery comes before a restore
// (ActTeardown, ActRecover, Act). done: the run is over, member join
// decides nothing more.
func (q Requests) Act(ctx context.Context, cfg member.Config, d member.Deps, stop StopFunc) (done bool, err error) {
	if q.Teardown != nil {
		return true, actTeardown(ctx, cfg, d, stop, *q.Teardown)
	}
	if q.Recover != nil {
		if acted, err := actRecover(ctx, cfg, d, q.Recover, q.recoverETag); err != nil || acted {
			return acted, err
		}
	}
	if q.Restore != nil {
		return act(ctx, cfg, d, q.Restore)
	}
	return false, nil
}

// Unfinished says which request a host has yet to carry out ("" when
// none): membership must not change under it.
func (q Requests) Unfinished(now time.Time) string {
	switch {
	case q.Teardown != nil:
		return "the cluster was torn down (" + q.Teardown.At.Format(time.RFC3339) + ")"
	case q.Recover != nil && q.Recover.State == Running && !q.Recover.Expired(now):
		return "a quorum-loss recovery from " + q.Recover.Member + " is running (" + q.Recover.ID + ")"
	case q.Restore != nil:
		return "a restore command waits (" + q.Restore.ID + ", backup " + q.Restore.Command.Backup + ")"
	}
	return ""
}
