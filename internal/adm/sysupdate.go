package adm

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/hostaddr"
	"github.com/etcdadm/etcdadm-immutable/internal/service/systemd"
	"github.com/etcdadm/etcdadm-immutable/internal/sysupdate"
)

func sysupdateCommand() *cli.Command {
	return &cli.Command{
		Name:      "sysupdate",
		Usage:     "on a sysext host: fetch newer etcd and etcdadm images, merge them, and declare a newer etcd patch once every host has it",
		ArgsUsage: " ",
		Description: `Run by etcd-sysupdate.timer on hosts rendered with --binaries sysext (images
downloaded, not baked). For each /etc/sysupdate.NAME.d of our images
(etcd-X.Y, etcdadm) it runs 'systemd-sysupdate --component=NAME update': a
newer image from the transfer's URL (checked against its SHA256SUMS) goes to
/opt/extensions/NAME/ and /etc/extensions/NAME.raw moves to it. An etcd
image's transfer matches the patches of its own minor only, so no unattended
update crosses a minor. When an image changed, systemd-sysext.service is
restarted (the images merge again) and systemd reloads its units; a run
stopped between an update and its merge merges on the next run.

Then this host's registry entry lists the etcd versions it has now, and
when every host has a newer patch of the spec's minor, it is declared as
'etcdadm upgrade --to' would (the host that completes the set declares it):
the version switchers restart the members one at a time, leader last, each
after a verified backup, rolled back if it does not come up. Nothing is
declared while 'etcdadm pause' holds the automation or another rollout is
unfinished (the next run tries again), nor with --declare=false
(ETCDADM_SYSUPDATE_DECLARE=false in etcdadm.env), which leaves the
'etcdadm upgrade --to' to you.

Exit codes: 0 done (updated or not), 1 failure.`,
		Flags: []cli.Flag{
			cliflags.Store(),
			&cli.StringFlag{Name: "name", EnvVars: []string{"ETCDADM_MEMBER_NAME"}, Usage: "this host's member name, whose registry entry lists the versions it has (default: as member join names it)"},
			&cli.StringFlag{Name: "volume-provider", EnvVars: []string{"ETCDADM_VOLUME_PROVIDER"}, Usage: "etcd-volume-attach's provider: with local or pool, the member name comes from the attached volume (identity.env)"},
			&cli.BoolFlag{Name: "declare", Value: true, EnvVars: []string{"ETCDADM_SYSUPDATE_DECLARE"}, Usage: "declare a newer patch of the cluster's minor once every host has it"},
			&cli.StringFlag{Name: "sysupdate", Value: "/usr/lib/systemd/systemd-sysupdate", EnvVars: []string{"ETCDADM_SYSUPDATE"}, Usage: "the systemd-sysupdate program"},
			&cli.StringFlag{Name: "root", Value: "/", EnvVars: []string{"ETCDADM_ROOT"}, Usage: "prefix of every host path"},
			&cli.StringFlag{Name: "state-dir", Value: "/var/lib/etcd-sysupdate", EnvVars: []string{"ETCDADM_SYSUPDATE_STATE_DIR"}, Usage: "where the run keeps what the host merged last (the unit's StateDirectory)"},
		},
		Action: func(c *cli.Context) error {
			st, err := cliflags.OpenStore(c)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context, 30*time.Minute)
			defer cancel()
			sd, err := newHostSystemd(ctx)
			if err != nil {
				return err
			}
			defer sd.m.Conn.Close()
			name, err := hostaddr.MemberName(c.String("name"), c.String("volume-provider"))
			if err != nil {
				return cli.Exit(err, 1)
			}
			cfg := sysupdate.Config{Root: c.String("root"), Sysupdate: c.String("sysupdate"), Member: name, Declare: c.Bool("declare"), StateDir: c.String("state-dir")}
			out, err := sysupdate.Run(ctx, cfg, sysupdate.Deps{Store: st, Systemd: sd, Log: cliflags.Logger(c).With("component", "sysupdate"), Now: time.Now})
			if err != nil {
				daemon.SdNotify(false, "STATUS=failed: "+err.Error())
				return err
			}
			daemon.SdNotify(false, "STATUS="+out.Summary)
			fmt.Fprintln(c.App.Writer, out.Summary)
			return nil
		},
	}
}

// hostSystemd is sysupdate.Systemd over D-Bus.
type hostSystemd struct{ m *systemd.Manager }

func newHostSystemd(ctx context.Context) (hostSystemd, error) {
	m, err := systemd.New(ctx, "systemd-sysext.service")
	return hostSystemd{m}, err
}

// Refresh restarts systemd-sysext.service, which merges the images again
// in the host's mount namespace (this command's unit has one of its own).
func (h hostSystemd) Refresh(ctx context.Context) error {
	if err := h.m.Start(ctx, true); err != nil {
		return err
	}
	return h.m.Reload(ctx)
}

func (h hostSystemd) StartSwitcher(ctx context.Context) error {
	if _, err := h.m.Conn.StartUnitContext(ctx, "etcd-version-switcher.service", "replace", nil); err != nil {
		return fmt.Errorf("systemd: start etcd-version-switcher.service: %w", err)
	}
	return nil
}
