package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
)

// Config of one switcher run.
type Config struct {
	Member member.Config
	// Timeout bounds the whole run: waiting for other members' turns and
	// for the cluster version to move.
	Timeout time.Duration
	// HealthTimeout is how long a switched member has to come up healthy
	// and caught up at the new version before it is rolled back.
	HealthTimeout time.Duration
	// Poll is the interval of every wait.
	Poll time.Duration
	// StateFile records a switch in flight (default
	// <root>/var/lib/etcd-version-switcher/switch.json).
	StateFile string
}

func (c *Config) defaults() {
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Minute
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = 2 * time.Minute
	}
	if c.Poll == 0 {
		c.Poll = 2 * time.Second
	}
	root := c.Member.Root
	if root == "" {
		root = "/"
	}
	if c.StateFile == "" {
		c.StateFile = filepath.Join(root, "var/lib/etcd-version-switcher/switch.json")
	}
}

// Deps are the outside world. Status, when set, receives the one-line
// state for systemd's status line (sd_notify STATUS=).
type Deps struct {
	member.Deps
	Status func(string)
}

// Outcome is how a run ended.
type Outcome struct {
	// Idle: no rollout, this member already runs the spec's version.
	Idle bool
	// Done: the rollout completed (this run saw it finish).
	Done bool
	// Switched lists the versions this member moved to.
	Switched []string
	Target   string
	Summary  string
	// Record is the rollout record an idle run read (nil otherwise), so
	// the metrics need not read it again.
	Record *Record
}

type switcher struct {
	cfg  Config
	d    Deps
	s    *member.Session
	dir  etcdbin.Dir
	log  *slog.Logger
	me   string
	out  Outcome
	last string // last status, to log changes only
	// host is this host's etcd lock: held for each switch or restart,
	// and d.Service refuses to act without it.
	host *localetcd.Lock
}

// Run moves this member toward the spec's etcd version, taking its turn
// in the cluster-wide rollout, until the rollout is done, this run's
// timeout passes, or a member fails (ErrStopped).
func Run(ctx context.Context, cfg Config, d Deps) (Outcome, error) {
	cfg.defaults()
	if rec, err := quietlyIdle(ctx, cfg, d); err != nil || rec != nil {
		return Outcome{Idle: rec != nil, Record: rec}, err
	}
	host := localetcd.New(cfg.Member.Root)
	d.Service = host.Guard(d.Service)
	s, err := member.Open(ctx, cfg.Member, d.Deps)
	if err != nil {
		return Outcome{}, err
	}
	defer s.Close()
	w := &switcher{cfg: cfg, d: d, s: s, dir: etcdbin.HostDir(s.Config().Root), log: d.Log.With("component", "version-switcher"), me: s.Self().Name, host: host}
	if err := w.resumeHeld(ctx); err != nil {
		return w.out, err
	}
	// A switch interrupted by a crash is finished above; nothing new
	// starts while the operator holds the automation.
	if p, err := pause.Get(ctx, d.Store); err != nil || p != nil {
		if p != nil {
			w.status("rollout waits: " + p.String())
		}
		return w.out, err
	}
	deadline := time.Now().Add(cfg.Timeout)
	for {
		wait, err := w.step(ctx)
		if err != nil || !wait {
			return w.out, err
		}
		if time.Now().After(deadline) {
			return w.out, fmt.Errorf("rollout: still waiting after %v: %s (the timer runs again)", cfg.Timeout, w.last)
		}
		select {
		case <-ctx.Done():
			return w.out, ctx.Err()
		case <-time.After(cfg.Poll):
		}
	}
}

// quietlyIdle answers the common case from small reads, without
// connecting to etcd or reading the CA and the peer registry: the spec
// names the version this host runs, the last rollout to it is done, no CA
// rotation has work for the members, and no switch is in flight here. A
// timer run then costs three GETs (spec, rollout and rotation records).
// It returns the rollout record when the run is idle, nil otherwise.
func quietlyIdle(ctx context.Context, cfg Config, d Deps) (*Record, error) {
	if _, err := os.Stat(cfg.StateFile); err == nil {
		return nil, nil
	}
	spec, err := clusterspec.LoadSpec(ctx, d.Store)
	if err != nil {
		return nil, err
	}
	cur, err := etcdbin.HostDir(cfg.Member.Root).Current()
	if err != nil || cur.String() != spec.EtcdVersion {
		return nil, nil
	}
	rec, _, err := Load(ctx, d.Store)
	if err != nil || rec == nil || rec.State != Done || rec.Target != spec.EtcdVersion {
		return nil, err
	}
	if rot, _, err := pki.LoadRotation(ctx, d.Store); err != nil || rot.MemberWork() {
		return nil, err
	}
	msg := fmt.Sprintf("rollout %s done: this host runs etcd %s", PathString(rec.Path), cur)
	if d.Status != nil {
		d.Status(msg)
	}
	d.Log.Debug(msg)
	return rec, nil
}

func (w *switcher) status(msg string, args ...any) {
	if msg == w.last {
		return
	}
	w.last = msg
	w.out.Summary = msg
	w.log.Info(msg, args...)
	if w.d.Status != nil {
		w.d.Status(msg)
	}
}

// step observes and takes at most one action; wait says to come back.
func (w *switcher) step(ctx context.Context) (wait bool, err error) {
	cl, err := clusterspec.Load(ctx, w.d.Store)
	if err != nil {
		return false, err
	}
	target, err := etcdversion.Parse(cl.Spec.EtcdVersion)
	if err != nil {
		return false, err
	}
	w.out.Target = target.String()
	cs, err := observe(ctx, w.s)
	if err != nil {
		return true, nil // a leader change or a member restarting: look again
	}
	if handled, wait, err := w.caRotation(ctx, cs); handled {
		return wait, err
	}
	rec, etag, err := Load(ctx, w.d.Store)
	if err != nil {
		return false, err
	}
	if rec != nil && rec.Abort && rec.AbortOf == "" {
		return w.abort(ctx, rec, etag, cs)
	}
	if rec != nil && rec.Active() && rec.AbortOf == target.String() {
		// An abort whose spec write was interrupted: finish it.
		return true, setSpecVersion(ctx, w.d.Store, etcdversion.MustParse(rec.Target))
	}
	if rec == nil || rec.Target != target.String() {
		return w.adopt(ctx, rec, etag, target, cs)
	}
	switch rec.State {
	case Done:
		w.status(fmt.Sprintf("rollout %s done: this member runs etcd %s", PathString(rec.Path), target))
		w.out.Idle = true
		return false, nil
	case Failed:
		f := rec.Failed
		w.status(fmt.Sprintf("rollout to %s STOPPED: %s failed at %s and was rolled back: %s; fix it, then 'etcdadm upgrade --abort' (or declare the target again)", rec.Target, f.Member, f.Version, f.Reason))
		return false, fmt.Errorf("%w: %s failed at %s: %s", ErrStopped, f.Member, f.Version, f.Reason)
	}
	if cs.member(w.me) == nil {
		w.status(fmt.Sprintf("rollout %s: %s is not a member (standby): nothing to switch", PathString(rec.Path), w.me))
		return false, nil
	}
	idx := map[string]int{}
	k := len(rec.Path)
	for _, m := range cs.Members {
		if !m.Healthy {
			w.status(fmt.Sprintf("rollout %s: waiting: member %s is not healthy", PathString(rec.Path), m.Name))
			return true, nil
		}
		i := rec.Index(m.Version)
		if i < 0 {
			return false, fmt.Errorf("rollout: member %s runs etcd %s, which is not on the rollout's path %s: move it by hand to one of those versions, or abort", m.Name, m.Version, PathString(rec.Path))
		}
		idx[m.Name] = i
		k = min(k, i)
	}
	last := len(rec.Path) - 1
	if k == last {
		return w.finish(ctx, rec, etag, target, cs)
	}
	next := etcdversion.MustParse(rec.Path[k+1])
	var pending []MemberState
	for _, m := range cs.Members {
		if idx[m.Name] == k {
			pending = append(pending, m)
		}
	}
	order(pending)
	names := memberNames(pending)
	if idx[w.me] != k {
		w.status(fmt.Sprintf("rollout %s: %s runs %s; waiting for %s", PathString(rec.Path), w.me, rec.Path[idx[w.me]], strings.Join(names, ", ")))
		return true, nil
	}
	if pending[0].Name != w.me {
		w.status(fmt.Sprintf("rollout %s: step to %s: %s goes first (order %s)", PathString(rec.Path), next, pending[0].Name, strings.Join(names, ", ")))
		return true, nil
	}
	return w.myTurn(ctx, next, etcdversion.MustParse(rec.Path[k]))
}

// order sorts the members to restart: non-leaders by name, the leader last.
func order(pending []MemberState) {
	slices.SortStableFunc(pending, func(a, b MemberState) int {
		if a.Leader != b.Leader {
			if a.Leader {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// adopt records a plan for a spec changed without one (etcd-manager's
// spec, 'spec set' from an older etcdadm, a crash between the two
// writes): the same checks as etcdadm upgrade.
func (w *switcher) adopt(ctx context.Context, rec *Record, etag string, target etcdversion.Version, cs ClusterState) (bool, error) {
	var vs []etcdversion.Version
	for _, m := range cs.Members {
		v, err := etcdversion.Parse(m.Version)
		if err != nil {
			w.status(fmt.Sprintf("etcd %s declared: waiting: member %s does not answer", target, m.Name))
			return true, nil
		}
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return true, nil
	}
	from := slices.MinFunc(vs, etcdversion.Compare)
	if rec != nil && rec.Active() {
		return false, fmt.Errorf("rollout: the spec says etcd %s but the rollout in flight goes to %s (%s): run 'etcdadm upgrade --abort', or set the spec back", target, rec.Target, rec.State)
	}
	avail, err := Available(ctx, w.d.Store)
	if err != nil {
		return false, err
	}
	p, err := etcdversion.NewPlan(from, target, avail)
	if err != nil {
		w.status(fmt.Sprintf("spec asks etcd %s: REFUSED: %v", target, err))
		return false, err
	}
	if _, err := Save(ctx, w.d.Store, NewRecord(p, w.d.Now()), etag, w.d.Now()); err != nil && !errors.Is(err, ErrConflict) {
		return false, err
	}
	w.log.Info("recorded the rollout plan", "path", p.Path())
	return true, nil
}

// finish waits for the cluster version (and a downgrade's end), then
// marks the rollout done.
func (w *switcher) finish(ctx context.Context, rec *Record, etag string, target etcdversion.Version, cs ClusterState) (bool, error) {
	if cs.ClusterMinor() != target.MinorString() || cs.DowngradeEnabled {
		w.status(fmt.Sprintf("rollout %s: every member runs %s; waiting for the cluster version (%s) to become %s", PathString(rec.Path), target, cs.ClusterVersion, target.MinorString()))
		return true, nil
	}
	for _, m := range cs.Members { // 3.5 members report no storage version
		if m.StorageVersion != "" && minorOf(m.StorageVersion) != target.MinorString() {
			w.status(fmt.Sprintf("rollout %s: cluster version %s; waiting for %s's storage version (%s) to follow", PathString(rec.Path), cs.ClusterVersion, m.Name, m.StorageVersion))
			return true, nil
		}
	}
	rec.State = Done
	rec.Note = fmt.Sprintf("done: cluster version %s", cs.ClusterVersion)
	if _, err := Save(ctx, w.d.Store, *rec, etag, w.d.Now()); err != nil && !errors.Is(err, ErrConflict) {
		return false, err
	}
	w.out.Done = true
	w.status(fmt.Sprintf("rollout %s done: every member runs %s, cluster version %s", PathString(rec.Path), target, cs.ClusterVersion))
	return false, nil
}

// abort turns an abort request into the return trip of the step in flight.
func (w *switcher) abort(ctx context.Context, rec *Record, etag string, cs ClusterState) (bool, error) {
	k := len(rec.Path)
	for _, m := range cs.Members {
		if i := rec.Index(m.Version); i >= 0 {
			k = min(k, i)
		} else if m.Version == "" {
			w.status(fmt.Sprintf("abort: waiting: member %s does not answer", m.Name))
			return true, nil
		}
	}
	if k >= len(rec.Path)-1 {
		// Every member already runs the target: the step before it is the
		// one in flight, unless the cluster version moved on.
		k = len(rec.Path) - 2
		if from := etcdversion.MustParse(rec.Path[k]); cs.ClusterMinor() != from.MinorString() {
			rec.Abort = false
			rec.Note = fmt.Sprintf("abort came too late: the cluster version is %s; go back with 'etcdadm upgrade --to %s' (a downgrade)", cs.ClusterVersion, from)
			_, err := Save(ctx, w.d.Store, *rec, etag, w.d.Now())
			return true, err
		}
	}
	back := Record{
		Target: rec.Path[k], Path: []string{rec.Path[k+1], rec.Path[k]}, State: Running, Abort: true, AbortOf: rec.Target,
		Started: w.d.Now().UTC(), Note: fmt.Sprintf("aborting the rollout to %s: members return to %s", rec.Target, rec.Path[k]),
	}
	if cs.DowngradeEnabled {
		if err := w.s.Retry(ctx, "downgrade cancel", func() error {
			_, err := w.s.Cli.Downgrade(ctx, clientv3.DowngradeCancel, "")
			return err
		}); err != nil {
			return false, fmt.Errorf("rollout: abort: downgrade cancel: %w", err)
		}
		w.log.Info("cancelled the downgrade")
	}
	if _, err := Save(ctx, w.d.Store, back, etag, w.d.Now()); err != nil {
		if errors.Is(err, ErrConflict) {
			return true, nil
		}
		return false, err
	}
	if err := setSpecVersion(ctx, w.d.Store, etcdversion.MustParse(back.Target)); err != nil {
		return false, err
	}
	w.status(back.Note)
	return true, nil
}
