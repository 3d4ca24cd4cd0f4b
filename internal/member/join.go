package member

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/service"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Config is one host's view of itself.
type Config struct {
	Name string // member name, e.g. etcd-b (from /run/etcdadm/identity.env)
	// Host is how peers and clients reach this host: an address, or a DNS
	// name. When empty: Name.suffix with the cluster's DNS suffix set, else
	// the first of IPs.
	Host string
	// ListenHost is the address etcd listens on ("" = every address).
	ListenHost string
	// IPs are this host's addresses, for certificate SANs.
	IPs []net.IP
	// ClientPort and PeerPort override the cluster settings (tests that
	// run several members on one loopback address).
	ClientPort, PeerPort int
	// Root prefixes every host path (tests run in a temp dir).
	Root    string
	DataDir string // default <root>/var/lib/etcd
	EnvFile string // default <root>/etc/etcd/etcd.env
	PKIDir  string // default <root>/etc/etcd/pki
	Owner   pki.Owner
	// CertValidity is the lifetime of the member's certificates (0: a
	// year); renewal keeps it.
	CertValidity time.Duration
	// Timeout bounds every wait: for founders to register, for etcd to
	// become ready, for a promotion.
	Timeout time.Duration
	// Poll is the interval of those waits.
	Poll time.Duration
	// FoundGrace is how long founders wait for every planned member to
	// register before founding with a quorum of them (the rest join
	// later). Hosts booted together found the full cluster at once; a
	// missing host does not block founding.
	FoundGrace time.Duration
	// ReplaceAfter is how long a voting member of a full cluster must
	// stay unreachable before a standby host replaces it (0: never; the
	// command's default is DefaultReplaceAfter). ReplaceProbe is how
	// often the standby looks at it meanwhile (default 10 s).
	ReplaceAfter, ReplaceProbe time.Duration
}

// Deps are the outside world.
type Deps struct {
	Store   store.Store
	Service service.Manager
	Log     *slog.Logger
	Now     func() time.Time
	// Held, when set, says why no member may be replaced now (an
	// operator's request not finished; "" when one may): the caller
	// knows the requests, member does not.
	Held func(context.Context) (string, error)
}

// Result says what a run did.
type Result struct {
	Action Action
	Reason string
	Member Peer
	// full: standing by because the cluster has its members.
	full bool
}

func (c *Config) defaults() {
	if c.Root == "" {
		c.Root = "/"
	}
	if c.DataDir == "" {
		c.DataDir = filepath.Join(c.Root, "var/lib/etcd")
	}
	if c.EnvFile == "" {
		c.EnvFile = filepath.Join(c.Root, "etc/etcd/etcd.env")
	}
	if c.PKIDir == "" {
		c.PKIDir = filepath.Join(c.Root, "etc/etcd/pki")
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Poll == 0 {
		c.Poll = time.Second
	}
	if c.FoundGrace == 0 {
		c.FoundGrace = time.Minute
	}
	if c.ReplaceProbe == 0 {
		c.ReplaceProbe = 10 * time.Second
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Name == "" {
		return fmt.Errorf("member join: no member name (set --name, or run etcd-volume-attach first to write /run/etcdadm/identity.env)")
	}
	if err := pki.CheckMemberName(c.Name); err != nil {
		return fmt.Errorf("member join: %w", err)
	}
	if c.CertValidity != 0 {
		if err := pki.CheckLeafValidity(c.CertValidity); err != nil {
			return fmt.Errorf("member join: --cert-validity (ETCDADM_CERT_VALIDITY): %w", err)
		}
	}
	return nil
}

// joiner carries one run's state.
type joiner struct {
	cfg     Config
	d       Deps
	cluster clusterspec.Cluster
	me      Peer
	tls     *tls.Config
	log     *slog.Logger
	// extraEnv is added to etcd's settings for one start (a forced new
	// cluster when recovering from a lost majority).
	extraEnv map[string]string
}

// Run decides and does what this host's member needs.
func Run(ctx context.Context, cfg Config, d Deps) (Result, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	j, err := newJoiner(ctx, cfg, d)
	if errors.Is(err, clusterspec.ErrNotSeeded) {
		if why := clusterRemains(ctx, cfg, d.Store); why != "" {
			return Result{}, fmt.Errorf("member join: %w: %s; refusing to found a new, empty cluster over it. Restore control/ from the bucket's versioning, or declare the same cluster again with 'etcdadm seed --force --members N --version V' (its hosts then rejoin with their data)", ErrControlLost, why)
		}
	}
	if err != nil {
		return Result{}, err
	}
	if err := Register(ctx, d.Store, j.withTime(j.me)); err != nil {
		return Result{}, err
	}
	if err := j.useClusterVersion(ctx); err != nil {
		return Result{}, err
	}
	res, err := j.run(ctx)
	res.Member = j.me
	return res, err
}

// RunPaused is member join while the operator holds the automation: no
// membership change, no founding; a host with data of its own gets its
// etcd started on it (a reboot during the pause keeps its member), any
// other host waits.
func RunPaused(ctx context.Context, cfg Config, d Deps, why string) (Result, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	j, err := newJoiner(ctx, cfg, d)
	if err != nil {
		return Result{}, err
	}
	res := Result{Action: Paused, Reason: why + "; nothing changed", Member: j.me}
	if !j.hasData() {
		return res, nil
	}
	if err := j.startEtcd(ctx, "existing", j.me.Name+"="+j.me.PeerURL, j.cluster.Settings.ClusterToken); err != nil {
		return res, err
	}
	res.Reason = why + "; etcd started on this host's own data, membership unchanged"
	return res, nil
}

// clusterRemains says what shows a cluster exists without a spec: data
// on this host, hosts in the peer registry, a founding plan ("" if none).
func clusterRemains(ctx context.Context, cfg Config, st store.Store) string {
	if des, err := os.ReadDir(filepath.Join(cfg.DataDir, "member", "wal")); err == nil && len(des) > 0 {
		return "this host holds etcd data in " + cfg.DataDir
	}
	if peers, err := Peers(ctx, st); err == nil && len(peers) > 0 {
		return fmt.Sprintf("%d hosts are in the peer registry (%s)", len(peers), names(peers))
	}
	if ok, err := exists(ctx, st, planKey); err == nil && ok {
		return "a founding plan exists (" + planKey + ")"
	}
	return ""
}

func newJoiner(ctx context.Context, cfg Config, d Deps) (*joiner, error) {
	cluster, err := clusterspec.Load(ctx, d.Store)
	if err != nil {
		return nil, err
	}
	j := &joiner{cfg: cfg, d: d, cluster: cluster, log: d.Log.With("member", cfg.Name)}
	j.me = j.self()
	if u, _ := url.Parse(j.me.PeerURL); u == nil || u.Hostname() == "" {
		return nil, fmt.Errorf("member join: no address for this host: set --host or --ip, or a DNS suffix in the cluster settings")
	}
	if err := j.setupTLS(ctx); err != nil {
		return nil, err
	}
	return j, nil
}

// withTime stamps this host's registry entry, with the etcd versions it
// has (the planner offers only versions every host can run).
func (j *joiner) withTime(p Peer) Peer { return Stamp(p, j.cfg.Root, j.d.Now()) }

// Stamp dates a registry entry and lists the etcd versions the host under
// root has.
func Stamp(p Peer, root string, now time.Time) Peer {
	p.Updated = now.UTC()
	if vs, err := etcdbin.HostDir(root).Local(); err == nil {
		for _, v := range vs {
			p.Versions = append(p.Versions, v.String())
		}
	}
	return p
}

func (j *joiner) self() Peer {
	s := j.cluster.Settings
	host := j.cfg.Host
	if host == "" && s.DNSSuffix != "" {
		host = j.cfg.Name + "." + s.DNSSuffix
	}
	if host == "" && len(j.cfg.IPs) > 0 {
		host = j.cfg.IPs[0].String()
	}
	cp, pp := s.ClientPort, s.PeerPort
	if j.cfg.ClientPort != 0 {
		cp = j.cfg.ClientPort
	}
	if j.cfg.PeerPort != 0 {
		pp = j.cfg.PeerPort
	}
	scheme := "https"
	if s.TLS == "insecure" {
		scheme = "http"
	}
	return Peer{
		Name:      j.cfg.Name,
		PeerURL:   scheme + "://" + net.JoinHostPort(host, strconv.Itoa(pp)),
		ClientURL: scheme + "://" + net.JoinHostPort(host, strconv.Itoa(cp)),
	}
}

func (j *joiner) hasData() bool {
	des, err := os.ReadDir(filepath.Join(j.cfg.DataDir, "member", "wal"))
	return err == nil && len(des) > 0
}

func (j *joiner) run(ctx context.Context) (Result, error) {
	created, err := exists(ctx, j.d.Store, etcdmanager.ClusterCreatedKey)
	if err != nil {
		return Result{}, err
	}
	if !created {
		plan, err := j.awaitPlan(ctx)
		if err != nil {
			return Result{}, err
		}
		if plan != nil && plan.has(j.me.Name) {
			return j.found(ctx, plan)
		}
		if plan != nil {
			j.log.Info("the cluster is being founded without this member; waiting for it to come up, then joining", "initialCluster", plan.InitialCluster())
			if err := j.awaitCreated(ctx); err != nil {
				return Result{}, err
			}
		}
	}
	return j.existing(ctx)
}
