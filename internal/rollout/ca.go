package rollout

import (
	"context"
	"fmt"
	"strings"

	"github.com/etcdadm/etcdadm-immutable/internal/pki"
)

// caRotation does this member's part of a CA rotation (pki.Rotation)
// with the rollout's machinery: one member at a time under the rollout
// lock, the same gates, the leader last, the same readiness check. handled
// says the rotation took this run (version steps wait for it).
func (w *switcher) caRotation(ctx context.Context, cs ClusterState) (handled, wait bool, err error) {
	rec, _, err := pki.LoadRotation(ctx, w.d.Store)
	if err != nil || !rec.MemberWork() || cs.member(w.me) == nil {
		return false, false, err
	}
	var pending []MemberState
	var names []string
	for _, m := range cs.Members {
		names = append(names, m.Name)
		if !rec.DidPart(m.Name) {
			pending = append(pending, m)
		}
	}
	if rec.DidPart(w.me) {
		// Done here; the last member's run moves the rotation on, but a
		// member that left meanwhile must not hold it up.
		if len(pending) == 0 {
			_, err := pki.DidPart(ctx, w.d.Store, rec.Phase, w.me, names, w.d.Now())
			return true, true, err
		}
		w.status(fmt.Sprintf("%s: waiting for %s", rec, strings.Join(memberNames(pending), ", ")))
		return true, true, nil
	}
	if rec.Phase == pki.PhaseReissue {
		// New certificates are served on the next connection: no restart.
		issued, err := w.s.RefreshCerts(ctx, true)
		if err != nil {
			return true, false, fmt.Errorf("rollout: CA rotation: %w", err)
		}
		w.log.Info("CA rotation: reissued this member's certificates from the new CA", "files", issued)
		_, err = pki.DidPart(ctx, w.d.Store, rec.Phase, w.me, names, w.d.Now())
		return true, true, err
	}
	order(pending)
	if pending[0].Name != w.me {
		w.status(fmt.Sprintf("%s: %s restarts first (order %s)", rec, pending[0].Name, strings.Join(memberNames(pending), ", ")))
		return true, true, nil
	}
	return true, true, w.restartForTrust(ctx, rec.Phase)
}

// restartForTrust restarts this member so that etcd loads the bundle the
// phase wrote (etcd reads its trusted CAs only at start).
func (w *switcher) restartForTrust(ctx context.Context, phase pki.Phase) error {
	release, ok := w.takeHost(ctx, fmt.Sprintf("CA rotation (%s) restart", phase))
	if !ok {
		return nil
	}
	defer release()
	ctx, unlock, err := w.s.RolloutLock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	cs, err := observe(ctx, w.s)
	if err != nil {
		return nil
	}
	rec, _, err := pki.LoadRotation(ctx, w.d.Store)
	if err != nil || rec == nil || rec.Phase != phase || rec.DidPart(w.me) {
		return err
	}
	me := cs.member(w.me)
	if me == nil {
		return nil
	}
	if reason := gate(cs, w.me); reason != "" {
		w.status(fmt.Sprintf("%s: waiting: %s", rec, reason))
		return nil
	}
	if me.Leader && len(cs.Members) > 1 {
		healthy := map[uint64]bool{}
		for _, m := range cs.Members {
			healthy[m.ID] = m.Healthy
		}
		if err := w.s.MoveLeaderOff(ctx, me.raw, cs.raw(), healthy); err != nil {
			return err
		}
		w.log.Info("moved leadership away before restarting the leader (leader last)")
		return nil
	}
	if _, err := w.s.RefreshCerts(ctx, false); err != nil {
		return fmt.Errorf("rollout: CA rotation: %w", err)
	}
	cur, err := w.dir.Current()
	if err != nil {
		return fmt.Errorf("rollout: CA rotation: %w", err)
	}
	w.status(fmt.Sprintf("CA rotation (%s): restarting %s to load the new trust bundle", phase, w.me))
	if err := w.run(ctx, cur, true); err != nil {
		return fmt.Errorf("rollout: CA rotation (%s): %s did not come back after its restart: %w (see journalctl -u etcd; the next run tries again)", phase, w.me, err)
	}
	names := make([]string, 0, len(cs.Members))
	for _, m := range cs.Members {
		names = append(names, m.Name)
	}
	next, err := pki.DidPart(ctx, w.d.Store, phase, w.me, names, w.d.Now())
	if err != nil {
		return err
	}
	if next != nil {
		w.status(next.String())
	}
	return nil
}

func memberNames(ms []MemberState) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}
