package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/envfile"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Providers.
const (
	ProviderNone  = "none"
	ProviderLocal = "local"
	ProviderPool  = "pool"
)

// Host paths, below Config.Root.
const (
	DataDir      = "/var/lib/etcd"
	IdentityFile = "/run/etcdadm/identity.env"
	// MountOptions keep anything on the data volume from running.
	MountOptions = "noatime,nodev,nosuid,noexec"
)

// Config is what etcd-volume-attach was asked to do.
type Config struct {
	Provider string
	// Name and Device: the local provider's member name and device (a
	// path, /dev/disk/by-label/..., /dev/disk/by-partlabel/...).
	Name, Device string
	// Volumes is the pool (etcd-a, etcd-b, ...).
	Volumes []string
	Lease   time.Duration
	HostID  string
	// Root prefixes every host path (tests).
	Root string
	// Mountinfo is the mount table read to refuse double mounts; default
	// /proc/self/mountinfo.
	Mountinfo string
}

// Validate reports what is missing or contradictory, naming the flag.
func (c Config) Validate() error {
	var errs []error
	switch c.Provider {
	case ProviderNone:
	case ProviderLocal:
		if c.Device == "" {
			errs = append(errs, errors.New("--device: the local provider needs the data device"))
		}
		if err := CheckName(c.Name); err != nil {
			errs = append(errs, fmt.Errorf("--name: %w", err))
		}
	case ProviderPool:
		if len(c.Volumes) == 0 {
			errs = append(errs, errors.New("--volumes: the pool is empty (and the spec gave no memberCount)"))
		}
		for _, v := range c.Volumes {
			if err := CheckName(v); err != nil {
				errs = append(errs, fmt.Errorf("--volumes: %w", err))
			}
		}
		if c.Lease < 10*time.Second {
			errs = append(errs, fmt.Errorf("--lease %s: at least 10s", c.Lease))
		}
		if c.HostID == "" {
			errs = append(errs, errors.New("--host-id: empty (no machine-id and no hostname?)"))
		}
	default:
		errs = append(errs, fmt.Errorf("--provider %q: want none, local or pool", c.Provider))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

func (c Config) path(p string) string { return filepath.Join(c.Root, p) }

// Deps are the outside world Attach works with. Store and Driver are only
// needed by the pool provider.
type Deps struct {
	Store   store.Store
	Driver  Driver
	Mounter Mounter
	Log     *slog.Logger
	Now     func() time.Time
	// Attempts, Backoff and WaitForFree: see Pool.
	Attempts    int
	Backoff     time.Duration
	WaitForFree bool
}

// Identity is the member this host is, written to identity.env.
type Identity struct {
	Member string
	Volume string
	Device string
	Claim  *Claim // pool only
}

// Env renders identity.env.
func (id Identity) Env() []byte {
	return []byte("# Written by etcd-volume-attach: this host's member identity.\n" +
		envfile.Line("ETCDADM_MEMBER_NAME", id.Member) +
		envfile.Line("ETCDADM_VOLUME", id.Volume) +
		envfile.Line("ETCDADM_DEVICE", id.Device))
}

func (c Config) pool(d Deps) *Pool {
	return &Pool{Store: d.Store, HostID: c.HostID, Lease: c.Lease, Now: d.Now, Log: d.Log, Attempts: d.Attempts, Backoff: d.Backoff, WaitForFree: d.WaitForFree}
}

// Attach gives this host its identity and mounts its volume. With the
// none provider it does nothing and returns nil. Safe to re-run: a volume
// already mounted at the data directory is kept.
func Attach(ctx context.Context, cfg Config, d Deps) (*Identity, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	var id Identity
	switch cfg.Provider {
	case ProviderNone:
		d.Log.Info("provider none: no volume, member-join names the member after the host")
		return nil, nil
	case ProviderLocal:
		dev, err := filepath.EvalSymlinks(cfg.Device)
		if err != nil {
			return nil, fmt.Errorf("attach: device %s: %w", cfg.Device, err)
		}
		id = Identity{Member: cfg.Name, Volume: cfg.Name, Device: dev}
	case ProviderPool:
		if d.Store == nil || d.Driver == nil {
			return nil, fmt.Errorf("attach: %w: the pool provider needs a store and a driver", ErrConfig)
		}
		c, err := cfg.pool(d).Acquire(ctx, cfg.Volumes)
		if err != nil {
			return nil, fmt.Errorf("attach: %w", err)
		}
		crashpoint.Here(crashpoint.VolumeClaimed)
		dev, err := d.Driver.Attach(ctx, c.Volume)
		if err != nil {
			return nil, fmt.Errorf("attach %s: %w", c.Volume, err)
		}
		id = Identity{Member: c.Volume, Volume: c.Volume, Device: dev, Claim: &c}
	}
	if err := prepare(ctx, cfg, d, id); err != nil {
		return nil, fmt.Errorf("attach %s: %w", id.Volume, err)
	}
	if err := writeAtomic(cfg.path(IdentityFile), id.Env(), 0o644); err != nil {
		return nil, fmt.Errorf("attach %s: %w", id.Volume, err)
	}
	crashpoint.Here(crashpoint.VolumeIdentity)
	if id.Claim != nil {
		if err := writeClaimFile(cfg.path(ClaimFile), *id.Claim); err != nil {
			return nil, fmt.Errorf("attach %s: %w", id.Volume, err)
		}
	}
	d.Log.Info("attached", "member", id.Member, "volume", id.Volume, "device", id.Device, "mount", cfg.path(DataDir))
	return &id, nil
}

// prepare formats a blank device, checks it, grows it and mounts it.
func prepare(ctx context.Context, cfg Config, d Deps, id Identity) error {
	if d.Mounter == nil {
		return fmt.Errorf("%w: no mounter", ErrConfig)
	}
	target := cfg.path(DataDir)
	mi := cfg.Mountinfo
	if mi == "" {
		mi = "/proc/self/mountinfo"
	}
	here, err := checkMounts(mi, id.Device, target)
	if err != nil {
		return err
	}
	if here {
		d.Log.Info("already mounted", "device", id.Device, "mount", target)
	} else {
		p, err := probeDevice(ctx, id.Device)
		if err != nil {
			return err
		}
		if p.Blank {
			d.Log.Info("device is blank: formatting", "device", id.Device, "label", id.Volume)
			if err := mkfs(ctx, id.Device, id.Volume); err != nil {
				return err
			}
			crashpoint.Here(crashpoint.VolumeFormat)
			if p, err = probeDevice(ctx, id.Device); err != nil {
				return err
			}
		}
		if p.Type != "ext4" || p.PTType != "" {
			what := p.Type
			if p.PTType != "" {
				what = "a " + p.PTType + " partition table"
			}
			return fmt.Errorf("%s holds %s: %w", id.Device, what, ErrNotExt4)
		}
		if p.Label != id.Volume {
			d.Log.Warn("file system label differs from the volume name", "device", id.Device, "label", p.Label, "volume", id.Volume)
		}
		corrected, err := fsck(ctx, id.Device)
		if err != nil {
			return err
		}
		if corrected {
			d.Log.Warn("e2fsck corrected errors", "device", id.Device)
		}
		if err := resize(ctx, id.Device); err != nil {
			return err
		}
		if err := d.Mounter.Mount(ctx, id.Device, target, "ext4", MountOptions); err != nil {
			return err
		}
		crashpoint.Here(crashpoint.VolumeMounted)
	}
	return nil
}

// Renew renews this host's pool lease, found in identity.env. It does
// nothing (nil, nil) for other providers or before a volume was attached.
func Renew(ctx context.Context, cfg Config, d Deps) (*Claim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Provider != ProviderPool {
		return nil, nil
	}
	vol, err := IdentityVolume(cfg.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	var last *Claim
	if c, err := readClaimFile(cfg.path(ClaimFile)); err == nil {
		last = &c
	}
	c, err := cfg.pool(d).Renew(ctx, vol, last)
	if err != nil {
		return nil, err
	}
	if err := writeClaimFile(cfg.path(ClaimFile), c); err != nil {
		return nil, fmt.Errorf("renew %s: %w", vol, err)
	}
	return &c, nil
}

// IdentityVolume is the volume identity.env (below root) names; an error
// wrapping fs.ErrNotExist before a volume was attached.
func IdentityVolume(root string) (string, error) {
	path := filepath.Join(root, IdentityFile)
	vars, err := envfile.Read(path)
	if err != nil {
		return "", err
	}
	if v := vars["ETCDADM_VOLUME"]; v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%s: no ETCDADM_VOLUME", path)
}

// writeAtomic replaces path with b, making its directory first.
func writeAtomic(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, b, mode, -1, -1)
}

// HostID is this host's id for claims: <root>/etc/machine-id, else the
// hostname.
func HostID(root string) (string, error) {
	if b, err := os.ReadFile(filepath.Join(root, "/etc/machine-id")); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" && id != "uninitialized" {
			return id, nil
		}
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("host id: no machine-id and no hostname: %w", err)
	}
	return h, nil
}
