package volume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/service/systemd"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Drivers and mounters (--driver, --mounter).
const (
	DriverLoopfile = "loopfile"
	MounterSystemd = "systemd"
	MounterPlain   = "plain"
)

// MinSize is the smallest volume etcd runs on: a 64 MiB WAL file, the
// next one preallocated, and the database.
const MinSize = 256 << 20

// Command is etcd-volume-attach as its flags ask: Config plus how pool
// volumes are attached and how the volume is mounted.
type Command struct {
	Config
	// Driver attaches pool volumes: DriverLoopfile, with LoopfileDir (the
	// <volume>.img files, shared by all hosts) and Size (of new images:
	// 8G, 512M, ...; smaller ones are grown).
	Driver, LoopfileDir, Size string
	Mounter                   string // MounterSystemd or MounterPlain
	// Wait: when every volume is held, wait up to Timeout for the first
	// lease to run out.
	Wait    bool
	Timeout time.Duration
	// MetricsFile: a Prometheus textfile of the pool lease (WriteMetrics)
	// after every claim or renewal; "" for none.
	MetricsFile string
}

// metrics writes MetricsFile, if set, after a pool claim or renewal.
func (cmd Command) metrics(cfg Config, runErr error, log *slog.Logger) {
	if cmd.MetricsFile == "" || cfg.Provider != ProviderPool {
		return
	}
	if err := WriteMetrics(cmd.MetricsFile, cfg, runErr, time.Now()); err != nil {
		log.Warn("could not write metrics", "err", err)
	}
}

// Attach runs etcd-volume-attach: give this host its identity and mount
// its volume, within Timeout. st is the store (the pool provider only).
func (cmd Command) Attach(ctx context.Context, st store.Store, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, cmd.Timeout)
	defer cancel()
	cfg, d, closeFn, err := cmd.setup(ctx, st, log, true)
	defer closeFn()
	if err != nil {
		return err
	}
	_, err = Attach(ctx, cfg, d)
	cmd.metrics(cfg, err, log)
	if err != nil {
		log.Error("attach failed", "err", err)
		return err
	}
	return nil
}

// Renew runs "etcd-volume-attach renew": renew this host's pool lease,
// and fence the host (MustFence) when it cannot.
func (cmd Command) Renew(ctx context.Context, st store.Store, log *slog.Logger) error {
	// A renewal that hangs on an unreachable store must end within half a
	// renewal interval, so the next one can still fence before the lease
	// runs out.
	ctx, cancel := context.WithTimeout(ctx, min(cmd.Timeout, RenewEvery(cmd.Lease)/2))
	defer cancel()
	cfg, d, closeFn, err := cmd.setup(ctx, st, log, false)
	defer closeFn()
	if err != nil {
		return err
	}
	claim, err := Renew(ctx, cfg, d)
	cmd.metrics(cfg, err, log)
	switch {
	case err != nil:
		log.Error("renew failed", "err", err)
		if fence, reason := MustFence(cfg, err, time.Now()); fence {
			if ferr := fenceHost(context.WithoutCancel(ctx), reason, log); ferr != nil {
				log.Error("fencing incomplete: stop etcd and unmount /var/lib/etcd by hand", "err", ferr)
			}
		}
		return err
	case claim == nil:
		log.Debug("nothing to renew")
	default:
		log.Info("lease renewed", "volume", claim.Volume, "expires", claim.Expires, "generation", claim.Generation)
	}
	return nil
}

// setup completes the configuration and builds the dependencies; close
// releases them.
func (cmd Command) setup(ctx context.Context, st store.Store, log *slog.Logger, needMount bool) (Config, Deps, func(), error) {
	cfg := cmd.Config
	// Store failures are retried until the context ends (Attempts 0).
	d := Deps{Log: log, WaitForFree: cmd.Wait}
	closeFn := func() {}
	if cfg.Provider == ProviderPool {
		if cfg.HostID == "" {
			id, err := HostID(cfg.Root)
			if err != nil {
				return cfg, d, closeFn, fmt.Errorf("%w: %w", ErrConfig, err)
			}
			cfg.HostID = id
		}
		if st == nil {
			return cfg, d, closeFn, fmt.Errorf("%w: --store: the pool provider needs the store", ErrConfig)
		}
		d.Store = st
		if len(cfg.Volumes) == 0 && !needMount {
			// renew: the volume identity.env names; no need to read the
			// spec (the store may be unreachable: renew must still be
			// able to decide to fence).
			if v, err := IdentityVolume(cfg.Root); err == nil {
				cfg.Volumes = []string{v}
			}
		}
		if len(cfg.Volumes) == 0 {
			spec, err := clusterspec.Load(ctx, st)
			if err != nil {
				return cfg, d, closeFn, fmt.Errorf("--volumes not given and the spec could not be read: %w", err)
			}
			cfg.Volumes = Names(int(spec.Spec.MemberCount))
		}
		switch cmd.Driver {
		case DriverLoopfile:
			size, err := ParseSize(cmd.Size)
			if err != nil {
				return cfg, d, closeFn, fmt.Errorf("%w: --size: %w", ErrConfig, err)
			}
			if size < MinSize {
				return cfg, d, closeFn, fmt.Errorf("%w: --size %s: at least 256M (etcd preallocates its WAL in 64 MiB files, two at a time)", ErrConfig, cmd.Size)
			}
			d.Driver = &Loopfile{Dir: cmd.LoopfileDir, Size: size, Log: log}
		default:
			return cfg, d, closeFn, fmt.Errorf("%w: --driver %q: want loopfile", ErrConfig, cmd.Driver)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, d, closeFn, err
	}
	if !needMount || cfg.Provider == ProviderNone {
		return cfg, d, closeFn, nil
	}
	switch cmd.Mounter {
	case MounterPlain:
		d.Mounter = PlainMounter{}
	case MounterSystemd:
		conn, err := sd.NewSystemConnectionContext(ctx)
		if err != nil {
			return cfg, d, closeFn, fmt.Errorf("systemd: connect to the system bus: %w", err)
		}
		d.Mounter = &SystemdMounter{Conn: conn}
		closeFn = conn.Close
	default:
		return cfg, d, closeFn, fmt.Errorf("%w: --mounter %q: want systemd or plain", ErrConfig, cmd.Mounter)
	}
	return cfg, d, closeFn, nil
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
	return Fence(ctx, func(ctx context.Context, unit string) error {
		err := (&systemd.Manager{Conn: m.Conn, Unit: unit}).Stop(ctx)
		var de dbus.Error
		if errors.As(err, &de) && de.Name == "org.freedesktop.systemd1.NoSuchUnit" {
			return nil // not installed on this host: nothing to stop
		}
		return err
	}, reason, log)
}

// ParseSize reads 8G, 512M, 1T or plain bytes (powers of 1024).
func ParseSize(s string) (int64, error) {
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
