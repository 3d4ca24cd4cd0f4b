package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
)

// inFlight is this host's record of a switch it started: written before
// /opt/etcd/current moves, removed once the member is healthy at the new
// version (or back at the old one). A run that finds it finishes the job.
type inFlight struct {
	Previous string    `json:"previous"`
	Next     string    `json:"next"`
	Started  time.Time `json:"started"`
}

// myTurn switches this member to next, under the rollout lock, after
// every gate has passed again.
func (w *switcher) myTurn(ctx context.Context, next, prev etcdversion.Version) (bool, error) {
	release, ok := w.takeHost(ctx, fmt.Sprintf("step to %s", next))
	if !ok {
		return true, nil
	}
	defer release()
	ctx, unlock, err := w.s.RolloutLock(ctx)
	if err != nil {
		return false, err
	}
	defer unlock()
	// Look again under the lock: another switcher may have acted.
	cs, err := observe(ctx, w.s)
	if err != nil {
		return true, nil
	}
	me := cs.member(w.me)
	if me == nil || me.Version != prev.String() {
		return true, nil
	}
	if reason := gate(cs, w.me); reason != "" {
		w.status(fmt.Sprintf("step to %s: waiting: %s", next, reason))
		return true, nil
	}
	if me.Leader && len(cs.Members) > 1 {
		healthy := map[uint64]bool{}
		var voters = cs.raw()
		for _, m := range cs.Members {
			healthy[m.ID] = m.Healthy
		}
		if err := w.s.MoveLeaderOff(ctx, me.raw, voters, healthy); err != nil {
			return false, err
		}
		w.log.Info("moved leadership away before switching the leader (leader last)")
		return true, nil
	}
	rec, etag, err := Load(ctx, w.d.Store)
	if err != nil || rec == nil {
		return true, err
	}
	if rec.Backups[next.String()] == "" {
		w.status(fmt.Sprintf("step to %s: taking a verified backup first", next))
		name, err := w.s.Backup(ctx)
		if err != nil {
			return false, fmt.Errorf("rollout: backup before the step to %s: %w", next, err)
		}
		if rec.Backups == nil {
			rec.Backups = map[string]string{}
		}
		rec.Backups[next.String()] = name
		if _, err := Save(ctx, w.d.Store, *rec, etag, w.d.Now()); err != nil && !errors.Is(err, ErrConflict) {
			return false, err
		}
		return true, nil
	}
	if wait, err := w.downgradeGate(ctx, cs, next); wait || err != nil {
		return wait, err
	}
	if err := w.dir.Ensure(ctx, next, etcdbin.Releases{Store: w.d.Store}); err != nil {
		return false, fmt.Errorf("rollout: %w", err)
	}
	if err := w.writeInFlight(inFlight{Previous: prev.String(), Next: next.String(), Started: w.d.Now().UTC()}); err != nil {
		return false, err
	}
	if etcdversion.NeedsFreshSnapshot(prev, next) {
		w.status(fmt.Sprintf("step to %s: %s takes a raft snapshot at %s first (3.7 cannot replay 3.5-era log entries)", next, w.me, prev))
		if err := w.snapshotFirst(ctx, prev); err != nil {
			return false, fmt.Errorf("rollout: snapshot before %s: %w", next, err)
		}
	}
	w.status(fmt.Sprintf("switching %s: etcd %s → %s", w.me, prev, next))
	return true, w.complete(ctx, prev, next, false)
}

// complete moves this member to next and checks it; on failure it puts
// prev back and stops the rollout.
func (w *switcher) complete(ctx context.Context, prev, next etcdversion.Version, resumed bool) error {
	start := time.Now()
	err := w.run(ctx, next, !resumed)
	if err == nil {
		w.out.Switched = append(w.out.Switched, next.String())
		w.log.Info("switched", "from", prev.String(), "to", next.String(), "took", time.Since(start).Round(time.Millisecond))
		crashpoint.Here(crashpoint.SwitchDone) // switched, the in-flight record not yet cleared
		return w.clearInFlight()
	}
	reason := err.Error()
	if why := w.cannotGoBack(ctx, prev, next); why != "" {
		// etcd refuses to run a binary older than the cluster version: a
		// rollback would take the member down for good. Keep next.
		w.log.Error("NOT rolling back: the member failed at the new version, but the old one cannot run here", "version", next.String(), "err", err, "why", why)
		reason = fmt.Sprintf("%s; kept %s: %s; fix the cause (journalctl -u etcd), then 'systemctl restart etcd' and 'etcdadm upgrade --to %s' finish the rollout", reason, next, why, next)
		return w.stop(ctx, next, reason, fmt.Sprintf("%s failed at %s and stays there: %s", w.me, next, reason))
	}
	w.log.Error("ROLLING BACK: the member did not come up at the new version", "version", next.String(), "err", err)
	w.status(fmt.Sprintf("rolling %s back to %s: %s", w.me, prev, reason))
	if rerr := w.run(ctx, prev, true); rerr != nil {
		reason = fmt.Sprintf("%s, and ALSO failed back at %s: %v; the member is down: see journalctl -u etcd", reason, prev, rerr)
		return w.stop(ctx, next, reason, fmt.Sprintf("%s failed at %s: %s", w.me, next, reason))
	}
	return w.stop(ctx, next, reason, fmt.Sprintf("%s failed at %s and runs %s again: %s", w.me, next, prev, reason))
}

// cannotGoBack says why this member cannot run prev again after failing
// at next, "" when it can: etcd refuses to start a binary whose minor is
// below the cluster version, which moves up once the last member runs the
// new minor. A cluster version no member tells is taken as moved when
// the step raises the minor: keeping the new binary is safe, a refused
// old one is not.
func (w *switcher) cannotGoBack(ctx context.Context, prev, next etcdversion.Version) string {
	if next.MinorString() == prev.MinorString() || etcdversion.Compare(next, prev) < 0 {
		return ""
	}
	cs, err := observe(ctx, w.s)
	cv, perr := etcdversion.Parse(cs.ClusterVersion)
	if err != nil || perr != nil {
		return fmt.Sprintf("no member tells the cluster version, and etcd %s cannot run a cluster already at %s", prev, next.MinorString())
	}
	if etcdversion.Compare(etcdversion.Version{Major: cv.Major, Minor: cv.Minor}, etcdversion.Version{Major: prev.Major, Minor: prev.Minor}) > 0 {
		return fmt.Sprintf("the cluster version is %s already, and etcd refuses to run %s below it", cv.MinorString(), prev)
	}
	return ""
}

// stop ends this member's switch and the rollout: the in-flight record
// goes (no later run repeats the switch), the rollout is marked Failed
// with the member, the version and the reason, and the switcher stops.
func (w *switcher) stop(ctx context.Context, next etcdversion.Version, reason, status string) error {
	if err := w.clearInFlight(); err != nil {
		return err
	}
	rec, etag, err := Load(ctx, w.d.Store)
	if err != nil {
		return err
	}
	if rec != nil {
		rec.State = Failed
		rec.Failed = &Failure{Member: w.me, Version: next.String(), Reason: reason, At: w.d.Now().UTC()}
		if _, err := Save(ctx, w.d.Store, *rec, etag, w.d.Now()); err != nil {
			return err
		}
	}
	w.status("rollout STOPPED: " + status)
	return fmt.Errorf("%w: %s", ErrStopped, status)
}

// run points current at v, rewrites etcd.env for it, (re)starts etcd and
// waits until the member is ready at v. Without restart, a running etcd
// whose settings did not change is left alone (resuming after a crash).
func (w *switcher) run(ctx context.Context, v etcdversion.Version, restart bool) error {
	changed, notes, err := member.RewriteEnv(w.s.Config(), v, map[string]string{snapshotCountVar: ""})
	if err != nil {
		return err
	}
	for _, n := range notes {
		w.log.Warn("etcd setting rewritten for etcd "+v.String(), "change", n)
	}
	if err := localetcd.Use(w.dir, v); err != nil {
		return err
	}
	crashpoint.Here(crashpoint.SwitchBinary)
	if !restart && !changed && !w.runs(ctx, v) {
		// Resuming a switch killed between the binary and the restart:
		// etcd still runs the version before (found by the crash sweep).
		restart = true
	}
	if err := localetcd.Start(ctx, w.d.Service, restart || changed); err != nil {
		w.log.Warn("etcd restart reported a failure; checking the member", "err", err)
	}
	return w.waitReady(ctx, v)
}

// runs reports whether this member answers at version v.
func (w *switcher) runs(ctx context.Context, v etcdversion.Version) bool {
	self := w.s.Self().ClientURL
	cli, err := w.s.Client([]string{self})
	if err != nil {
		return false
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := cli.Status(sctx, self)
	return err == nil && st.Version == v.String()
}

// waitReady: the member answers with version v, has applied what the
// leader has (within a small margin) and serves a linearizable read.
func (w *switcher) waitReady(ctx context.Context, v etcdversion.Version) error {
	self := w.s.Self().ClientURL
	cli, err := w.s.Client([]string{self})
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(w.cfg.HealthTimeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		if r := ready(ctx, w.s, cli, self, v); r == "" {
			return nil
		} else {
			last = r
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.cfg.Poll / 4):
		}
	}
	return fmt.Errorf("not ready at %s within %v: %s", v, w.cfg.HealthTimeout, last)
}

// snapshotCountVar set to 1 makes etcd snapshot after its next applied
// entry (etcd's own upgrade guide uses it to drop legacy v2 data); only
// snapshotFirst sets it, and every other restart removes it.
const snapshotCountVar = "ETCD_SNAPSHOT_COUNT"

// snapshotFirst restarts the member at its current version with a
// snapshot count of 1, writes one entry, and waits until a snapshot file
// newer than the restart is on disk: the log the next version replays
// then starts after the cluster left 3.5.
func (w *switcher) snapshotFirst(ctx context.Context, cur etcdversion.Version) error {
	cfg := w.s.Config()
	if _, _, err := member.RewriteEnv(cfg, cur, map[string]string{snapshotCountVar: "1"}); err != nil {
		return err
	}
	restarted := time.Now()
	if err := localetcd.Start(ctx, w.d.Service, true); err != nil {
		return err
	}
	if err := w.waitReady(ctx, cur); err != nil {
		return err
	}
	snapDir := filepath.Join(cfg.DataDir, "member", "snap")
	deadline := time.Now().Add(w.cfg.HealthTimeout)
	for i := 0; time.Now().Before(deadline); i++ {
		if _, err := w.s.Cli.Put(ctx, "/etcdadm/rollout/"+w.me, fmt.Sprintf("snapshot before %s (%d)", cur, i)); err != nil {
			w.log.Debug("put", "err", err)
		}
		if newerSnap(snapDir, restarted) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.cfg.Poll / 4):
		}
	}
	return fmt.Errorf("no snapshot appeared in %s within %v", snapDir, w.cfg.HealthTimeout)
}

func newerSnap(dir string, t time.Time) bool {
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if fi, err := de.Info(); err == nil && filepath.Ext(de.Name()) == ".snap" && fi.ModTime().After(t) {
			return true
		}
	}
	return false
}

// maxLag is how many entries behind the leader still counts as caught up.
const maxLag = 100

func ready(ctx context.Context, s *member.Session, cli *clientv3.Client, self string, v etcdversion.Version) string {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := cli.Status(sctx, self)
	if err != nil {
		return err.Error()
	}
	if st.Version != v.String() {
		return fmt.Sprintf("runs %s", st.Version)
	}
	if len(st.Errors) > 0 {
		return fmt.Sprintf("reports %v", st.Errors)
	}
	if st.Leader == 0 {
		return "no leader"
	}
	if _, err := cli.Get(sctx, "health"); err != nil {
		return "linearizable read: " + err.Error()
	}
	ms, err := s.MemberList(sctx)
	if err != nil {
		return err.Error()
	}
	for _, m := range ms {
		if m.ID == st.Leader && len(m.ClientURLs) > 0 {
			lst, err := s.Cli.Status(sctx, m.ClientURLs[0])
			if err != nil {
				return "leader: " + err.Error()
			}
			if lst.RaftAppliedIndex > st.RaftAppliedIndex+maxLag {
				return fmt.Sprintf("catching up: applied %d, leader %d", st.RaftAppliedIndex, lst.RaftAppliedIndex)
			}
		}
	}
	return ""
}

// gate returns why this member may not restart now ("" = it may): every
// member healthy and voting, and quorum without this member.
func gate(cs ClusterState, me string) string {
	healthy := 0
	for _, m := range cs.Members {
		if m.Learner {
			return fmt.Sprintf("%s is a learner (a join is in progress)", m.Name)
		}
		if !m.Healthy {
			return fmt.Sprintf("%s is not healthy", m.Name)
		}
		healthy++
	}
	// A restart is no removal: the cluster keeps n voters, one of them down.
	n := len(cs.Members)
	if n > 1 && healthy-1 < member.Quorum(n) {
		return fmt.Sprintf("restarting %s would leave %d of %d members, fewer than a quorum (a 2-member cluster cannot roll without downtime: grow it to 3 with 'etcdadm spec set --members 3' first)", me, healthy-1, n)
	}
	return ""
}

// downgradeGate: a step below the cluster version needs etcd's downgrade
// enabled to that minor and every member's storage version there; a
// downgrade to another target (an aborted one) is cancelled first.
func (w *switcher) downgradeGate(ctx context.Context, cs ClusterState, next etcdversion.Version) (bool, error) {
	target := next.MinorString()
	if cs.DowngradeEnabled && minorOf(cs.DowngradeTarget) != target {
		err := w.s.Retry(ctx, "downgrade cancel", func() error {
			_, err := w.s.Cli.Downgrade(ctx, clientv3.DowngradeCancel, "")
			return err
		})
		w.log.Info("cancelled a downgrade to another version", "was", cs.DowngradeTarget, "err", err)
		return true, err
	}
	cv, err := etcdversion.Parse(cs.ClusterVersion)
	if err != nil {
		w.status(fmt.Sprintf("step to %s: waiting: cluster version %q unknown", next, cs.ClusterVersion))
		return true, nil
	}
	if etcdversion.Compare(etcdversion.Version{Major: next.Major, Minor: next.Minor}, etcdversion.Version{Major: cv.Major, Minor: cv.Minor}) >= 0 && !cs.DowngradeEnabled {
		return false, nil // same minor or up: binaries swap in place
	}
	if !cs.DowngradeEnabled {
		for _, a := range []clientv3.DowngradeAction{clientv3.DowngradeValidate, clientv3.DowngradeEnable} {
			if err := w.s.Retry(ctx, "downgrade", func() error {
				_, err := w.s.Cli.Downgrade(ctx, a, target)
				return err
			}); err != nil {
				return false, fmt.Errorf("rollout: etcd refused the downgrade to %s: %w", target, err)
			}
		}
		w.status(fmt.Sprintf("step to %s: downgrade to %s enabled; waiting for every member's storage version", next, target))
		return true, nil
	}
	for _, m := range cs.Members {
		if m.StorageVersion != "" && minorOf(m.StorageVersion) != target {
			w.status(fmt.Sprintf("step to %s: waiting for %s's storage version (%s) to become %s", next, m.Name, m.StorageVersion, target))
			return true, nil
		}
	}
	return false, nil
}

func minorOf(s string) string {
	if v, err := etcdversion.Parse(s); err == nil {
		return v.MinorString()
	}
	if v, err := etcdversion.Parse(s + ".0"); err == nil {
		return v.MinorString()
	}
	return s
}

func (c ClusterState) raw() []*etcdserverpb.Member {
	var out []*etcdserverpb.Member
	for _, m := range c.Members {
		out = append(out, m.raw)
	}
	return out
}

// takeHost takes this host's etcd lock for a switch or a restart (before
// the cluster-wide rollout lock: every program takes them in that order).
// While another program holds it (member join restoring, say) the
// switcher says so and waits for its next poll.
func (w *switcher) takeHost(ctx context.Context, what string) (release func(), ok bool) {
	lctx, cancel := context.WithTimeout(ctx, max(w.cfg.Poll, time.Second))
	defer cancel()
	release, err := w.host.Acquire(lctx, "etcd-version-switcher: "+what)
	if err != nil {
		w.status(what + ": waiting: " + err.Error())
		return nil, false
	}
	return release, true
}

// resumeHeld is resume under the host lock, waited for as long as ctx
// allows: a switch left half done comes before anything else.
func (w *switcher) resumeHeld(ctx context.Context) error {
	if _, err := os.Stat(w.cfg.StateFile); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	release, err := w.host.Acquire(ctx, "etcd-version-switcher: resume")
	if err != nil {
		return fmt.Errorf("rollout: resume the interrupted switch: %w", err)
	}
	defer release()
	return w.resume(ctx)
}

// resume finishes a switch a crash or power cut interrupted.
func (w *switcher) resume(ctx context.Context) error {
	b, err := os.ReadFile(w.cfg.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	var f inFlight
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("rollout: %s: %w (move it aside after checking etcd runs)", w.cfg.StateFile, err)
	}
	prev, err1 := etcdversion.Parse(f.Previous)
	next, err2 := etcdversion.Parse(f.Next)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("rollout: %s: %w", w.cfg.StateFile, err)
	}
	cur, err := w.dir.Current()
	if err != nil {
		return err
	}
	w.log.Info("resuming an interrupted switch", "previous", f.Previous, "next", f.Next, "current", cur.String())
	if cur != next {
		// Interrupted before the binary moved, or after a rollback.
		if err := w.run(ctx, cur, false); err != nil {
			return err
		}
		return w.clearInFlight()
	}
	return w.complete(ctx, prev, next, true)
}

func (w *switcher) writeInFlight(f inFlight) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(w.cfg.StateFile), 0o700); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	return atomicfile.Write(w.cfg.StateFile, b, 0o600, -1, -1)
}

func (w *switcher) clearInFlight() error {
	if err := os.Remove(w.cfg.StateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("rollout: %w", err)
	}
	return atomicfile.SyncDir(filepath.Dir(w.cfg.StateFile))
}
