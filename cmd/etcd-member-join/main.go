// Command etcd-member-join decides, every time the host starts, what the
// local etcd member must do (found, join, rejoin, replace or stand by),
// writes etcd's environment file and starts etcd.service over D-Bus.
// "etcd-member-join reconcile" shrinks the cluster to the spec.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/memberflags"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/service/systemd"
)

const description = `Runs as a oneshot before etcd.service. From the store (spec, settings, peer
registry, initial plan), the data directory and etcd itself it decides:

  found    no cluster yet: register, wait for a quorum of founders, agree on one
           initial member plan, start etcd with state "new"
  join     the cluster has room: add this member as a learner, start, promote
  rejoin   the data directory holds this member: start
  replace  this member exists but its data is gone: back up, remove it, join
  standby  the cluster is full: leave membership alone (exit 0; re-run later)

Membership changes take a lock in etcd; one learner at a time; never a removal
that loses quorum. Safe to re-run at any point. Exit codes: 0 done or standby,
1 failed, 2 bad configuration.`

func main() {
	os.Exit(cliflags.Run(newApp(), os.Args, nil))
}

// newApp is the command: the boot run as its action, reconcile as a
// subcommand. Each gets its own copy of the flags: urfave/cli reads a
// subcommand's flags from its own flag set, and checks the app's required
// flags before it runs a subcommand, so the app's --store cannot be
// Required ("reconcile --store URL" would fail); run checks it instead.
func newApp() *cli.App {
	appStore := cliflags.Store().(*cli.StringFlag)
	appStore.Required = false
	return &cli.App{
		Name:        "etcd-member-join",
		Usage:       "bring this host's etcd member into the cluster",
		Description: description,
		Flags:       memberFlags(appStore),
		Action:      func(c *cli.Context) error { return run(c, false) },
		Commands: []*cli.Command{{
			Name:        "reconcile",
			Usage:       "shrink the cluster to the spec's member count (timer; one host acts at a time)",
			Description: "Removes surplus members one at a time after a backup: unhealthy first, then the highest names; moves leadership away before removing the leader; refuses anything that would lose quorum.",
			Flags:       memberFlags(cliflags.Store()),
			Action:      func(c *cli.Context) error { return run(c, true) },
		}},
		HideHelpCommand: true,
	}
}

// memberFlags returns new flag values on every call: urfave/cli keeps
// parse state in them, so two commands must not share one.
func memberFlags(store cli.Flag) []cli.Flag {
	return append(append([]cli.Flag{store}, memberflags.Flags()...),
		&cli.DurationFlag{Name: "found-grace", Value: time.Minute, EnvVars: []string{"ETCDADM_FOUND_GRACE"}, Usage: "how long founders wait for every planned member before founding with a quorum"},
		&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, EnvVars: []string{"ETCDADM_JOIN_TIMEOUT"}, Usage: "bound on every wait (founders, health, promotion)"},
		cliflags.LogLevel(),
	)
}

func run(c *cli.Context, reconcile bool) error {
	if c.String("store") == "" {
		return cli.Exit(`Required flag "store" not set: pass --store URL or set ETCDADM_STORE`, 2)
	}
	log := cliflags.Logger(c).With("component", "member-join")
	cfg, err := memberflags.Config(c)
	if err != nil {
		return err
	}
	cfg.Timeout, cfg.FoundGrace = c.Duration("timeout"), c.Duration("found-grace")
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return cli.Exit(err, 2)
	}
	ctx, cancel := context.WithTimeout(c.Context, cfg.Timeout+time.Minute)
	defer cancel()
	svc, err := systemd.New(ctx, c.String("unit"))
	if err != nil {
		return err
	}
	defer svc.Conn.Close()
	deps := member.Deps{Store: st, Service: svc, Log: log, Now: time.Now}
	if reconcile {
		if msg, ok := member.NothingToShrink(ctx, cfg, st); ok {
			log.Info("reconciled: " + msg)
			return nil
		}
	}
	p, err := pause.Get(ctx, st)
	if err != nil {
		return err
	}
	if p != nil && reconcile {
		log.Info("reconcile: " + p.String() + "; nothing changed")
		return nil
	}
	if p != nil {
		res, err := member.RunPaused(ctx, cfg, deps, p.String())
		logResult(log, res)
		return err
	}
	if reconcile {
		removed, err := member.Reconcile(ctx, cfg, deps)
		if err != nil {
			return err
		}
		log.Info(fmt.Sprintf("reconciled: removed %d surplus members %v", len(removed), removed))
		return nil
	}
	// A torn-down store, then a restore command (ours or
	// etcd-manager-ctl's), come first.
	stop := func(ctx context.Context, unit string) error {
		return (&systemd.Manager{Conn: svc.Conn, Unit: unit}).Stop(ctx)
	}
	if torn, err := recovery.ActTeardown(ctx, cfg, deps, stop); err != nil || torn {
		return err
	}
	if acted, err := recovery.ActRecover(ctx, cfg, deps); err != nil || acted {
		return err
	}
	if acted, err := recovery.Act(ctx, cfg, deps); err != nil || acted {
		return err
	}
	if p, ok := member.Settled(ctx, cfg); ok {
		// A timer run on a healthy member: keep its registry entry fresh
		// (a restore picks the hosts that registered lately).
		if err := member.Register(ctx, st, member.Stamp(p, cfg.Root, time.Now())); err != nil {
			return err
		}
		log.Info("this host's member is a healthy voting member: nothing to do", "member", cfg.Name)
		return nil
	}
	res, err := member.Run(ctx, cfg, deps)
	if err != nil {
		return err
	}
	logResult(log, res)
	return nil
}

func logResult(log *slog.Logger, res member.Result) {
	log.Info(fmt.Sprintf("%s: %s", res.Action, res.Reason), "peerURL", res.Member.PeerURL, "clientURL", res.Member.ClientURL)
}
