package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/envfile"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// RecoverKey holds the request to rebuild a cluster that lost its
// majority from one surviving member.
const RecoverKey = "etcdadm/recover.json"

// recoverMarker in a data directory names the recovery it was handled for.
const recoverMarker = ".etcdadm-recovered"

// ErrQuorumHolds: recovery from one member is refused while a majority
// answers (it would throw away a working cluster).
var ErrQuorumHolds = errors.New("a majority of the members still answers")

// Recover is the request.
type Recover struct {
	ID     string    `json:"id"`
	Member string    `json:"member"`
	At     time.Time `json:"at"`
	State  State     `json:"state"`
	// Expires: no host acts on a request still running after it (the
	// verdict "majority lost" was taken at At and grows stale).
	Expires time.Time `json:"expires,omitzero"`
	// Begun is when the survivor's host confirmed the majority lost and
	// began: from then on the request cannot be cancelled.
	Begun time.Time `json:"begun,omitzero"`
	// Finished is when the survivor ran alone (State Done), by its host's
	// clock: a member whose data is older belongs to the history before.
	Finished time.Time `json:"finished,omitzero"`
	// Reason says why a host refused the request (State Refused).
	Reason string `json:"reason,omitempty"`
}

// Cancelled: the operator withdrew a recovery before it began.
const Cancelled State = "cancelled"

// DefaultRecoverWithin is how long a recovery request stays actionable.
const DefaultRecoverWithin = time.Hour

// Expired reports whether a running request passed its deadline.
func (r Recover) Expired(now time.Time) bool {
	return r.State == Running && !r.Expires.IsZero() && now.After(r.Expires)
}

// RequestRecover records that the cluster is to be rebuilt from member
// name: q must show the majority lost and name answering. The survivor's
// host acts only within the given time, and only after it confirmed from
// where it stands that there is no leader and no majority answers.
func RequestRecover(ctx context.Context, st store.Store, q Quorum, name string, now time.Time, within time.Duration) (Recover, error) {
	if err := checkRequest(ctx, st, kindRecover, now); err != nil {
		return Recover{}, err
	}
	if !q.Lost {
		return Recover{}, fmt.Errorf("%w (%d of %d, %d needed): nothing to recover; replace or restart the members that are down", ErrQuorumHolds, q.Answering, len(q.Members), q.Need)
	}
	if q.Leader != "" {
		return Recover{}, fmt.Errorf("%w: %s is the leader as an answering member sees it: nothing to recover", ErrQuorumHolds, q.Leader)
	}
	if within <= 0 {
		return Recover{}, fmt.Errorf("recover: --within %v: give the survivor's host a positive time to act in (default %v)", within, DefaultRecoverWithin)
	}
	found := false
	for _, m := range q.Members {
		if m.Name == name {
			if !m.Answering {
				return Recover{}, fmt.Errorf("recover: %s does not answer; its etcd must run (alone) to recover from it: start it, or pick one that answers (%s has the most of the log)", name, q.Best)
			}
			found = true
		}
	}
	if !found {
		names := make([]string, 0, len(q.Members))
		for _, m := range q.Members {
			names = append(names, m.Name)
		}
		return Recover{}, fmt.Errorf("recover: %s is not a voting member; the members are %s (%s has the most of the log)", name, strings.Join(names, ", "), q.Best)
	}
	old, etag, err := loadRecover(ctx, st)
	if err != nil {
		return Recover{}, err
	}
	if old != nil && old.State == Running && !old.Expired(now) {
		return Recover{}, fmt.Errorf("recover: a recovery from %s is already in progress (%s); 'etcdadm recover --cancel' withdraws it if it has not begun", old.Member, old.ID)
	}
	r := Recover{ID: now.UTC().Format("20060102T150405Z"), Member: name, At: now.UTC(), State: Running, Expires: now.Add(within).UTC()}
	if err := putRecover(ctx, st, r, etag); err != nil {
		return r, err
	}
	return r, nil
}

// CancelRecover withdraws a running recovery the survivor has not begun.
// nil, nil when there is none to withdraw.
func CancelRecover(ctx context.Context, st store.Store) (*Recover, error) {
	r, etag, err := loadRecover(ctx, st)
	if err != nil || r == nil || r.State != Running {
		return nil, err
	}
	if !r.Begun.IsZero() {
		return r, fmt.Errorf("recover: %s's host began the recovery at %s: it can no longer be withdrawn; let it finish ('etcdadm status' shows it)", r.Member, r.Begun.Format(time.RFC3339))
	}
	r.State, r.Reason = Cancelled, "withdrawn by 'etcdadm recover --cancel'"
	return r, putRecover(ctx, st, *r, etag)
}

// LoadRecover reads the recovery request; nil when there is none.
func LoadRecover(ctx context.Context, st store.Store) (*Recover, error) {
	r, _, err := loadRecover(ctx, st)
	return r, err
}

func loadRecover(ctx context.Context, st store.Store) (*Recover, string, error) {
	b, info, err := store.GetBytes(ctx, st, RecoverKey, 1<<16)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("recover: %w", err)
	}
	var r Recover
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, "", fmt.Errorf("recover: %s: %w", RecoverKey, err)
	}
	return &r, info.ETag, nil
}

// putRecover writes r if the request is still the one read with etag
// ("" when there was none): two writers never both succeed.
func putRecover(ctx context.Context, st store.Store, r Recover, etag string) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	opts := store.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""}
	if _, err := store.PutBytes(ctx, st, RecoverKey, b, opts); errors.Is(err, store.ErrPrecondition) {
		return fmt.Errorf("recover: %s changed meanwhile (another request, a cancel or a host acting); look again with 'etcdadm status' and retry: %w", RecoverKey, err)
	} else if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	return nil
}

// ActRecover is a host's part of a recovery. The named member's host
// first watches, for several election timeouts, that no member it can
// reach has a leader and no majority answers; if one does it refuses the
// request (status says why). Otherwise it keeps a copy of its data,
// restarts the member alone with etcd's --force-new-cluster, then
// normally: a one-member cluster with all it had (acted is true). Every
// other host refuses the request while its own view shows a leader, and
// otherwise waits for the survivor; once the recovery is done it moves
// data from before the recovery aside (kept) and member join adds it back
// as a new member, one learner at a time. A host that comes back later
// with old data does the same: it never rejoins with it.
func ActRecover(ctx context.Context, cfg member.Config, d member.Deps) (acted bool, err error) {
	r, etag, err := loadRecover(ctx, d.Store)
	if err != nil || r == nil {
		return false, err
	}
	return actRecover(ctx, cfg, d, r, etag)
}

// actRecover is ActRecover on the request r as read (with etag): every
// write of it compares and swaps against that read.
func actRecover(ctx context.Context, cfg member.Config, d member.Deps, r *Recover, etag string) (acted bool, err error) {
	log := d.Log.With("component", "recover")
	dataDir := member.DataDir(cfg)
	marker := filepath.Join(dataDir, recoverMarker)
	if b, _ := os.ReadFile(marker); string(b) == r.ID {
		return false, nil
	}
	switch {
	case r.State == Done && cfg.Name != r.Member:
		return false, leaveOldHistory(ctx, cfg, d, *r, log)
	case r.State != Running:
		return false, nil
	case r.Expired(d.Now()):
		log.Warn("a recovery request expired before it began; ignored ('etcdadm recover' asks again after a fresh look)", "id", r.ID, "member", r.Member, "expired", r.Expires)
		return false, nil
	}
	me := cfg.Name == r.Member
	if r.Begun.IsZero() || !me {
		window := time.Duration(0)
		if me {
			window = confirmWindow(cfg)
			log.Info("confirming from this host that the majority is lost before recovering", "for", window)
		}
		why, err := majorityVisible(ctx, cfg, d, window)
		if err != nil {
			return false, err
		}
		if why != "" {
			r.State, r.Reason = Refused, cfg.Name+": "+why
			log.Error("RECOVERY REFUSED: the majority is not lost as seen from this host; the cluster is left as it is", "id", r.ID, "why", why)
			return false, putRecover(ctx, d.Store, *r, etag)
		}
		if !me {
			log.Info("a recovery is requested; waiting for the survivor's host to run it alone", "member", r.Member, "id", r.ID)
			return false, nil
		}
		r.Begun = d.Now().UTC()
		if err := putRecover(ctx, d.Store, *r, etag); err != nil {
			return false, err
		}
	}
	return true, runSurvivor(ctx, cfg, d, *r, log)
}

// runSurvivor rebuilds the cluster from this host's member: a copy of its
// data kept, a start alone with --force-new-cluster, then normally.
func runSurvivor(ctx context.Context, cfg member.Config, d member.Deps, r Recover, log *slog.Logger) error {
	dataDir := member.DataDir(cfg)
	src := filepath.Join(dataDir, "member")
	aside := filepath.Join(dataDir, "member.before-recover-"+r.ID)
	if err := localetcd.Stop(ctx, d.Service); err != nil {
		return fmt.Errorf("recover: stop etcd: %w", err)
	}
	if _, err := os.Stat(aside); errors.Is(err, os.ErrNotExist) {
		if err := copyTree(src, aside+".partial"); err != nil {
			return fmt.Errorf("recover: keep a copy of %s: %w", src, err)
		}
		if err := os.Rename(aside+".partial", aside); err != nil {
			return fmt.Errorf("recover: %w", err)
		}
	}
	log.Warn("RECOVERING from a lost majority: this member restarts as the only member, keeping its data (a copy is in "+aside+")", "member", cfg.Name)
	if err := member.StartForcedAlone(ctx, cfg, d); err != nil {
		return err
	}
	if err := writeMarker(filepath.Join(dataDir, recoverMarker), r.ID, cfg); err != nil {
		return err
	}
	cur, etag, err := loadRecover(ctx, d.Store)
	if err != nil {
		return err
	}
	if cur == nil || cur.ID != r.ID {
		return fmt.Errorf("recover: %s no longer holds recovery %s; this member runs alone: see 'etcdadm status'", RecoverKey, r.ID)
	}
	cur.State, cur.Finished = Done, d.Now().UTC()
	if err := putRecover(ctx, d.Store, *cur, etag); err != nil {
		return err
	}
	log.Info("recovered: a one-member cluster with all this member had; the other hosts join it through member join")
	return nil
}

// leaveOldHistory moves aside this host's data from before a finished
// recovery (kept): member join then adds the host as a new member. Data
// made after it (a member that joined the recovered cluster) is kept.
func leaveOldHistory(ctx context.Context, cfg member.Config, d member.Deps, r Recover, log *slog.Logger) error {
	dataDir := member.DataDir(cfg)
	marker := filepath.Join(dataDir, recoverMarker)
	// A request from before Finished was recorded goes by its own time:
	// the hosts that joined after it must keep their data.
	since := r.Finished
	if since.IsZero() {
		since = r.At
	}
	if fi, err := os.Stat(filepath.Join(dataDir, "member")); err == nil && fi.ModTime().After(since) {
		return writeMarker(marker, r.ID, cfg)
	}
	if err := localetcd.Stop(ctx, d.Service); err != nil {
		return fmt.Errorf("recover: stop etcd: %w (its data from before the recovery must not serve; stop it by hand: systemctl stop etcd)", err)
	}
	dst, err := localetcd.MoveAside(dataDir, "before-recover-"+r.ID)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if dst != "" {
		log.Warn("the cluster was rebuilt from "+r.Member+": this member's data from before is moved aside (kept); member join adds it back as a new member", "to", dst)
	}
	return writeMarker(marker, r.ID, cfg)
}

// confirmWindow is how long the survivor watches for a leader: five
// election timeouts (etcd's, or the operator's ETCD_ELECTION_TIMEOUT), at
// least five seconds.
func confirmWindow(cfg member.Config) time.Duration {
	et := time.Second
	if vars, err := envfile.Read(cfg.EnvFile); err == nil {
		if ms, err := strconv.Atoi(vars["ETCD_ELECTION_TIMEOUT"]); err == nil && ms > 0 {
			et = time.Duration(ms) * time.Millisecond
		}
	}
	return max(5*et, 5*time.Second)
}

// majorityVisible probes every registered member from this host, again
// and again for window (once when it is 0), and says what shows the
// majority is not lost: a member that reports a leader, or a majority
// that answers. "" when nothing did.
func majorityVisible(ctx context.Context, cfg member.Config, d member.Deps, window time.Duration) (string, error) {
	s, err := member.Open(ctx, cfg, d)
	if err != nil {
		return "", fmt.Errorf("recover: %w", err)
	}
	defer s.Close()
	peers, err := member.Peers(ctx, d.Store)
	if err != nil {
		return "", err
	}
	eps := []string{s.Self().ClientURL}
	for _, p := range peers {
		if p.ClientURL != s.Self().ClientURL {
			eps = append(eps, p.ClientURL)
		}
	}
	dial := func(ep string) (*clientv3.Client, error) { return s.Client([]string{ep}) }
	for deadline := time.Now().Add(window); ; {
		if q, err := ProbeQuorum(ctx, eps, dial); err == nil {
			if q.Leader != "" {
				return fmt.Sprintf("%s is the leader as a member seen from here reports it", q.Leader), nil
			}
			if !q.Lost {
				return fmt.Sprintf("%d of %d members answer from here (%d needed)", q.Answering, len(q.Members), q.Need), nil
			}
		}
		if !time.Now().Before(deadline) {
			return "", nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func writeMarker(path, id string, cfg member.Config) error {
	if err := atomicfile.Write(path, []byte(id), 0o600, cfg.Owner.UID, cfg.Owner.GID); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	return nil
}

// copyTree copies a data directory (regular files and directories).
func copyTree(src, dst string) error {
	os.RemoveAll(dst) // a partial copy of ours from an interrupted run
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, src)
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, fi.Mode().Perm())
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Sync(); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
