// Command etcd-volume-attach gives this host its member identity and data
// volume before anything else starts (etcd-volume-attach.service), and
// renews the pool lease from a timer (etcd-volume-renew.timer).
package main

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
	"github.com/etcdadm/etcdadm-immutable/internal/volume"
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
	flags := []cli.Flag{
		&cli.StringFlag{Name: "store", EnvVars: []string{"ETCDADM_STORE"}, Usage: "the shared store (pool provider): " + storeurl.Help},
		&cli.StringFlag{Name: "provider", Value: volume.ProviderNone, EnvVars: []string{"ETCDADM_VOLUME_PROVIDER"}, Usage: "none, local or pool"},
		&cli.StringFlag{Name: "name", EnvVars: []string{"ETCDADM_VOLUME_NAME"}, Usage: "local: this host's member name"},
		&cli.StringFlag{Name: "device", EnvVars: []string{"ETCDADM_VOLUME_DEVICE"}, Usage: "local: the data device (/dev/vdb, /dev/disk/by-label/..., /dev/disk/by-partlabel/...)"},
		&cli.StringFlag{Name: "volumes", EnvVars: []string{"ETCDADM_VOLUMES"}, Usage: "pool: volume names, comma separated (default: etcd-a, etcd-b, ... for the spec's memberCount)"},
		&cli.StringFlag{Name: "driver", Value: volume.DriverLoopfile, EnvVars: []string{"ETCDADM_VOLUME_DRIVER"}, Usage: "pool: how volumes are attached: loopfile"},
		&cli.StringFlag{Name: "loopfile-dir", Value: "/var/lib/etcdadm/volumes", EnvVars: []string{"ETCDADM_LOOPFILE_DIR"}, Usage: "loopfile: directory (shared by all hosts) of the <volume>.img files"},
		&cli.StringFlag{Name: "size", Value: "8G", EnvVars: []string{"ETCDADM_VOLUME_SIZE"}, Usage: "loopfile: size of new images (K, M, G, T suffixes, powers of 1024); smaller ones are grown"},
		&cli.DurationFlag{Name: "lease", Value: volume.DefaultLease, EnvVars: []string{"ETCDADM_VOLUME_LEASE"}, Usage: "pool: how long a claim lasts without renewal (etcd-volume-renew.timer renews every 40s: keep it at 2m or more)"},
		&cli.StringFlag{Name: "host-id", EnvVars: []string{"ETCDADM_HOST_ID"}, Usage: "pool: this host's id in claims (default: /etc/machine-id, else the hostname)"},
		&cli.StringFlag{Name: "root", Value: "/", EnvVars: []string{"ETCDADM_ROOT"}, Usage: "prefix of every host path (tests)"},
		&cli.StringFlag{Name: "mounter", Value: volume.MounterSystemd, EnvVars: []string{"ETCDADM_MOUNTER"}, Usage: "systemd (a transient var-lib-etcd.mount over D-Bus) or plain (mount(2) in this process's namespace)"},
		&cli.BoolFlag{Name: "wait", Value: true, EnvVars: []string{"ETCDADM_VOLUME_WAIT"}, Usage: "pool: when every volume is held, wait (up to --timeout) for the first lease to run out; --wait=false exits 4 at once"},
		&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, EnvVars: []string{"ETCDADM_VOLUME_TIMEOUT"}, Usage: "give up after this long (store failures are retried until then)"},
		&cli.StringFlag{Name: "metrics-file", EnvVars: []string{"ETCDADM_VOLUME_METRICS_FILE"}, Usage: "pool: write the lease's Prometheus metrics here after every claim and renewal, for node_exporter's textfile collector (e.g. /var/lib/node_exporter/textfile/etcd_volume.prom)"},
		&cli.StringFlag{Name: "etcd-env", Value: "/etc/etcd/etcd.env", EnvVars: []string{"ETCDADM_VOLUME_ETCD_ENV"}, Usage: "renew: member join's etcd.env, whose ETCD_ADVERTISE_CLIENT_URLS reach this host's member (missing: the claim is renewed in the store only)"},
		&cli.StringFlag{Name: "etcd-cacert", Value: "/etc/etcd/pki/ca.crt", EnvVars: []string{"ETCDADM_VOLUME_ETCD_CACERT"}, Usage: "renew: CA bundle of etcd's server certificates"},
		&cli.StringFlag{Name: "etcd-cert", Value: "/etc/etcd/pki/client.crt", EnvVars: []string{"ETCDADM_VOLUME_ETCD_CERT"}, Usage: "renew: client certificate for this host's member"},
		&cli.StringFlag{Name: "etcd-key", Value: "/etc/etcd/pki/client.key", EnvVars: []string{"ETCDADM_VOLUME_ETCD_KEY"}, Usage: "renew: its key (the unit passes it as a credential)"},
		cliflags.LogLevel(),
	}
	app := &cli.App{
		Name:        "etcd-volume-attach",
		Usage:       "give this host its member identity and mount its data volume",
		Description: description,
		Flags:       flags,
		Action:      action(false),
		Commands: []*cli.Command{{
			Name:   "renew",
			Usage:  "renew this host's pool lease (from etcd-volume-renew.timer)",
			Flags:  flags,
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
