package manual

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
)

// ResetOptions are what etcdadm reset is told.
type ResetOptions struct {
	// Force leaves even when the rest of the cluster would lose its
	// quorum, or cannot be reached.
	Force bool
	// LocalStore is this host's own store directory, moved aside too;
	// "" when the host uses a shared store (left alone).
	LocalStore string
	// Stop stops one unit; nil stops etcd only (d.Service).
	Stop func(ctx context.Context, unit string) error
	Now  time.Time
}

// ResetResult says what Reset did.
type ResetResult struct {
	// Removed: this member was removed from the cluster.
	Removed  bool
	Aside    []string
	Warnings []string
}

// Reset makes this host blank again: it leaves the cluster (a member
// removal only when the rest keeps its quorum, unless Force), stops etcd
// and our units, and moves the data, the certificates, etcd.env and the
// host's own store aside (never deleted). Refused, changing nothing: the
// removal would lose quorum, or the cluster cannot be reached, without
// Force. Safe to re-run: what is gone already is skipped.
func Reset(ctx context.Context, cfg member.Config, d member.Deps, o ResetOptions) (ResetResult, error) {
	var res ResetResult
	cfg = cfg.Defaulted()
	svc, release, err := localetcd.Hold(ctx, cfg.Root, "etcdadm reset", d.Service)
	if err != nil {
		return res, err
	}
	defer release()
	d.Service = svc
	if err := leave(ctx, cfg, d, o.Force, &res); err != nil {
		return res, err
	}
	stop := o.Stop
	if stop == nil {
		stop = func(ctx context.Context, _ string) error { return localetcd.Stop(ctx, d.Service) }
	}
	units := recovery.TeardownUnits()
	if o.Stop == nil {
		units = []string{"etcd.service"}
	}
	var errs []error
	for _, u := range units {
		if err := stop(ctx, u); err != nil && !recovery.NotLoaded(err) {
			errs = append(errs, fmt.Errorf("stop %s: %w", u, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("manual: reset: %w (nothing was moved; run it again)", err)
	}
	suffix := asideSuffix(o.Now)
	dst, err := localetcd.MoveAside(cfg.DataDir, suffix[1:])
	if err != nil {
		return res, fmt.Errorf("manual: reset: %w", err)
	}
	if dst != "" {
		res.Aside = append(res.Aside, dst)
	}
	for _, p := range []string{cfg.PKIDir, cfg.EnvFile, o.LocalStore} {
		if p == "" {
			continue
		}
		dst, err := moveAside(p, suffix)
		if err != nil {
			return res, err
		}
		if dst != "" {
			res.Aside = append(res.Aside, dst)
		}
	}
	return res, nil
}

// leave removes this host's member from its cluster, when it is one.
func leave(ctx context.Context, cfg member.Config, d member.Deps, force bool, res *ResetResult) error {
	created, err := exists(ctx, d.Store, etcdmanager.ClusterCreatedKey)
	if err != nil || !created {
		return err // no cluster declared here: nothing to leave
	}
	unreachable := func(err error) error {
		if force {
			res.Warnings = append(res.Warnings, fmt.Sprintf("the cluster could not be reached (%v): %s may still be listed as a member; remove it from a healthy member with 'etcdadm member remove %s'", err, cfg.Name, cfg.Name))
			return nil
		}
		return fmt.Errorf("manual: reset: %w: cannot reach the cluster to leave it (%w); pass --force to reset anyway (the cluster then keeps %s in its member list: remove it from a healthy member with 'etcdadm member remove %s')", ErrRefused, err, cfg.Name, cfg.Name)
	}
	s, err := member.Open(ctx, cfg, d)
	if err != nil {
		return unreachable(err)
	}
	defer s.Close()
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ms, err := s.MemberList(lctx)
	if err != nil {
		return unreachable(err)
	}
	i := slices.IndexFunc(ms, func(m *etcdserverpb.Member) bool { return m.Name == cfg.Name })
	if i < 0 {
		return nil // removed before (a re-run)
	}
	voters := 0
	for _, m := range ms {
		if !m.IsLearner {
			voters++
		}
	}
	if voters == 1 && !ms[i].IsLearner {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s was the only member: the cluster ends with it (its data is kept aside)", cfg.Name))
		return nil
	}
	// etcd answers "unhealthy cluster" for a few seconds after a
	// promotion: Retry waits that out, as member join does.
	err = s.Retry(lctx, "member remove", func() error {
		_, err := member.Remove(lctx, s.Cli, cfg.Name)
		return err
	})
	if errors.Is(err, member.ErrUnsafe) && force {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%v: removed anyway (--force): the rest has no quorum and serves nothing until members come back, or 'etcdadm recover --from-member NAME'", err))
		_, err = s.Cli.MemberRemove(lctx, ms[i].ID)
	}
	if errors.Is(err, member.ErrUnsafe) {
		return fmt.Errorf("manual: reset: %w: %w; bring the other members back first, or pass --force (the rest then stops serving until they are back, or 'etcdadm recover')", ErrRefused, err)
	}
	if err != nil {
		return unreachable(err)
	}
	res.Removed = true
	return nil
}
