package volume

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/envfile"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
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
	// EtcdEnv is member join's etcd.env (this member's client URLs);
	// EtcdCACert, EtcdCert and EtcdKey the client certificate a renewal
	// talks to its own member with. Missing or empty files: this host's
	// member has not joined yet, and the claim is renewed in the store
	// only.
	EtcdEnv, EtcdCACert, EtcdCert, EtcdKey string
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

// Renew runs "etcd-volume-attach renew": renew this host's pool claim
// in the store and in etcd, and fence the host, or bring it back, as
// Decide says. It fails when the claim is not confirmed.
func (cmd Command) Renew(ctx context.Context, st store.Store, log *slog.Logger) error {
	// A renewal that hangs on an unreachable store or etcd must end
	// within RenewTimeout, so the next one can still fence before the
	// claim could be taken (Decide counts on it).
	rctx, cancel := context.WithTimeout(ctx, min(cmd.Timeout, RenewTimeout(RenewEvery(cmd.Lease))))
	defer cancel()
	cfg, d, closeFn, err := cmd.setup(rctx, st, log, false)
	defer closeFn()
	if err != nil {
		return err
	}
	if cfg.Provider == ProviderPool {
		kv, eps, err := cmd.ownEtcd()
		if err != nil {
			log.Debug("no etcd client: renewing in the store only", "err", err)
		} else {
			defer kv.Close()
			d.Etcd, d.Endpoints = kv, eps
		}
	}
	r, err := Renew(rctx, cfg, d)
	if err != nil {
		cmd.metrics(cfg, err, log)
		log.Error("renew failed", "err", err)
		return err
	}
	if r == nil {
		cmd.metrics(cfg, nil, log)
		log.Debug("nothing to renew")
		return nil
	}
	v := r.Verdict
	attrs := []any{"volume", r.Volume, "confirmed_by", v.Source, "until", v.Until, "store", r.Store.State, "etcd", r.Etcd.State}
	if r.Store.Err != nil {
		attrs = append(attrs, "store_err", r.Store.Err)
	}
	if r.Etcd.Err != nil {
		attrs = append(attrs, "etcd_err", r.Etcd.Err)
	}
	// Acting on the host must not be cut short by the renewal's deadline.
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 4*time.Minute)
	defer acancel()
	err = cmd.act(actx, cfg, r, attrs, log)
	cmd.metrics(cfg, err, log)
	return err
}

// act does what a renewal's verdict says.
func (cmd Command) act(actx context.Context, cfg Config, r *Renewal, attrs []any, log *slog.Logger) error {
	v := r.Verdict
	switch v.Action {
	case ActKeep:
		if v.Source == "" {
			log.Warn("claim not confirmed by the store nor by etcd this time; still live", attrs...)
			return fmt.Errorf("renew %s: %w: not confirmed (store: %s, etcd: %s)", r.Volume, ErrStore, r.Store.State, r.Etcd.State)
		}
		if r.Store.State != Confirmed {
			log.Warn("claim confirmed through etcd; the store could not be renewed", attrs...)
		} else {
			log.Info("claim renewed", attrs...)
		}
		return nil
	case ActStayFenced:
		log.Warn("fenced: "+v.Reason, attrs...)
	case ActFence:
		log.Error("renew: must fence", attrs...)
		if ferr := cmd.units(actx, func(u Units) error { return Fence(actx, cfg.Root, u, v.Reason, time.Now(), log) }); ferr != nil {
			log.Error("fencing incomplete: stop etcd and unmount /var/lib/etcd by hand", "err", ferr)
		}
	case ActUnfence:
		if uerr := cmd.units(actx, func(u Units) error { return Unfence(actx, cfg.Root, u, log) }); uerr != nil {
			log.Error("un-fencing failed; the next renewal tries again", "err", uerr)
			return uerr
		}
		return nil
	}
	if v.Lost {
		return fmt.Errorf("renew %s: %w: %s", r.Volume, ErrLost, v.Reason)
	}
	return fmt.Errorf("renew %s: %w: %s", r.Volume, ErrFenced, v.Reason)
}

// ownEtcd opens the claims in this host's own member, at the client URLs
// etcd.env advertises, with the renewal's client certificate.
func (cmd Command) ownEtcd() (EtcdClaims, []string, error) {
	vars, err := envfile.Read(cmd.EtcdEnv)
	if err != nil {
		return nil, nil, err
	}
	var eps []string
	for _, ep := range strings.Split(vars["ETCD_ADVERTISE_CLIENT_URLS"], ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return nil, nil, fmt.Errorf("%s: no ETCD_ADVERTISE_CLIENT_URLS", cmd.EtcdEnv)
	}
	ec := etcdclient.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Insecure: strings.HasPrefix(eps[0], "http://")}
	if !ec.Insecure {
		ec.CACert, ec.Cert, ec.Key = cmd.EtcdCACert, cmd.EtcdCert, cmd.EtcdKey
	}
	cli, err := etcdclient.New(ec)
	if err != nil {
		return nil, nil, err
	}
	return &EtcdKV{Cli: cli}, addressURLs(eps), nil
}

// addressURLs replaces host names in urls by the addresses they resolve
// to here: a replacement host asks etcd before its DNS registrar runs, so
// the claims record where the members are, not what they are called
// (their server certificates name their addresses too).
func addressURLs(urls []string) []string {
	var out []string
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" || u.Port() == "" || net.ParseIP(u.Hostname()) != nil {
			out = append(out, raw)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		addrs, err := net.DefaultResolver.LookupHost(ctx, u.Hostname())
		cancel()
		if err != nil || len(addrs) == 0 {
			out = append(out, raw)
			continue
		}
		for _, a := range addrs {
			v := *u
			v.Host = net.JoinHostPort(a, u.Port())
			out = append(out, v.String())
		}
	}
	return out
}

// storeCADialer opens claims in etcd for a host that has no certificate
// yet (a replacement claiming a volume): its client certificate is made
// in memory, signed by the CA in the store, and lives one hour.
func storeCADialer(st store.Store) EtcdDialer {
	return func(ctx context.Context, eps []string) (EtcdClaims, error) {
		ec := etcdclient.Config{Endpoints: eps, DialTimeout: 3 * time.Second, Insecure: true}
		for _, ep := range eps {
			ec.Insecure = ec.Insecure && strings.HasPrefix(ep, "http://")
		}
		if !ec.Insecure {
			ca, err := pki.LoadCA(ctx, st)
			if err != nil {
				return nil, err
			}
			certPEM, keyPEM, err := ca.IssueClient("etcd-volume-attach", time.Hour)
			if err != nil {
				return nil, err
			}
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				return nil, fmt.Errorf("etcd client certificate: %w", err)
			}
			ec.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
		}
		cli, err := etcdclient.New(ec)
		if err != nil {
			return nil, err
		}
		return &EtcdKV{Cli: cli}, nil
	}
}

// setup completes the configuration and builds the dependencies; close
// releases them.
func (cmd Command) setup(ctx context.Context, st store.Store, log *slog.Logger, needMount bool) (Config, Deps, func(), error) {
	cfg := cmd.Config
	// Store failures are retried until the context ends (Attempts 0).
	d := Deps{Log: log, WaitForFree: cmd.Wait}
	if needMount && st != nil {
		d.EtcdDial = storeCADialer(st)
	}
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

// units runs fn with the host's systemd over D-Bus.
func (cmd Command) units(ctx context.Context, fn func(Units) error) error {
	m, err := systemd.New(ctx, "")
	if err != nil {
		return err
	}
	defer m.Conn.Close()
	return fn(dbusUnits{m.Conn})
}

// dbusUnits is Units over systemd's D-Bus API.
type dbusUnits struct{ conn *sd.Conn }

var _ Units = dbusUnits{}

func (u dbusUnits) Active(ctx context.Context, unit string) (bool, error) {
	return (&systemd.Manager{Conn: u.conn, Unit: unit}).Active(ctx)
}

func (u dbusUnits) Stop(ctx context.Context, unit string) error {
	err := (&systemd.Manager{Conn: u.conn, Unit: unit}).Stop(ctx)
	var de dbus.Error
	if errors.As(err, &de) && de.Name == "org.freedesktop.systemd1.NoSuchUnit" {
		return nil // not installed on this host: nothing to stop
	}
	return err
}

func (u dbusUnits) Start(ctx context.Context, unit string, wait bool) error {
	if wait {
		return (&systemd.Manager{Conn: u.conn, Unit: unit}).Start(ctx, false)
	}
	if _, err := u.conn.StartUnitContext(ctx, unit, "replace", nil); err != nil {
		return fmt.Errorf("systemd: start %s: %w", unit, err)
	}
	return nil
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
