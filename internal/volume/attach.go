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
	"sync"
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
	// EtcdDial: see Pool.Etcd (claiming); nil to go by the store alone.
	EtcdDial EtcdDialer
	// Etcd is this host's own member's claims (renewing); nil when it
	// has none yet. Endpoints are its client URLs (Pool.Endpoints).
	Etcd      EtcdClaims
	Endpoints []string
}

func (d Deps) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
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
	return &Pool{Store: d.Store, HostID: c.HostID, Lease: c.Lease, Now: d.Now, Log: d.Log, Attempts: d.Attempts, Backoff: d.Backoff, WaitForFree: d.WaitForFree, Etcd: d.EtcdDial, Endpoints: d.Endpoints}
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

// Renewal is what one renewal found and decided.
type Renewal struct {
	Volume      string
	Store, Etcd SourceResult
	Verdict     Verdict
}

// Renew renews this host's pool claim, on the volume identity.env names,
// in the store and in etcd (d.Etcd) at once, records what each confirmed
// in ClaimFile and decides what the host must do (Decide). It returns
// nil, nil for other providers or before a volume was attached; an error
// only when it cannot decide.
func Renew(ctx context.Context, cfg Config, d Deps) (*Renewal, error) {
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
	path := cfg.path(ClaimFile)
	rec, recErr := readClaimRecord(path)
	var last *Claim
	if recErr == nil && rec.Volume == vol {
		last = &rec.Claim
	} else {
		rec = claimRecord{Claim: Claim{Volume: vol}}
	}
	now := d.now()
	r := &Renewal{Volume: vol, Etcd: SourceResult{State: Unreachable, Err: errors.New("this host has no etcd client yet")}}
	var stClaim Claim
	var wg sync.WaitGroup
	wg.Go(func() {
		c, err := cfg.pool(d).Renew(ctx, vol, last)
		switch {
		case err == nil:
			stClaim, r.Store = c, SourceResult{State: Confirmed, Until: c.Expires}
		case errors.Is(err, ErrLost):
			r.Store = SourceResult{State: Lost, Err: err}
		default:
			r.Store = SourceResult{State: Unreachable, Err: err}
		}
	})
	if d.Etcd != nil && last != nil {
		wg.Go(func() { r.Etcd = renewEtcd(ctx, d.Etcd, *last, cfg.Lease, now) })
	}
	wg.Wait()
	if r.Store.State == Confirmed && d.Etcd != nil && r.Etcd.State != Confirmed {
		// The store, the authority, confirms: etcd holds this claim from
		// now on, over whatever it held.
		r.Etcd = installEtcd(ctx, d.Etcd, stClaim)
	}
	if r.Store.State == Confirmed {
		rec.Claim = stClaim
	}
	// Decided as of now, after the calls: they may have hung for a while.
	r.Verdict = Decide(RenewEvery(cfg.Lease), r.Store, r.Etcd, rec.Confirmed, Fenced(cfg.Root), d.now())
	if r.Store.State == Confirmed {
		rec.Confirmed.Store = r.Store.Until
	}
	switch r.Etcd.State {
	case Confirmed:
		rec.Confirmed.Etcd = r.Etcd.Until
	case Unconfirmed, Lost:
		rec.Confirmed.Etcd = time.Time{}
	}
	rec.Source, rec.SourceTime = r.Verdict.Source, now
	if err := writeClaimRecord(path, rec); err != nil {
		return r, fmt.Errorf("renew %s: %w", vol, err)
	}
	return r, nil
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
