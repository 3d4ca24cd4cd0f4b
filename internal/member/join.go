package member

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/service"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/uploader"
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
}

// Deps are the outside world.
type Deps struct {
	Store   store.Store
	Service service.Manager
	Log     *slog.Logger
	Now     func() time.Time
}

// Result says what a run did.
type Result struct {
	Action Action
	Reason string
	Member Peer
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
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Name == "" {
		return fmt.Errorf("member join: no member name (set --name, or run etcd-volume-attach first to write /run/etcdadm/identity.env)")
	}
	if strings.ContainsAny(c.Name, "=,/ ") {
		return fmt.Errorf("member join: member name %q may not contain '=', ',', '/' or spaces", c.Name)
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
	if err := register(ctx, d.Store, j.withTime(j.me)); err != nil {
		return Result{}, err
	}
	if err := j.useClusterVersion(ctx); err != nil {
		return Result{}, err
	}
	res, err := j.run(ctx)
	res.Member = j.me
	return res, err
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
func (j *joiner) withTime(p Peer) Peer {
	p.Updated = j.d.Now().UTC()
	if vs, err := etcdbin.HostDir(j.cfg.Root).Local(); err == nil {
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

func (j *joiner) setupTLS(ctx context.Context) error {
	if j.cluster.Settings.TLS == "insecure" {
		j.log.Warn("TLS is OFF for this cluster (settings tls=insecure): peer and client traffic is plaintext and unauthenticated")
		return nil
	}
	ca, err := pki.LoadCA(ctx, j.d.Store)
	if err != nil {
		return err
	}
	var dns []string
	if u, _ := url.Parse(j.me.PeerURL); u != nil && net.ParseIP(u.Hostname()) == nil {
		dns = append(dns, u.Hostname())
	}
	if sfx := j.cluster.Settings.DNSSuffix; sfx != "" {
		dns = append(dns, j.cfg.Name+"."+sfx)
	}
	ips := j.cfg.IPs
	if u, _ := url.Parse(j.me.PeerURL); u != nil {
		if ip := net.ParseIP(u.Hostname()); ip != nil {
			ips = append(ips, ip)
		}
	}
	if err := ca.IssueMember(ctx, j.cfg.PKIDir, pki.MemberRequest{Name: j.cfg.Name, DNSNames: dns, IPs: ips}, j.cfg.Owner); err != nil {
		return fmt.Errorf("member join: certificates: %w", err)
	}
	info := transport.TLSInfo{
		CertFile:      filepath.Join(j.cfg.PKIDir, "client.crt"),
		KeyFile:       filepath.Join(j.cfg.PKIDir, "client.key"),
		TrustedCAFile: filepath.Join(j.cfg.PKIDir, "ca.crt"),
	}
	j.tls, err = info.ClientConfig()
	if err != nil {
		return fmt.Errorf("member join: client TLS: %w", err)
	}
	return nil
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

func exists(ctx context.Context, st store.Store, key string) (bool, error) {
	_, err := st.Stat(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("member join: %w", err)
	}
	return true, nil
}

// awaitPlan returns the initial plan, fixing it once a quorum of the
// planned members has registered; nil if the cluster was created
// meanwhile by others.
func (j *joiner) awaitPlan(ctx context.Context) (*Plan, error) {
	want := int(j.cluster.Spec.MemberCount)
	quorum := want/2 + 1
	start := time.Now()
	deadline := start.Add(j.cfg.Timeout)
	lastReg := start
	for {
		plan, err := loadPlan(ctx, j.d.Store)
		if err != nil || plan != nil {
			return plan, err
		}
		if ok, err := exists(ctx, j.d.Store, etcdmanager.ClusterCreatedKey); err != nil || ok {
			return nil, err
		}
		peers, err := Peers(ctx, j.d.Store)
		if err != nil {
			return nil, err
		}
		var fresh []Peer
		for _, p := range peers {
			if j.d.Now().Sub(p.Updated) < 5*time.Minute {
				fresh = append(fresh, p)
			}
		}
		if len(fresh) >= want || (len(fresh) >= quorum && time.Since(start) >= j.cfg.FoundGrace) {
			p := Plan{Members: fresh[:min(len(fresh), want)], Token: j.cluster.Settings.ClusterToken, Created: j.d.Now().UTC()}
			return fixPlan(ctx, j.d.Store, p)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("member join: %w: %d of the %d members needed to found the cluster have registered (%s); start more hosts, or lower memberCount with 'etcdadm spec set'", ErrWaiting, len(fresh), quorum, names(fresh))
		}
		j.log.Info("waiting for founders to register", "registered", len(fresh), "planned", want, "quorum", quorum, "foundWithQuorumIn", (j.cfg.FoundGrace - time.Since(start)).Round(time.Second))
		if time.Since(lastReg) > 30*time.Second {
			if err := register(ctx, j.d.Store, j.withTime(j.me)); err != nil {
				return nil, err
			}
			lastReg = time.Now()
		}
		if err := sleep(ctx, j.cfg.Poll); err != nil {
			return nil, err
		}
	}
}

func (j *joiner) awaitCreated(ctx context.Context) error {
	deadline := time.Now().Add(j.cfg.Timeout)
	for {
		ok, err := exists(ctx, j.d.Store, etcdmanager.ClusterCreatedKey)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("member join: %w: the founders have not brought the cluster up", ErrWaiting)
		}
		if err := sleep(ctx, j.cfg.Poll); err != nil {
			return err
		}
	}
}

func names(ps []Peer) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return strings.Join(out, ", ")
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// found starts a founding member with the agreed plan, and marks the
// cluster created once it serves linearizable reads.
func (j *joiner) found(ctx context.Context, plan *Plan) (Result, error) {
	action := Found
	if j.hasData() {
		action = Rejoin
	}
	if err := j.startEtcd(ctx, "new", plan.InitialCluster(), plan.Token); err != nil {
		return Result{}, err
	}
	cli, err := j.client([]string{j.me.ClientURL})
	if err != nil {
		return Result{}, err
	}
	defer cli.Close()
	if err := j.waitLinearizable(ctx, cli); err != nil {
		return Result{}, err
	}
	created, err := json.Marshal(map[string]int64{"timestamp": j.d.Now().UnixNano()})
	if err != nil {
		return Result{}, err
	}
	if _, err := store.PutBytes(ctx, j.d.Store, etcdmanager.ClusterCreatedKey, created, store.PutOptions{IfNoneMatch: true}); err != nil && !errors.Is(err, store.ErrPrecondition) {
		return Result{}, fmt.Errorf("member join: mark cluster created: %w", err)
	}
	return Result{Action: action, Reason: "founding member of " + plan.InitialCluster()}, nil
}

// existing handles a cluster that exists (or is being founded by others).
func (j *joiner) existing(ctx context.Context) (Result, error) {
	eps, err := j.clusterEndpoints(ctx)
	if err != nil {
		return Result{}, err
	}
	cli, err := j.client(eps)
	if err != nil {
		return Result{}, err
	}
	defer cli.Close()

	if j.hasData() {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ml, err := j.memberList(lctx, cli)
		cancel()
		if err != nil {
			// Nobody answers: a full-cluster restart. Our data says who
			// we are; etcd ignores the initial-cluster flags.
			j.log.Info("cluster not reachable; starting on existing data", "err", err)
			if err := j.startEtcd(ctx, "existing", j.me.Name+"="+j.me.PeerURL, j.cluster.Settings.ClusterToken); err != nil {
				return Result{}, err
			}
			return Result{Action: Rejoin, Reason: "restart on existing data"}, nil
		}
		if m := j.find(ml.Members); m != nil {
			if err := j.startEtcd(ctx, "existing", j.initialCluster(ml.Members, m.ID), j.cluster.Settings.ClusterToken); err != nil {
				return Result{}, err
			}
			if err := j.promoteIfLearner(ctx, cli); err != nil {
				return Result{}, err
			}
			return Result{Action: Rejoin, Reason: "data directory holds this member"}, nil
		}
		if err := j.moveDataAside(); err != nil {
			return Result{}, err
		}
	}
	return j.joinLocked(ctx, cli)
}

// joinLocked adds this member, under the cluster-wide membership lock.
func (j *joiner) joinLocked(ctx context.Context, cli *clientv3.Client) (Result, error) {
	unlock, err := j.lock(ctx, cli)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	ml, err := j.memberList(ctx, cli)
	if err != nil {
		return Result{}, fmt.Errorf("member join: member list: %w", err)
	}
	action := Join
	if m := j.find(ml.Members); m != nil {
		if m.Name == "" {
			// Added earlier, never started (a crash after MemberAdd): start.
			j.log.Info("resuming a join: this member was added but never started", "id", fmt.Sprintf("%x", m.ID))
			if err := j.startEtcd(ctx, "existing", j.initialCluster(ml.Members, m.ID), j.cluster.Settings.ClusterToken); err != nil {
				return Result{}, err
			}
			if err := j.promoteIfLearner(ctx, cli); err != nil {
				return Result{}, err
			}
			return Result{Action: Join, Reason: "resumed after MemberAdd"}, nil
		}
		if err := j.removeStale(ctx, cli, ml.Members, m); err != nil {
			return Result{}, err
		}
		action = Replace
		if ml, err = j.memberList(ctx, cli); err != nil {
			return Result{}, fmt.Errorf("member join: member list: %w", err)
		}
	}
	voters := 0
	for _, m := range ml.Members {
		if m.IsLearner {
			return Result{Action: Standby, Reason: fmt.Sprintf("learner %s is catching up; one learner at a time", displayName(m))}, nil
		}
		voters++
	}
	if voters >= int(j.cluster.Spec.MemberCount) {
		return Result{Action: Standby, Reason: fmt.Sprintf("the cluster is full (%d of %d members)", voters, j.cluster.Spec.MemberCount)}, nil
	}
	var add *clientv3.MemberAddResponse
	err = j.retry(ctx, "add as learner", func() error {
		var err error
		add, err = cli.MemberAddAsLearner(ctx, []string{j.me.PeerURL})
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("member join: add %s as learner: %w", j.me.Name, err)
	}
	j.log.Info("added as learner", "id", fmt.Sprintf("%x", add.Member.ID))
	if err := j.startEtcd(ctx, "existing", j.initialCluster(add.Members, add.Member.ID), j.cluster.Settings.ClusterToken); err != nil {
		return Result{}, err
	}
	if err := j.promoteIfLearner(ctx, cli); err != nil {
		return Result{}, err
	}
	return Result{Action: action, Reason: fmt.Sprintf("member %d of %d", voters+1, j.cluster.Spec.MemberCount)}, nil
}

// removeStale removes this member's old incarnation (its data is gone),
// after a backup, and only if the cluster keeps quorum without it.
func (j *joiner) removeStale(ctx context.Context, cli *clientv3.Client, members []*etcdserverpb.Member, stale *etcdserverpb.Member) error {
	if !stale.IsLearner {
		voters, healthy := 0, 0
		for _, m := range members {
			if m.IsLearner || m.ID == stale.ID {
				continue
			}
			voters++
			if j.healthy(ctx, m) {
				healthy++
			}
		}
		if need := voters/2 + 1; healthy < need {
			return fmt.Errorf("member join: %w: removing %s leaves %d healthy of %d members, fewer than the %d needed; bring the others back first", ErrUnsafe, stale.Name, healthy, voters, need)
		}
		if _, err := j.backup(ctx, cli); err != nil {
			return fmt.Errorf("member join: backup before replacing %s: %w", stale.Name, err)
		}
	}
	j.log.Info("replacing: removing the stale member whose data is gone", "id", fmt.Sprintf("%x", stale.ID))
	if err := j.removeMember(ctx, cli, stale.ID); err != nil {
		return fmt.Errorf("member join: remove stale %s: %w", stale.Name, err)
	}
	return nil
}

func (j *joiner) backup(ctx context.Context, cli *clientv3.Client) (string, error) {
	ep := cli.Endpoints()[0]
	for _, e := range cli.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Status(sctx, e)
		cancel()
		if err == nil {
			ep = e
			break
		}
	}
	out, err := uploader.Run(ctx, uploader.Config{Endpoint: ep, AnyMember: true, SkipPrune: true, StaleAfter: time.Hour, Retention: backup.DefaultPolicy}, cli, j.d.Store, j.log, j.d.Now)
	if err != nil {
		return "", err
	}
	j.log.Info("backed up before a cluster change", "backup", out.Backup)
	return out.Backup, nil
}

func (j *joiner) healthy(ctx context.Context, m *etcdserverpb.Member) bool {
	if len(m.ClientURLs) == 0 {
		return false
	}
	c, err := j.client(m.ClientURLs)
	if err != nil {
		return false
	}
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = c.Status(sctx, m.ClientURLs[0])
	return err == nil
}

// find returns this member's entry: by name once started, by peer URL
// before.
func (j *joiner) find(ms []*etcdserverpb.Member) *etcdserverpb.Member {
	for _, m := range ms {
		if m.Name == j.me.Name {
			return m
		}
	}
	for _, m := range ms {
		for _, u := range m.PeerURLs {
			if u == j.me.PeerURL {
				return m
			}
		}
	}
	return nil
}

func displayName(m *etcdserverpb.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return fmt.Sprintf("%x (not started)", m.ID)
}

// initialCluster renders the membership a joining member must start
// with: every member's peer URLs, this member under its own name.
func (j *joiner) initialCluster(ms []*etcdserverpb.Member, self uint64) string {
	var parts []string
	for _, m := range ms {
		name := m.Name
		if m.ID == self {
			name = j.me.Name
		} else if name == "" {
			name = fmt.Sprintf("unstarted-%x", m.ID)
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, name+"="+u)
		}
	}
	// Sorted: the same membership renders the same env file, whoever
	// wrote it (a restore, a rejoin), so etcd is not restarted for order.
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func (j *joiner) moveDataAside() error {
	src := filepath.Join(j.cfg.DataDir, "member")
	dst := fmt.Sprintf("%s.removed-%s", src, j.d.Now().UTC().Format("20060102T150405Z"))
	j.log.Warn("this member was removed from the cluster; moving its old data aside (not deleted)", "from", src, "to", dst)
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("member join: move old data aside: %w", err)
	}
	return nil
}

// clusterEndpoints are the client URLs of the other registered members.
func (j *joiner) clusterEndpoints(ctx context.Context) ([]string, error) {
	peers, err := Peers(ctx, j.d.Store)
	if err != nil {
		return nil, err
	}
	var eps []string
	for _, p := range peers {
		if p.Name != j.me.Name {
			eps = append(eps, p.ClientURL)
		}
	}
	if len(eps) == 0 {
		eps = []string{j.me.ClientURL}
	}
	return eps, nil
}

func (j *joiner) client(eps []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: j.tls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("member join: etcd client: %w", err)
	}
	return cli, nil
}

// lock takes the membership lock. Taking it is retried: the client's
// endpoints come from the peer registry and may include a member that
// was just removed and is shutting down ("raft: stopped").
func (j *joiner) lock(ctx context.Context, cli *clientv3.Client) (func(), error) {
	return j.lockKey(ctx, cli, lockKey, "membership lock")
}

// lockKey takes one of the cluster-wide locks in etcd (its session ends
// with this process, so a crashed holder frees it within 30 s).
func (j *joiner) lockKey(ctx context.Context, cli *clientv3.Client, key, what string) (func(), error) {
	lctx, cancel := context.WithTimeout(ctx, j.cfg.Timeout)
	defer cancel()
	var sess *concurrency.Session
	var mu *concurrency.Mutex
	err := j.retry(lctx, what, func() error {
		var err error
		if sess, err = concurrency.NewSession(cli, concurrency.WithTTL(30), concurrency.WithContext(ctx)); err != nil {
			return err
		}
		mu = concurrency.NewMutex(sess, key)
		if err = mu.Lock(lctx); err != nil {
			sess.Close()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("member join: %s: %w", what, err)
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		mu.Unlock(uctx)
		sess.Close()
	}, nil
}

// startEtcd writes etcd's environment file and starts (or restarts) etcd.
func (j *joiner) startEtcd(ctx context.Context, state, initialCluster, token string) error {
	s := j.cluster.Settings
	listen := j.cfg.ListenHost
	if listen == "" {
		listen = "0.0.0.0"
	}
	scheme := "https"
	if s.TLS == "insecure" {
		scheme = "http"
	}
	pu, _ := url.Parse(j.me.PeerURL)
	cu, _ := url.Parse(j.me.ClientURL)
	vars := map[string]string{
		"ETCD_NAME":                        j.me.Name,
		"ETCD_DATA_DIR":                    j.cfg.DataDir,
		"ETCD_LISTEN_PEER_URLS":            scheme + "://" + net.JoinHostPort(listen, pu.Port()),
		"ETCD_LISTEN_CLIENT_URLS":          scheme + "://" + net.JoinHostPort(listen, cu.Port()),
		"ETCD_ADVERTISE_CLIENT_URLS":       j.me.ClientURL,
		"ETCD_INITIAL_ADVERTISE_PEER_URLS": j.me.PeerURL,
		"ETCD_INITIAL_CLUSTER":             initialCluster,
		"ETCD_INITIAL_CLUSTER_STATE":       state,
		"ETCD_INITIAL_CLUSTER_TOKEN":       token,
		"ETCD_STRICT_RECONFIG_CHECK":       "true",
	}
	if s.TLS != "insecure" {
		p := func(f string) string { return filepath.Join(j.cfg.PKIDir, f) }
		for k, v := range map[string]string{
			"ETCD_CLIENT_CERT_AUTH":      "true",
			"ETCD_TRUSTED_CA_FILE":       p("ca.crt"),
			"ETCD_CERT_FILE":             p("server.crt"),
			"ETCD_KEY_FILE":              p("server.key"),
			"ETCD_PEER_CLIENT_CERT_AUTH": "true",
			"ETCD_PEER_TRUSTED_CA_FILE":  p("ca.crt"),
			"ETCD_PEER_CERT_FILE":        p("peer.crt"),
			"ETCD_PEER_KEY_FILE":         p("peer.key"),
		} {
			vars[k] = v
		}
	}
	for k, v := range j.extraEnv {
		vars[k] = v
	}
	vars, err := j.versionedEnv(vars)
	if err != nil {
		return err
	}
	changed, err := writeEnvFile(j.cfg.EnvFile, vars, j.cfg.Owner)
	if err != nil {
		return err
	}
	if err := j.ownDataDir(); err != nil {
		return err
	}
	j.log.Info("starting etcd", "state", state, "envChanged", changed)
	if err := j.d.Service.Start(ctx, changed); err != nil {
		return fmt.Errorf("member join: start etcd: %w", err)
	}
	return nil
}

// ownDataDir makes the data directory etcd's: a freshly formatted volume
// mounted there belongs to root. Only the directory itself is changed.
func (j *joiner) ownDataDir() error {
	if err := os.MkdirAll(j.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("member join: data dir: %w", err)
	}
	if err := os.Chmod(j.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("member join: data dir: %w", err)
	}
	if j.cfg.Owner.UID >= 0 {
		if err := os.Chown(j.cfg.DataDir, j.cfg.Owner.UID, j.cfg.Owner.GID); err != nil {
			return fmt.Errorf("member join: data dir: %w", err)
		}
	}
	return nil
}

// waitLinearizable waits until the member serves a linearizable read.
func (j *joiner) waitLinearizable(ctx context.Context, cli *clientv3.Client) error {
	deadline := time.Now().Add(j.cfg.Timeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(rctx, "health")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("member join: etcd did not become healthy within %v: %w (see journalctl -u etcd)", j.cfg.Timeout, err)
		}
		if err := sleep(ctx, j.cfg.Poll/4); err != nil {
			return err
		}
	}
}
