// Command etcd-member-join decides, every time the host starts, what the
// local etcd member must do (found, join, rejoin, replace or stand by),
// writes etcd's environment file and starts etcd.service over D-Bus.
// "etcd-member-join reconcile" shrinks the cluster to the spec.
package main

import (
	"context"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/joinrun"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/memberflags"
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
		Flags:       memberflags.Join(appStore),
		Action:      func(c *cli.Context) error { return run(c, false) },
		Commands: []*cli.Command{{
			Name:        "reconcile",
			Usage:       "shrink the cluster to the spec's member count (timer; one host acts at a time)",
			Description: "Removes surplus members one at a time after a backup: unhealthy first, then the highest names; moves leadership away before removing the leader; refuses anything that would lose quorum.",
			Flags:       memberflags.Reconcile(cliflags.Store()),
			Action:      func(c *cli.Context) error { return run(c, true) },
		}},
		HideHelpCommand: true,
	}
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
	cfg.Timeout, cfg.FoundGrace, cfg.ReplaceAfter = c.Duration("timeout"), c.Duration("found-grace"), c.Duration("replace-after")
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return cli.Exit(err, 2)
	}
	// A standby may watch an unreachable member for the grace, then join.
	ctx, cancel := context.WithTimeout(c.Context, cfg.ReplaceAfter+cfg.Timeout+time.Minute)
	defer cancel()
	svc, err := systemd.New(ctx, c.String("unit"))
	if err != nil {
		return err
	}
	defer svc.Conn.Close()
	deps := member.Deps{Store: st, Service: svc, Log: log, Now: time.Now}
	if reconcile {
		return joinrun.Reconcile(ctx, cfg, deps, c.String("metrics-file"))
	}
	return joinrun.Join(ctx, cfg, deps, func(ctx context.Context, unit string) error {
		return (&systemd.Manager{Conn: svc.Conn, Unit: unit}).Stop(ctx)
	})
}
