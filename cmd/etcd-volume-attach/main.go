// Command etcd-volume-attach gives this host its member identity and data
// volume before anything else starts (etcd-volume-attach.service), and
// renews the pool lease from a timer (etcd-volume-renew.timer).
package main

import (
	"errors"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/volume"
	"github.com/etcdadm/etcdadm-immutable/internal/volumeflags"
)

// Exit codes, for systemd and alerting.
const (
	exitFailed = 1
	exitConfig = 2
	exitStore  = 3
	exitHeld   = 4 // no free volume, or the claim was lost
	exitInUse  = 5 // refused: the volume or mount point is in use, or holds foreign data
)

const description = `Run once at boot, before etcd-dns-registrar and etcd-member-join:
give this host exactly one member identity and mount that member's data
volume at /var/lib/etcd, then write /run/etcdadm/identity.env
(ETCDADM_MEMBER_NAME, ETCDADM_VOLUME, ETCDADM_DEVICE).

Providers: none (do nothing: the member is named after the host); local (a
fixed --device and --name); pool (claim one of --volumes, default etcd-a,
etcd-b, ... from the spec's memberCount, through a lease in the store, and
attach it with --driver; when every volume is held it waits, up to --timeout,
for the first lease to run out, so a replacement host can boot while the dead
host's lease still runs). A blank device is formatted ext4; a device with
any file system or partition table is never formatted. The command refuses,
changing nothing, whatever could let two hosts mount one volume.

'renew' (from etcd-volume-renew.timer) extends the pool claim in the store
and, once this host's member runs, in etcd (/etcdadm/volumes/<volume>),
so a store outage of any length leaves the member running. A host whose
claim neither confirms long enough to be taken over fences itself: it stops
etcd and unmounts the volume, and comes back by itself when the store
confirms the claim again.

Exit codes: 0 done; 1 other failure; 2 bad configuration; 3 store
unreachable or failing; 4 no free volume, the claim was lost, or the host
is fenced; 5 refused:
in use or foreign data on the device.`

func main() {
	cliflags.LoadHostEnv("/etc/etcdadm/etcdadm.env")
	// Each command its own flag values: urfave/cli keeps parse state in them.
	app := &cli.App{
		Name:        "etcd-volume-attach",
		Usage:       "give this host its member identity and mount its data volume",
		Description: description,
		Flags:       volumeflags.Flags(),
		Action:      action(false),
		Commands: []*cli.Command{{
			Name:   "renew",
			Usage:  "renew this host's pool lease (from etcd-volume-renew.timer)",
			Flags:  volumeflags.Flags(),
			Action: action(true),
		}},
		HideHelpCommand: true,
	}
	os.Exit(cliflags.Run(app, os.Args, cliflags.Always(exitConfig)))
}

// command is the typed configuration the flags give.
func command(c *cli.Context) volume.Command {
	cmd := volume.Command{
		Config: volume.Config{
			Provider: c.String("provider"),
			Name:     c.String("name"),
			Device:   c.String("device"),
			Lease:    c.Duration("lease"),
			HostID:   c.String("host-id"),
			Root:     c.String("root"),
		},
		Driver:      c.String("driver"),
		LoopfileDir: c.String("loopfile-dir"),
		Size:        c.String("size"),
		Mounter:     c.String("mounter"),
		Wait:        c.Bool("wait"),
		MetricsFile: c.String("metrics-file"),
		Timeout:     c.Duration("timeout"),
		EtcdEnv:     c.String("etcd-env"),
		EtcdCACert:  c.String("etcd-cacert"),
		EtcdCert:    c.String("etcd-cert"),
		EtcdKey:     c.String("etcd-key"),
	}
	for _, v := range strings.Split(c.String("volumes"), ",") {
		if v = strings.TrimSpace(v); v != "" {
			cmd.Volumes = append(cmd.Volumes, v)
		}
	}
	return cmd
}

// action is attach, or renew: the pool provider gets the store.
func action(renew bool) cli.ActionFunc {
	return func(c *cli.Context) error {
		cmd := command(c)
		var st store.Store
		if cmd.Provider == volume.ProviderPool && c.String("store") != "" {
			var err error
			if st, err = cliflags.OpenStore(c); err != nil {
				return cli.Exit(err, exitConfig)
			}
		}
		run, component := cmd.Attach, "volume-attach"
		if renew {
			run, component = cmd.Renew, "volume-renew"
		}
		if err := run(c.Context, st, cliflags.Logger(c).With("component", component)); err != nil {
			return cli.Exit(err, code(err))
		}
		return nil
	}
}

// code is the exit code for err (see the description).
func code(err error) int {
	switch {
	case errors.Is(err, volume.ErrConfig):
		return exitConfig
	case errors.Is(err, volume.ErrNoFreeVolume), errors.Is(err, volume.ErrLost), errors.Is(err, volume.ErrFenced):
		return exitHeld
	case errors.Is(err, volume.ErrInUse), errors.Is(err, volume.ErrNotExt4):
		return exitInUse
	case errors.Is(err, volume.ErrStore), errors.Is(err, store.ErrUnreachable),
		errors.Is(err, store.ErrAccessDenied), errors.Is(err, store.ErrNoBucket):
		return exitStore
	}
	return exitFailed
}
