// Package joinrun is one run of etcd-member-join, in the order its checks
// must come: the boot run (or its timer) and reconcile. The command builds
// the configuration and the dependencies; this decides what to do.
package joinrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
)

// Join is the boot run and its timer: a pause holds membership; a torn-down
// store, then a recovery or restore command (ours or etcd-manager-ctl's),
// come first; a healthy voting member only refreshes its registry entry;
// anything else is member join's decision (found, join, rejoin, replace,
// standby). The store's control state is read once, at the start.
func Join(ctx context.Context, cfg member.Config, d member.Deps, stop recovery.StopFunc) error {
	svc, release, err := localetcd.Hold(ctx, cfg.Root, "etcd-member-join", d.Service)
	if err != nil {
		return err
	}
	defer release()
	d.Service = svc
	d.Held = func(ctx context.Context) (string, error) {
		q, err := recovery.ReadRequests(ctx, d.Store)
		return q.Unfinished(d.Now()), err
	}
	c, err := readControl(ctx, d)
	if err != nil {
		return err
	}
	if c.paused != nil {
		res, err := member.RunPaused(ctx, cfg, d, c.paused.String())
		logResult(d.Log, res)
		return err
	}
	if done, err := c.requests.Act(ctx, cfg, d, stop); err != nil || done {
		return err
	}
	if p, ok := member.Settled(ctx, cfg); ok {
		// A timer run on a healthy member: keep its registry entry fresh
		// (a restore picks the hosts that registered lately).
		if err := member.Register(ctx, d.Store, member.Stamp(p, cfg.Root, time.Now())); err != nil {
			return err
		}
		d.Log.Info("this host's member is a healthy voting member: nothing to do", "member", cfg.Name)
		return nil
	}
	res, err := member.Run(ctx, cfg, d)
	if err != nil {
		return err
	}
	logResult(d.Log, res)
	return nil
}

// Reconcile shrinks the cluster to the spec, unless the member list has
// no surplus (asked of this host's member, one store read) or the
// operator holds the automation. With metricsFile set it first writes
// what it sees of the members there (a failure to is logged, not
// returned: the shrink matters more).
func Reconcile(ctx context.Context, cfg member.Config, d member.Deps, metricsFile string) error {
	if metricsFile != "" {
		seen, err := member.Look(ctx, cfg, d)
		if err != nil {
			d.Log.Warn("reconcile: could not look at the members for the metrics", "err", err)
		}
		if err := WriteMetrics(metricsFile, seen, err, d.Now()); err != nil {
			d.Log.Warn("reconcile: metrics not written", "file", metricsFile, "err", err)
		}
	}
	if msg, ok := member.NothingToShrink(ctx, cfg, d.Store); ok {
		d.Log.Info("reconciled: " + msg)
		return nil
	}
	p, err := pause.Get(ctx, d.Store)
	if err != nil {
		return err
	}
	if p != nil {
		d.Log.Info("reconcile: " + p.String() + "; nothing changed")
		return nil
	}
	removed, err := member.Reconcile(ctx, cfg, d)
	if err != nil {
		return err
	}
	d.Log.Info(fmt.Sprintf("reconciled: removed %d surplus members %v", len(removed), removed))
	return nil
}

// control is the store's control state one run decides on.
type control struct {
	paused   *pause.Pause
	requests recovery.Requests
}

// readControl reads the control state, its parts at once.
func readControl(ctx context.Context, d member.Deps) (control, error) {
	var c control
	var perr error
	done := make(chan struct{})
	go func() { defer close(done); c.paused, perr = pause.Get(ctx, d.Store) }()
	q, err := recovery.ReadRequests(ctx, d.Store)
	<-done
	c.requests = q
	return c, errors.Join(perr, err)
}

func logResult(log *slog.Logger, res member.Result) {
	log.Info(fmt.Sprintf("%s: %s", res.Action, res.Reason), "peerURL", res.Member.PeerURL, "clientURL", res.Member.ClientURL)
}
