// Command etcd-volume-attach gives this host its member identity and data
// volume before anything else starts (etcd-volume-attach.service), and
// renews the pool lease from a timer (etcd-volume-renew.timer).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/service/systemd"
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

'renew' (from etcd-volume-renew.timer) extends the pool lease.

Exit codes: 0 done; 1 other failure; 2 bad configuration; 3 store
unreachable or failing; 4 no free volume, or the claim was lost; 5 refused:
in use or foreign data on the device.`

func main() {
	cliflags.LoadHostEnv("/etc/etcdadm/etcdadm.env")
	flags := []cli.Flag{
		&cli.StringFlag{Name: "store", EnvVars: []string{"ETCDADM_STORE"}, Usage: "the shared store (pool provider): " + storeurl.Help},
		&cli.StringFlag{Name: "provider", Value: volume.ProviderNone, EnvVars: []string{"ETCDADM_VOLUME_PROVIDER"}, Usage: "none, local or pool"},
		&cli.StringFlag{Name: "name", EnvVars: []string{"ETCDADM_VOLUME_NAME"}, Usage: "local: this host's member name"},
		&cli.StringFlag{Name: "device", EnvVars: []string{"ETCDADM_VOLUME_DEVICE"}, Usage: "local: the data device (/dev/vdb, /dev/disk/by-label/..., /dev/disk/by-partlabel/...)"},
		&cli.StringFlag{Name: "volumes", EnvVars: []string{"ETCDADM_VOLUMES"}, Usage: "pool: volume names, comma separated (default: etcd-a, etcd-b, ... for the spec's memberCount)"},
		&cli.StringFlag{Name: "driver", Value: "loopfile", EnvVars: []string{"ETCDADM_VOLUME_DRIVER"}, Usage: "pool: how volumes are attached: loopfile"},
		&cli.StringFlag{Name: "loopfile-dir", Value: "/var/lib/etcdadm/volumes", EnvVars: []string{"ETCDADM_LOOPFILE_DIR"}, Usage: "loopfile: directory (shared by all hosts) of the <volume>.img files"},
		&cli.StringFlag{Name: "size", Value: "8G", EnvVars: []string{"ETCDADM_VOLUME_SIZE"}, Usage: "loopfile: size of new images (K, M, G, T suffixes, powers of 1024); smaller ones are grown"},
		&cli.DurationFlag{Name: "lease", Value: volume.DefaultLease, EnvVars: []string{"ETCDADM_VOLUME_LEASE"}, Usage: "pool: how long a claim lasts without renewal (etcd-volume-renew.timer renews every 40s: keep it at 2m or more)"},
		&cli.StringFlag{Name: "host-id", EnvVars: []string{"ETCDADM_HOST_ID"}, Usage: "pool: this host's id in claims (default: /etc/machine-id, else the hostname)"},
		&cli.StringFlag{Name: "root", Value: "/", EnvVars: []string{"ETCDADM_ROOT"}, Usage: "prefix of every host path (tests)"},
		&cli.StringFlag{Name: "mounter", Value: "systemd", EnvVars: []string{"ETCDADM_MOUNTER"}, Usage: "systemd (a transient var-lib-etcd.mount over D-Bus) or plain (mount(2) in this process's namespace)"},
		&cli.BoolFlag{Name: "wait", Value: true, EnvVars: []string{"ETCDADM_VOLUME_WAIT"}, Usage: "pool: when every volume is held, wait (up to --timeout) for the first lease to run out; --wait=false exits 4 at once"},
		&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, EnvVars: []string{"ETCDADM_VOLUME_TIMEOUT"}, Usage: "give up after this long (store failures are retried until then)"},
		cliflags.LogLevel(),
	}
	app := &cli.App{
		Name:        "etcd-volume-attach",
		Usage:       "give this host its member identity and mount its data volume",
		Description: description,
		Flags:       flags,
		Action:      attach,
		Commands: []*cli.Command{{
			Name:   "renew",
			Usage:  "renew this host's pool lease (from etcd-volume-renew.timer)",
			Flags:  flags,
			Action: renew,
		}},
		HideHelpCommand: true,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-volume-attach:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(exitConfig)
	}
}

func config(c *cli.Context) volume.Config {
	cfg := volume.Config{
		Provider: c.String("provider"),
		Name:     c.String("name"),
		Device:   c.String("device"),
		Lease:    c.Duration("lease"),
		HostID:   c.String("host-id"),
		Root:     c.String("root"),
	}
	for _, v := range strings.Split(c.String("volumes"), ",") {
		if v = strings.TrimSpace(v); v != "" {
			cfg.Volumes = append(cfg.Volumes, v)
		}
	}
	return cfg
}

// setup builds the configuration and dependencies; close releases them.
func setup(ctx context.Context, c *cli.Context, log *slog.Logger, needMount bool) (volume.Config, volume.Deps, func(), error) {
	cfg := config(c)
	// Store failures are retried until --timeout (Attempts 0).
	d := volume.Deps{Log: log, WaitForFree: c.Bool("wait")}
	closeFn := func() {}
	if cfg.Provider == volume.ProviderPool {
		if cfg.HostID == "" {
			id, err := volume.HostID(cfg.Root)
			if err != nil {
				return cfg, d, closeFn, cli.Exit(err, exitConfig)
			}
			cfg.HostID = id
		}
		if c.String("store") == "" {
			return cfg, d, closeFn, cli.Exit("--store: the pool provider needs the store", exitConfig)
		}
		st, err := cliflags.OpenStore(c)
		if err != nil {
			return cfg, d, closeFn, cli.Exit(err, exitConfig)
		}
		d.Store = st
		if len(cfg.Volumes) == 0 && !needMount {
			// renew: the volume identity.env names; no need to read the
			// spec (the store may be unreachable: renew must still be
			// able to decide to fence).
			if v, err := volume.IdentityVolume(cfg.Root); err == nil {
				cfg.Volumes = []string{v}
			}
		}
		if len(cfg.Volumes) == 0 {
			spec, err := clusterspec.Load(ctx, st)
			if err != nil {
				return cfg, d, closeFn, cli.Exit(fmt.Errorf("--volumes not given and the spec could not be read: %w", err), storeCode(err))
			}
			cfg.Volumes = volume.Names(int(spec.Spec.MemberCount))
		}
		switch c.String("driver") {
		case "loopfile":
			size, err := parseSize(c.String("size"))
			if err != nil {
				return cfg, d, closeFn, cli.Exit(fmt.Errorf("--size: %w", err), exitConfig)
			}
			if size < minSize {
				return cfg, d, closeFn, cli.Exit(fmt.Sprintf("--size %s: at least 256M (etcd preallocates its WAL in 64 MiB files, two at a time)", c.String("size")), exitConfig)
			}
			d.Driver = &volume.Loopfile{Dir: c.String("loopfile-dir"), Size: size, Log: log}
		default:
			return cfg, d, closeFn, cli.Exit(fmt.Sprintf("--driver %q: want loopfile", c.String("driver")), exitConfig)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, d, closeFn, cli.Exit(err, exitConfig)
	}
	if !needMount || cfg.Provider == volume.ProviderNone {
		return cfg, d, closeFn, nil
	}
	switch c.String("mounter") {
	case "plain":
		d.Mounter = volume.PlainMounter{}
	case "systemd":
		conn, err := sd.NewSystemConnectionContext(ctx)
		if err != nil {
			return cfg, d, closeFn, cli.Exit(fmt.Errorf("systemd: connect to the system bus: %w", err), exitFailed)
		}
		d.Mounter = &volume.SystemdMounter{Conn: conn}
		closeFn = conn.Close
	default:
		return cfg, d, closeFn, cli.Exit(fmt.Sprintf("--mounter %q: want systemd or plain", c.String("mounter")), exitConfig)
	}
	return cfg, d, closeFn, nil
}

func attach(c *cli.Context) error {
	log := cliflags.Logger(c).With("component", "volume-attach")
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	cfg, d, closeFn, err := setup(ctx, c, log, true)
	defer closeFn()
	if err != nil {
		return err
	}
	if _, err := volume.Attach(ctx, cfg, d); err != nil {
		log.Error("attach failed", "err", err)
		return cli.Exit(err, code(err))
	}
	return nil
}

func renew(c *cli.Context) error {
	log := cliflags.Logger(c).With("component", "volume-renew")
	// A renewal that hangs on an unreachable store must end within half a
	// renewal interval, so the next one can still fence before the lease
	// runs out.
	ctx, cancel := context.WithTimeout(c.Context, min(c.Duration("timeout"), volume.RenewEvery(c.Duration("lease"))/2))
	defer cancel()
	cfg, d, closeFn, err := setup(ctx, c, log, false)
	defer closeFn()
	if err != nil {
		return err
	}
	claim, err := volume.Renew(ctx, cfg, d)
	switch {
	case err != nil:
		log.Error("renew failed", "err", err)
		if fence, reason := volume.MustFence(cfg, err, time.Now()); fence {
			if ferr := fenceHost(context.WithoutCancel(ctx), reason, log); ferr != nil {
				log.Error("fencing incomplete: stop etcd and unmount /var/lib/etcd by hand", "err", ferr)
			}
		}
		return cli.Exit(err, code(err))
	case claim == nil:
		log.Debug("nothing to renew")
	default:
		log.Info("lease renewed", "volume", claim.Volume, "expires", claim.Expires, "generation", claim.Generation)
	}
	return nil
}

// fenceHost stops etcd and the volume's mount over D-Bus.
func fenceHost(ctx context.Context, reason string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	m, err := systemd.New(ctx, "")
	if err != nil {
		return err
	}
	defer m.Conn.Close()
	return volume.Fence(ctx, func(ctx context.Context, unit string) error {
		err := (&systemd.Manager{Conn: m.Conn, Unit: unit}).Stop(ctx)
		var de dbus.Error
		if errors.As(err, &de) && de.Name == "org.freedesktop.systemd1.NoSuchUnit" {
			return nil // not installed on this host: nothing to stop
		}
		return err
	}, reason, log)
}

func code(err error) int {
	switch {
	case errors.Is(err, volume.ErrConfig):
		return exitConfig
	case errors.Is(err, volume.ErrNoFreeVolume), errors.Is(err, volume.ErrLost):
		return exitHeld
	case errors.Is(err, volume.ErrInUse), errors.Is(err, volume.ErrNotExt4):
		return exitInUse
	}
	return storeCode(err)
}

func storeCode(err error) int {
	if errors.Is(err, volume.ErrStore) || errors.Is(err, store.ErrUnreachable) ||
		errors.Is(err, store.ErrAccessDenied) || errors.Is(err, store.ErrNoBucket) {
		return exitStore
	}
	return exitFailed
}

// minSize is the smallest volume etcd runs on: a 64 MiB WAL file, the
// next one preallocated, and the database.
const minSize = 256 << 20

// parseSize reads 8G, 512M, 1T or plain bytes (powers of 1024).
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	if n := len(s); n > 0 {
		if i := strings.IndexByte("KMGT", s[n-1]); i >= 0 {
			mult = int64(1) << (10 * (i + 1))
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want a positive size such as 8G", s)
	}
	return v * mult, nil
}
