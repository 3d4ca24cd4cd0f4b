package member

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
)

// Reconcile shrinks the cluster to the spec's member count: one member at
// a time, after a backup, unhealthy members first, moving leadership away
// before the leader is removed, never below quorum. Any host may run it
// (from a timer); the membership lock makes one act at a time. It returns
// the names it removed.
func Reconcile(ctx context.Context, cfg Config, d Deps) ([]string, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	j, cli, err := connect(ctx, cfg, d)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, unlock, err := j.lock(ctx, cli)
	if err != nil {
		return nil, err
	}
	defer unlock()
	want := int(j.cluster.Spec.MemberCount)
	var removed []string
	backedUp := false
	for {
		ml, err := j.memberList(ctx, cli)
		if err != nil {
			return removed, fmt.Errorf("reconcile: member list: %w", err)
		}
		var voters []*etcdserverpb.Member
		for _, m := range ml.Members {
			if !m.IsLearner {
				voters = append(voters, m)
			}
		}
		if len(voters) <= want {
			return removed, nil
		}
		// A member a switcher is restarting looks unhealthy for a moment:
		// removing it would turn a rolling restart into a lost member.
		if held, err := rolloutLockHeld(ctx, cli); err != nil {
			return removed, fmt.Errorf("reconcile: %w", err)
		} else if held {
			j.log.Info("a version switch or CA-rotation restart holds the rollout lock: no member is removed now; the next run looks again", "surplus", len(voters)-want)
			return removed, nil
		}
		if !backedUp {
			if _, err := j.backup(ctx, cli); err != nil {
				return removed, fmt.Errorf("reconcile: backup before shrinking: %w", err)
			}
			backedUp = true
		}
		healthy := map[uint64]bool{}
		for _, m := range voters {
			healthy[m.ID] = j.healthy(ctx, m)
		}
		victim := pickVictim(voters, healthy)
		rest, left := Left(voters, victim.ID, func(m *etcdserverpb.Member) bool { return healthy[m.ID] })
		if need, ok := QuorumAfter(rest, left); !ok {
			return removed, fmt.Errorf("reconcile: %w: removing %s leaves %d healthy members, %d needed", ErrUnsafe, victim.Name, left, need)
		}
		if err := j.moveLeaderOff(ctx, cli, victim, voters, healthy); err != nil {
			return removed, err
		}
		if err := j.removeMember(ctx, cli, victim.ID); err != nil {
			return removed, fmt.Errorf("reconcile: remove %s: %w", victim.Name, err)
		}
		crashpoint.Here(crashpoint.ReconcileGone)
		j.log.Info("removed surplus member", "removed", victim.Name, "members", len(voters)-1, "want", want, "by hand", "etcdadm member remove "+victim.Name)
		removed = append(removed, victim.Name)
	}
}

// pickVictim chooses the surplus member to remove first: an unhealthy one,
// else the highest name (etcd-e before etcd-d), so a shrink undoes a grow.
func pickVictim(voters []*etcdserverpb.Member, healthy map[uint64]bool) *etcdserverpb.Member {
	return slices.MinFunc(voters, func(a, b *etcdserverpb.Member) int {
		if healthy[a.ID] != healthy[b.ID] {
			if !healthy[a.ID] {
				return -1
			}
			return 1
		}
		return strings.Compare(b.Name, a.Name)
	})
}

// moveLeaderOff hands leadership to a healthy member if victim leads.
func (j *joiner) moveLeaderOff(ctx context.Context, cli *clientv3.Client, victim *etcdserverpb.Member, voters []*etcdserverpb.Member, healthy map[uint64]bool) error {
	if len(victim.ClientURLs) == 0 {
		return nil
	}
	st, err := cli.Status(ctx, victim.ClientURLs[0])
	if err != nil || st.Leader != victim.ID {
		return nil // not reachable or not the leader: nothing to hand over
	}
	for _, m := range voters {
		if m.ID == victim.ID || !healthy[m.ID] {
			continue
		}
		lc, err := j.client(victim.ClientURLs)
		if err != nil {
			return err
		}
		err = j.retry(ctx, "move leader", func() error { _, err := lc.MoveLeader(ctx, m.ID); return err })
		lc.Close()
		if err != nil {
			return fmt.Errorf("reconcile: move leadership from %s to %s: %w", victim.Name, m.Name, err)
		}
		j.log.Info("moved leadership before removing the leader", "from", victim.Name, "to", m.Name)
		return nil
	}
	return fmt.Errorf("reconcile: %w: no healthy member to take over leadership from %s", ErrUnsafe, victim.Name)
}

// connect loads the cluster and opens a client to the registered members.
func connect(ctx context.Context, cfg Config, d Deps) (*joiner, *clientv3.Client, error) {
	j, err := newJoiner(ctx, cfg, d)
	if err != nil {
		return nil, nil, err
	}
	eps, err := j.clusterEndpoints(ctx)
	if err != nil {
		return nil, nil, err
	}
	cli, err := j.client(append(eps, j.me.ClientURL))
	if err != nil {
		return nil, nil, err
	}
	return j, cli, nil
}
