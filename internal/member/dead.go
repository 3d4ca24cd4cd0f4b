package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/pause"
)

// DefaultReplaceAfter is how long a voting member must stay unreachable
// before a standby host replaces it. It is chosen to be past what takes a
// member away for a while and brings it back: a Flatcar or Fedora CoreOS
// reboot after an OS update (minutes), a version switch's restart
// (seconds), a member join run that rejoins or restores a member (at most
// its 10 min timeout). An operator whose hosts boot slower raises it.
const DefaultReplaceAfter = 10 * time.Minute

// MinReplaceAfter is the shortest grace accepted: shorter, a reboot
// would cost the cluster a member and a full resync.
const MinReplaceAfter = 2 * time.Minute

// UnreachablePrefix holds, in etcd, one key per voting member a standby
// host watches while it is unreachable: since when, and when it becomes
// eligible for replacement ('etcdadm status' shows them).
const UnreachablePrefix = "/etcdadm/unreachable/"

// Unreachable is what a standby host records of a member it watches.
type Unreachable struct {
	Member   string    `json:"member"`
	ID       string    `json:"id"`
	Since    time.Time `json:"since"`
	Eligible time.Time `json:"eligible"`
	By       string    `json:"by"`
}

// CheckReplaceAfter validates the grace before a dead member is replaced
// (0 turns the replacement off).
func CheckReplaceAfter(d time.Duration) error {
	if d != 0 && d < MinReplaceAfter {
		return fmt.Errorf("%v is shorter than the %v a master's reboot can take: a reboot would cost a member; use at least %v, or 0 to never replace a member under a new name", d, MinReplaceAfter, MinReplaceAfter)
	}
	return nil
}

// replaceDead is a standby host's watch over a full cluster: when a voter
// does not answer, the host watches it every probe interval; once it has
// not answered for the whole grace (cfg.ReplaceAfter, counted from this
// host's first look) the host replaces it under the membership lock, if
// nothing holds membership changes (membershipHeld), a removal keeps a quorum of
// healthy members and no other host replaced it first: a backup, the
// dead member removed, this one added as a learner and promoted. ok is
// false when no member was replaced (it came back, or something holds).
func (j *joiner) replaceDead(ctx context.Context, cli *clientv3.Client) (Result, bool, error) {
	if j.cfg.ReplaceAfter == 0 {
		return Result{}, false, nil
	}
	var watched *etcdserverpb.Member
	var since time.Time
	replaced := false
	defer func() {
		// Not replaced after all: status must not go on announcing it.
		if watched != nil && !replaced {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			j.forget(fctx, cli, watched.ID)
		}
	}()
	for {
		ml, err := j.memberList(ctx, cli)
		if err != nil {
			return Result{}, false, fmt.Errorf("member join: member list: %w", err)
		}
		dead := j.unreachableVoter(ctx, ml.Members)
		if watched != nil && (dead == nil || dead.ID != watched.ID) {
			j.log.Info("the member this host watched answers again (or left): nothing replaced", "member", displayName(watched), "unreachable_for", j.d.Now().Sub(since).Round(time.Second).String())
			j.forget(ctx, cli, watched.ID)
			watched = nil
		}
		if dead == nil || len(ml.Members) > int(j.cluster.Spec.MemberCount) || hasLearner(ml.Members) {
			return Result{}, false, nil
		}
		now := j.d.Now()
		if watched == nil {
			watched, since = dead, now
			j.log.Warn("a voting member does not answer: this standby host replaces it if it stays unreachable", "member", displayName(dead), "replace_at", since.Add(j.cfg.ReplaceAfter).UTC().Format(time.RFC3339))
			j.record(ctx, cli, Unreachable{Member: dead.Name, ID: fmt.Sprintf("%x", dead.ID), Since: since.UTC(), Eligible: since.Add(j.cfg.ReplaceAfter).UTC(), By: j.me.Name})
		}
		if now.Sub(since) >= j.cfg.ReplaceAfter {
			res, ok, err := j.replaceLocked(ctx, cli, dead)
			replaced = ok
			return res, ok, err
		}
		wait := min(j.cfg.ReplaceProbe, since.Add(j.cfg.ReplaceAfter).Sub(now))
		select {
		case <-ctx.Done():
			return Result{}, false, fmt.Errorf("member join: watching %s: %w", displayName(dead), ctx.Err())
		case <-time.After(wait):
		}
	}
}

// unreachableVoter is the first voting member (by name) that does not
// answer from this host, or nil.
func (j *joiner) unreachableVoter(ctx context.Context, members []*etcdserverpb.Member) *etcdserverpb.Member {
	var voters []*etcdserverpb.Member
	for _, m := range members {
		if !m.IsLearner {
			voters = append(voters, m)
		}
	}
	slices.SortFunc(voters, func(a, b *etcdserverpb.Member) int { return strings.Compare(displayName(a), displayName(b)) })
	for _, m := range voters {
		if !j.healthy(ctx, m) {
			return m
		}
	}
	return nil
}

func hasLearner(members []*etcdserverpb.Member) bool {
	return slices.ContainsFunc(members, func(m *etcdserverpb.Member) bool { return m.IsLearner })
}

// replaceLocked re-checks everything under the membership lock (another
// standby may have replaced the member, the operator may have paused,
// a rollout may hold its lock) and replaces dead.
func (j *joiner) replaceLocked(ctx context.Context, cli *clientv3.Client, dead *etcdserverpb.Member) (Result, bool, error) {
	ctx, unlock, err := j.lock(ctx, cli)
	if err != nil {
		return Result{}, false, err
	}
	defer unlock()
	if why, err := j.membershipHeld(ctx, cli); err != nil || why != "" {
		if why != "" {
			j.log.Warn("not replacing "+displayName(dead)+": "+why+"; the next run looks again", "member", displayName(dead))
		}
		return Result{}, false, err
	}
	ml, err := j.memberList(ctx, cli)
	if err != nil {
		return Result{}, false, fmt.Errorf("member join: member list: %w", err)
	}
	i := slices.IndexFunc(ml.Members, func(m *etcdserverpb.Member) bool { return m.ID == dead.ID })
	if i < 0 || hasLearner(ml.Members) || j.healthy(ctx, ml.Members[i]) {
		j.log.Info("not replacing "+displayName(dead)+": another host replaced it, or it answers again", "member", displayName(dead))
		return Result{}, false, nil
	}
	err = j.removeStale(ctx, cli, ml.Members, ml.Members[i], fmt.Sprintf("a voting member unreachable for %v; this standby host takes its place", j.cfg.ReplaceAfter))
	if errors.Is(err, ErrUnsafe) {
		j.log.Error("not replacing "+displayName(dead)+"; the next run looks again", "err", err)
		return Result{}, false, nil
	}
	if err != nil {
		return Result{}, false, err
	}
	j.forget(ctx, cli, dead.ID)
	// No learner among them (checked above): the voters left.
	res, err := j.addLearner(ctx, cli, len(ml.Members)-1)
	if err != nil {
		return Result{}, false, err
	}
	res.Action, res.Reason = Replace, fmt.Sprintf("replaced %s, unreachable for %v", displayName(dead), j.cfg.ReplaceAfter)
	return res, true, nil
}

// membershipHeld says why no member may be replaced now ("" when one
// may): a pause, a version switch or CA-rotation restart holding the
// rollout lock (a member restarting looks dead), an operator's request
// (teardown, recovery, restore) not finished.
func (j *joiner) membershipHeld(ctx context.Context, cli *clientv3.Client) (string, error) {
	if p, err := pause.Get(ctx, j.d.Store); err != nil || p != nil {
		if p != nil {
			return p.String(), nil
		}
		return "", err
	}
	if held, err := rolloutLockHeld(ctx, cli); err != nil || held {
		if held {
			return "a version switch or CA-rotation restart holds the rollout lock", nil
		}
		return "", fmt.Errorf("member join: %w", err)
	}
	if j.d.Held != nil {
		return j.d.Held(ctx)
	}
	return "", nil
}

// record and forget keep the watch visible to 'etcdadm status'; failing
// to write them changes nothing else.
func (j *joiner) record(ctx context.Context, cli *clientv3.Client, u Unreachable) {
	b, _ := json.Marshal(u)
	if _, err := cli.Put(ctx, UnreachablePrefix+u.ID, string(b)); err != nil {
		j.log.Warn("could not record the unreachable member in etcd (status will not show it)", "member", u.Member, "err", err)
	}
}

func (j *joiner) forget(ctx context.Context, cli *clientv3.Client, id uint64) {
	if _, err := cli.Delete(ctx, fmt.Sprintf("%s%x", UnreachablePrefix, id)); err != nil {
		j.log.Warn("could not remove the unreachable member's record from etcd", "id", fmt.Sprintf("%x", id), "err", err)
	}
}

// Seen is a voting member as this host sees it, for the reconcile
// timer's metrics: whether it answers, and whether a standby host
// watches it to replace it.
type Seen struct {
	Name    string
	Healthy bool
	Watched bool
}

// Look lists the voting members, probes each, and reads which ones a
// standby host watches.
func Look(ctx context.Context, cfg Config, d Deps) ([]Seen, error) {
	cfg.defaults()
	j, cli, err := connect(ctx, cfg, d)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ml, err := j.memberList(ctx, cli)
	if err != nil {
		return nil, fmt.Errorf("member list: %w", err)
	}
	watched, err := Watched(ctx, cli)
	if err != nil {
		return nil, err
	}
	var out []Seen
	for _, m := range ml.Members {
		if !m.IsLearner {
			_, w := watched[fmt.Sprintf("%x", m.ID)]
			out = append(out, Seen{Name: displayName(m), Healthy: j.healthy(ctx, m), Watched: w})
		}
	}
	return out, nil
}

// KV is the part of an etcd client Watched reads through.
type KV interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
}

// Watched reads what standby hosts record of the members they watch
// (UnreachablePrefix), by member ID in hex; a record that does not
// parse is skipped.
func Watched(ctx context.Context, kv KV) (map[string]Unreachable, error) {
	resp, err := kv.Get(ctx, UnreachablePrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", UnreachablePrefix, err)
	}
	out := map[string]Unreachable{}
	for _, kv := range resp.Kvs {
		var u Unreachable
		if json.Unmarshal(kv.Value, &u) == nil {
			out[u.ID] = u
		}
	}
	return out, nil
}
