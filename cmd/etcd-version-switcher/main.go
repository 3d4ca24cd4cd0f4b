// Command etcd-version-switcher moves this host's etcd member to the
// cluster spec's etcd version, one member of the cluster at a time, with a
// backup before each step and a rollback when the member does not come up.
package main

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/memberflags"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
	"github.com/etcdadm/etcdadm-immutable/internal/service/systemd"
)

const description = `Runs from etcd-version-switcher.timer and after etcd-member-join. Compares
the spec's etcdVersion (set with 'etcdadm upgrade --to V') with what this
member runs; when they differ it takes its turn in the cluster-wide rollout:

  - one member at a time in the whole cluster (a lock in etcd), non-leaders
    by name, the leader last (leadership is moved away first)
  - before acting: every member healthy and voting, no learner, quorum
    without this member, a verified backup taken for this step
  - a minor step down goes through etcd's downgrade API first
  - the binary comes from /opt/etcd/vX.Y.Z (baked) or the store's release
    (sha256-checked); /opt/etcd/current moves; etcd.env is rewritten for
    the version; etcd restarts over D-Bus
  - the member must answer at the new version, catch up with the leader and
    serve a linearizable read within --health-timeout, else the previous
    binary is put back and the rollout STOPS (etcdadm status says why)

It waits for the other members' turns and exits when the rollout is done.
Safe to kill at any line: the next run finishes or rolls back the switch.
Exit codes: 0 done or nothing to do, 1 failed or still waiting at
--timeout, 2 bad configuration, 3 the rollout stopped (a member failed).`

func main() {
	app := &cli.App{
		Name:            "etcd-version-switcher",
		Usage:           "move this member to the spec's etcd version, in turn",
		Description:     description,
		Flags:           memberflags.Switcher(),
		Action:          run,
		HideHelpCommand: true,
	}
	os.Exit(cliflags.Run(app, os.Args, exitCode))
}

// exitCode tells a stopped rollout (3: someone must look) from any other
// failure (1: the timer runs it again).
func exitCode(err error) int {
	if errors.Is(err, rollout.ErrStopped) {
		return 3
	}
	return 1
}

func run(c *cli.Context) error {
	log := cliflags.Logger(c).With("component", "version-switcher")
	mcfg, err := memberflags.Config(c)
	if err != nil {
		return err
	}
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return cli.Exit(err, 2)
	}
	cfg := rollout.Config{Member: mcfg, Timeout: c.Duration("timeout"), HealthTimeout: c.Duration("health-timeout")}
	ctx, cancel := context.WithTimeout(c.Context, cfg.Timeout+cfg.HealthTimeout+time.Minute)
	defer cancel()
	svc, err := systemd.New(ctx, c.String("unit"))
	if err != nil {
		return err
	}
	defer svc.Conn.Close()
	notify := func(s string) { daemon.SdNotify(false, "STATUS="+s) }
	out, err := rollout.Run(ctx, cfg, rollout.Deps{Deps: member.Deps{Store: st, Service: svc, Log: log, Now: time.Now}, Status: notify})
	if f := c.String("metrics-file"); f != "" {
		if merr := rollout.WriteMetrics(ctx, f, st, out, err, time.Now()); merr != nil {
			log.Warn("metrics", "err", merr)
		}
	}
	if err != nil {
		return err
	}
	log.Info(out.Summary, "target", out.Target, "switched", out.Switched)
	return nil
}
