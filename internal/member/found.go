package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// awaitPlan returns the initial plan, fixing it once a quorum of the
// planned members has registered; nil if the cluster was created
// meanwhile by others.
func (j *joiner) awaitPlan(ctx context.Context) (*Plan, error) {
	want := int(j.cluster.Spec.MemberCount)
	quorum := Quorum(want)
	start := time.Now()
	deadline := start.Add(j.cfg.Timeout)
	lastReg := start
	for {
		plan, err := loadPlan(ctx, j.d.Store)
		if err != nil || plan != nil {
			return plan, err
		}
		if ok, err := exists(ctx, j.d.Store, etcdmanager.ClusterCreatedKey); err != nil || ok {
			return nil, err
		}
		peers, err := Peers(ctx, j.d.Store)
		if err != nil {
			return nil, err
		}
		fresh := FreshPeers(peers, j.d.Now(), 5*time.Minute)
		if len(fresh) >= want || (len(fresh) >= quorum && time.Since(start) >= j.cfg.FoundGrace) {
			p := Plan{Members: fresh[:min(len(fresh), want)], Token: j.cluster.Settings.ClusterToken, Created: j.d.Now().UTC()}
			return fixPlan(ctx, j.d.Store, p)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("member join: %w: %d of the %d members needed to found the cluster have registered (%s); start more hosts, or lower memberCount with 'etcdadm spec set'", ErrWaiting, len(fresh), quorum, names(fresh))
		}
		j.log.Info("waiting for founders to register", "registered", len(fresh), "planned", want, "quorum", quorum, "foundWithQuorumIn", (j.cfg.FoundGrace - time.Since(start)).Round(time.Second))
		if time.Since(lastReg) > 30*time.Second {
			if err := Register(ctx, j.d.Store, j.withTime(j.me)); err != nil {
				return nil, err
			}
			lastReg = time.Now()
		}
		if err := sleep(ctx, j.cfg.Poll); err != nil {
			return nil, err
		}
	}
}

func (j *joiner) awaitCreated(ctx context.Context) error {
	deadline := time.Now().Add(j.cfg.Timeout)
	for {
		ok, err := exists(ctx, j.d.Store, etcdmanager.ClusterCreatedKey)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("member join: %w: the founders have not brought the cluster up", ErrWaiting)
		}
		if err := sleep(ctx, j.cfg.Poll); err != nil {
			return err
		}
	}
}

// found starts a founding member with the agreed plan, and marks the
// cluster created once it serves linearizable reads.
func (j *joiner) found(ctx context.Context, plan *Plan) (Result, error) {
	action := Found
	if j.hasData() {
		action = Rejoin
	}
	if err := j.startEtcd(ctx, "new", plan.InitialCluster(), plan.Token); err != nil {
		return Result{}, err
	}
	cli, err := j.client([]string{j.me.ClientURL})
	if err != nil {
		return Result{}, err
	}
	defer cli.Close()
	if err := j.waitLinearizable(ctx, cli); err != nil {
		return Result{}, err
	}
	created, err := json.Marshal(map[string]int64{"timestamp": j.d.Now().UnixNano()})
	if err != nil {
		return Result{}, err
	}
	if _, err := store.PutBytes(ctx, j.d.Store, etcdmanager.ClusterCreatedKey, created, store.PutOptions{IfNoneMatch: true}); err != nil && !errors.Is(err, store.ErrPrecondition) {
		return Result{}, fmt.Errorf("member join: mark cluster created: %w", err)
	}
	crashpoint.Here(crashpoint.FoundCreated)
	return Result{Action: action, Reason: "founding member of " + plan.InitialCluster()}, nil
}
