package member

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/uploader"
)

// existing handles a cluster that exists (or is being founded by others).
func (j *joiner) existing(ctx context.Context) (Result, error) {
	eps, err := j.clusterEndpoints(ctx)
	if err != nil {
		return Result{}, err
	}
	cli, err := j.client(eps)
	if err != nil {
		return Result{}, err
	}
	defer cli.Close()

	if j.hasData() {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ml, err := j.memberList(lctx, cli)
		cancel()
		if err != nil {
			// Nobody answers: a full-cluster restart. Our data says who
			// we are; etcd ignores the initial-cluster flags.
			j.log.Info("cluster not reachable; starting on existing data", "err", err)
			if err := j.startEtcd(ctx, "existing", j.me.Name+"="+j.me.PeerURL, j.cluster.Settings.ClusterToken); err != nil {
				return Result{}, err
			}
			return Result{Action: Rejoin, Reason: "restart on existing data"}, nil
		}
		if m := j.find(ml.Members); m != nil {
			if !slices.Contains(m.PeerURLs, j.me.PeerURL) {
				// An adopted member whose old peer URL used another
				// host form: advertise ours from now on.
				j.log.Info("updating this member's peer URL", "from", strings.Join(m.PeerURLs, ","), "to", j.me.PeerURL)
				if err := j.retry(ctx, "update peer URL", func() error {
					_, err := cli.MemberUpdate(ctx, m.ID, []string{j.me.PeerURL})
					return err
				}); err != nil {
					return Result{}, fmt.Errorf("member join: update %s's peer URL to %s: %w", j.me.Name, j.me.PeerURL, err)
				}
			}
			if err := j.startEtcd(ctx, "existing", j.initialCluster(ml.Members, m.ID), j.cluster.Settings.ClusterToken); err != nil {
				return Result{}, err
			}
			if err := j.promoteIfLearner(ctx, cli); err != nil {
				return Result{}, err
			}
			return Result{Action: Rejoin, Reason: "data directory holds this member"}, nil
		}
		if err := j.moveDataAside(); err != nil {
			return Result{}, err
		}
	}
	res, err := j.joinLocked(ctx, cli)
	if err != nil || !res.full {
		return res, err
	}
	// Standing by for a full cluster: one of its voters may be dead
	// for good (a master replaced under a new name).
	if rep, ok, err := j.replaceDead(ctx, cli); err != nil || ok {
		return rep, err
	}
	return res, nil
}

// joinLocked adds this member, under the cluster-wide membership lock.
func (j *joiner) joinLocked(ctx context.Context, cli *clientv3.Client) (Result, error) {
	ctx, unlock, err := j.lock(ctx, cli)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	ml, err := j.memberList(ctx, cli)
	if err != nil {
		return Result{}, fmt.Errorf("member join: member list: %w", err)
	}
	action := Join
	if m := j.find(ml.Members); m != nil {
		if m.Name == "" {
			// Added earlier, never started (a crash after MemberAdd): start.
			j.log.Info("resuming a join: this member was added but never started", "id", fmt.Sprintf("%x", m.ID))
			if err := j.startEtcd(ctx, "existing", j.initialCluster(ml.Members, m.ID), j.cluster.Settings.ClusterToken); err != nil {
				return Result{}, err
			}
			if err := j.promoteIfLearner(ctx, cli); err != nil {
				return Result{}, err
			}
			return Result{Action: Join, Reason: "resumed after MemberAdd"}, nil
		}
		if err := j.removeStale(ctx, cli, ml.Members, m, "this member's old incarnation, whose data is gone"); err != nil {
			return Result{}, err
		}
		action = Replace
		if ml, err = j.memberList(ctx, cli); err != nil {
			return Result{}, fmt.Errorf("member join: member list: %w", err)
		}
	}
	voters := 0
	for _, m := range ml.Members {
		if m.IsLearner {
			return Result{Action: Standby, Reason: fmt.Sprintf("learner %s is catching up; one learner at a time", displayName(m))}, nil
		}
		voters++
	}
	if voters >= int(j.cluster.Spec.MemberCount) {
		return Result{Action: Standby, Reason: fmt.Sprintf("the cluster is full (%d of %d members)", voters, j.cluster.Spec.MemberCount), full: true}, nil
	}
	res, err := j.addLearner(ctx, cli, voters)
	if err != nil {
		return Result{}, err
	}
	res.Action = action
	return res, nil
}

// addLearner adds this host as a learner to a cluster of voters voting
// members, starts etcd and promotes it once caught up.
func (j *joiner) addLearner(ctx context.Context, cli *clientv3.Client, voters int) (Result, error) {
	var add *clientv3.MemberAddResponse
	err := j.retry(ctx, "add as learner", func() error {
		var err error
		add, err = cli.MemberAddAsLearner(ctx, []string{j.me.PeerURL})
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("member join: add %s as learner: %w", j.me.Name, err)
	}
	crashpoint.Here(crashpoint.LearnerAdded)
	j.log.Info("added as learner", "id", fmt.Sprintf("%x", add.Member.ID), "by hand", j.byHandJoin(add.Members, add.Member.ID))
	if err := j.startEtcd(ctx, "existing", j.initialCluster(add.Members, add.Member.ID), j.cluster.Settings.ClusterToken); err != nil {
		return Result{}, err
	}
	if err := j.promoteIfLearner(ctx, cli); err != nil {
		return Result{}, err
	}
	return Result{Action: Join, Reason: fmt.Sprintf("member %d of %d", voters+1, j.cluster.Spec.MemberCount)}, nil
}

// removeStale removes a member this host replaces (its own old
// incarnation whose data is gone, or a voter unreachable for the grace:
// why says which), after a backup, and only if the cluster keeps quorum
// without it (ErrUnsafe otherwise).
func (j *joiner) removeStale(ctx context.Context, cli *clientv3.Client, members []*etcdserverpb.Member, stale *etcdserverpb.Member, why string) error {
	if !stale.IsLearner {
		voters, healthy := Left(members, stale.ID, func(m *etcdserverpb.Member) bool { return j.healthy(ctx, m) })
		if need, ok := QuorumAfter(voters, healthy); !ok {
			return fmt.Errorf("member join: %w: removing %s leaves %d healthy of %d members, fewer than the %d needed; bring the others back first", ErrUnsafe, stale.Name, healthy, voters, need)
		}
		if _, err := j.backup(ctx, cli); err != nil {
			return fmt.Errorf("member join: backup before replacing %s: %w", stale.Name, err)
		}
		crashpoint.Here(crashpoint.ReplaceBackup)
	}
	j.log.Warn("REPLACING: removing "+why, "member", displayName(stale), "id", fmt.Sprintf("%x", stale.ID), "by hand", fmt.Sprintf("etcdadm backup now; etcdadm member remove %s", displayName(stale)))
	if err := j.removeMember(ctx, cli, stale.ID); err != nil {
		return fmt.Errorf("member join: remove stale %s: %w", stale.Name, err)
	}
	crashpoint.Here(crashpoint.ReplaceRemoved)
	return nil
}

func (j *joiner) backup(ctx context.Context, cli *clientv3.Client) (string, error) {
	ep := cli.Endpoints()[0]
	for _, e := range cli.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Status(sctx, e)
		cancel()
		if err == nil {
			ep = e
			break
		}
	}
	out, err := uploader.Run(ctx, uploader.Config{Endpoint: ep, AnyMember: true, SkipPrune: true, StaleAfter: time.Hour, Retention: backup.DefaultPolicy()}, cli, j.d.Store, j.log, j.d.Now)
	if err != nil {
		return "", err
	}
	j.log.Info("backed up before a cluster change", "backup", out.Backup)
	return out.Backup, nil
}

func (j *joiner) healthy(ctx context.Context, m *etcdserverpb.Member) bool {
	if len(m.ClientURLs) == 0 {
		return false
	}
	c, err := j.client(m.ClientURLs)
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = MemberStatus(ctx, c, m)
	return err == nil
}

// find returns this member's entry: by name once started, by peer URL
// before.
func (j *joiner) find(ms []*etcdserverpb.Member) *etcdserverpb.Member {
	for _, m := range ms {
		if m.Name == j.me.Name {
			return m
		}
	}
	for _, m := range ms {
		for _, u := range m.PeerURLs {
			if u == j.me.PeerURL {
				return m
			}
		}
	}
	return nil
}

func displayName(m *etcdserverpb.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return fmt.Sprintf("%x (not started)", m.ID)
}

// initialCluster renders the membership a joining member must start
// with: every member's peer URLs, this member under its own name.
func (j *joiner) initialCluster(ms []*etcdserverpb.Member, self uint64) string {
	var parts []string
	for _, m := range ms {
		name := m.Name
		if m.ID == self {
			name = j.me.Name
		} else if name == "" {
			name = fmt.Sprintf("unstarted-%x", m.ID)
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, name+"="+u)
		}
	}
	// Sorted: the same membership renders the same env file, whoever
	// wrote it (a restore, a rejoin), so etcd is not restarted for order.
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func (j *joiner) moveDataAside() error {
	dst, err := localetcd.MoveAside(j.cfg.DataDir, "removed-"+j.d.Now().UTC().Format("20060102T150405Z"))
	if err != nil {
		return fmt.Errorf("member join: %w", err)
	}
	j.log.Warn("this member was removed from the cluster; its old data is moved aside (not deleted)", "to", dst)
	return nil
}

// byHandJoin is the command a person would run on this host for the join
// member join does: etcdadm join with the client URL of another member.
func (j *joiner) byHandJoin(members []*etcdserverpb.Member, self uint64) string {
	for _, m := range members {
		if m.ID != self && len(m.ClientURLs) > 0 {
			return fmt.Sprintf("etcdadm join %s --name %s --store %s", m.ClientURLs[0], j.me.Name, j.d.Store)
		}
	}
	return "etcdadm join <a member's client URL> --name " + j.me.Name
}
