// Package rollout benchmarks changing the etcd version of a running
// three-member cluster on loopback with real etcd binaries, side by side in
// one run: etcdadm's version switchers (one member at a time, data,
// revisions and leases kept) against etcd-manager's full dump (backup,
// quarantine, stop every member, a new cluster at the new version, every key
// copied in with plain Puts, quarantine lifted), for the minor upgrade
// 3.5 → 3.6 and the one-minor downgrade 3.6 → 3.5. Where etcd-manager
// itself would restart the members in place (a one-minor upgrade), that
// path runs as well. A steady writer, a watch and a Status probe per member
// measure what clients see: the total time, each member's time unreachable,
// the longest write stall, failed and lost writes, broken watches and lost
// leases. etcdadm stops etcd as systemd does (SIGTERM: etcd hands over
// leadership, then keeps its client port closed while it waits for open
// streams, up to its request timeout); etcd-manager kills it (SIGKILL).
// Every member serves a watch, as it would its host's API server. Run by
// make bench; figures in docs/benchmarks.md.
package rollout

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/etcdadm/etcdadm-immutable/internal/envfile"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/test/localcluster"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

const (
	writeEvery   = 10 * time.Millisecond
	writeTimeout = 2 * time.Second
	probeEvery   = 100 * time.Millisecond
	// A run's bound: founding, the change, and reading back.
	runTimeout = 4 * time.Minute
	// How long a started etcd has to serve a linearizable read.
	servingTimeout = time.Minute
	// How long clients have after the change to write again.
	recoverTimeout = time.Minute
	// Steady load before the change.
	warmup = 2 * time.Second

	writerPrefix = "/bench/writer/"
	leasedKey    = "/bench/leased"
	// Objects written before the change, each updated a few times, as
	// Kubernetes updates status: the revision then runs ahead of the
	// number of keys, as in any real cluster, and a copy renumbers it.
	objectPrefix            = "/bench/objects/"
	objects, objectVersions = 200, 3
)

// cluster is one run's three founded members.
type cluster struct {
	st       store.Store
	hosts    []*localcluster.Host
	from, to string
	tls      *tls.Config // the client certificate of etcd-a
}

// method changes the running cluster's version and says how long each of
// its phases took.
type method struct {
	name   string
	change func(ctx context.Context, b *testing.B, c *cluster) ([]phase, error)
}

func BenchmarkRollout(b *testing.B) {
	vs := testenv.EtcdVersions()
	for _, c := range []struct{ from, to string }{{vs[0], vs[1]}, {vs[1], vs[0]}} {
		ms := []method{{"etcdadm", switchers}, {"etcd-manager-dump", fullDump}}
		if etcdManagerInPlace(c.from, c.to) {
			ms = append(ms, method{"etcd-manager-in-place", inPlace})
		}
		for _, m := range ms {
			b.Run(c.from+"-to-"+c.to+"/"+m.name, func(b *testing.B) {
				var rs []result
				for range b.N {
					rs = append(rs, measure(b, m, c.from, c.to))
				}
				report(b, rs)
				for _, r := range rs {
					b.Log(r.line(c.from+" → "+c.to, m.name))
				}
			})
		}
	}
}

// etcdManagerInPlace is etcd-manager's rule (etcdversions.
// UpgradeInPlaceSupported): within 3.x, the same minor or one minor up is
// done by restarting the members on the new binary one per cycle; anything
// else, a downgrade included, by the full dump.
func etcdManagerInPlace(from, to string) bool {
	f, t := etcdversion.MustParse(from), etcdversion.MustParse(to)
	return f.Major == 3 && t.Major == 3 && t.Minor >= f.Minor && t.Minor-f.Minor <= 1
}

// measure founds a cluster at from, starts the load and the probes, changes
// the version with m and returns what the clients saw.
func measure(b *testing.B, m method, from, to string) result {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	c := found(b, ctx, from, to)
	o := startObserver(b, ctx, c)
	start := time.Now()
	phases, err := m.change(ctx, b, c)
	end := time.Now()
	if err != nil {
		b.Fatalf("%s %s → %s: %v", m.name, from, to, err)
	}
	r := o.finish(b, ctx, end)
	r.total, r.phases = end.Sub(start), phases
	for _, h := range c.hosts {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := o.probe.Status(sctx, h.ClientURL())
		cancel()
		if err != nil || s.Version != to {
			b.Fatalf("%s after %s: %s runs %+v (%v), want etcd %s", m.name, from, h.Name, s, err, to)
		}
	}
	return r
}

// found starts etcd-a, etcd-b and etcd-c at once with every version baked
// in, as member join does on hosts booted together.
func found(b *testing.B, ctx context.Context, from, to string) *cluster {
	b.Helper()
	c := &cluster{st: localcluster.Seed(b, 3, from), from: from, to: to}
	for _, name := range []string{"etcd-a", "etcd-b", "etcd-c"} {
		h := localcluster.NewHost(b, c.st, name, from)
		h.AddVersions(b, testenv.EtcdVersions()...)
		c.hosts = append(c.hosts, h)
	}
	errs := make([]error, len(c.hosts))
	var wg sync.WaitGroup
	for i, h := range c.hosts {
		wg.Go(func() {
			res, err := h.Join(ctx)
			if err == nil && res.Action != member.Found {
				err = fmt.Errorf("%s (%s), want %s", res.Action, res.Reason, member.Found)
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s: join: %w", h.Name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	dir := c.hosts[0].PKIDir()
	c.tls = (&testenv.PKI{CACert: filepath.Join(dir, "ca.crt"), ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key")}).ClientTLS(b)
	return c
}

// switchers is etcdadm's path: the new version declared, every host's
// version switcher run at once, as their timers would.
func switchers(ctx context.Context, b *testing.B, c *cluster) ([]phase, error) {
	ph := newPhases()
	if _, err := rollout.Declare(ctx, c.st, etcdversion.MustParse(c.to), false, time.Now()); err != nil {
		return ph.list, fmt.Errorf("declare %s: %w", c.to, err)
	}
	errs := make([]error, len(c.hosts))
	var wg sync.WaitGroup
	for i, h := range c.hosts {
		wg.Go(func() {
			cfg := rollout.Config{Member: h.Cfg, Timeout: 4 * time.Minute, HealthTimeout: 30 * time.Second, Poll: 200 * time.Millisecond, StateFile: filepath.Join(h.Cfg.Root, "switch.json")}
			if _, err := rollout.Run(ctx, cfg, rollout.Deps{Deps: h.Deps()}); err != nil {
				errs[i] = fmt.Errorf("%s: switcher: %w", h.Name, err)
			}
		})
	}
	wg.Wait()
	ph.mark("switchers")
	return ph.list, errors.Join(errs...)
}

// fullDump is etcd-manager's stopForUpgrade and
// restoreBackupAndLiftQuarantine, every stop a SIGKILL as there: a backup;
// quarantine (every member restarted with its client URL on another port,
// so clients cannot write); a second backup; every member stopped; a new
// cluster at the new version (fresh data, new token, still quarantined);
// the backup restored into a temporary member of the old version and every
// key copied into the new cluster with plain Puts (revisions restart,
// leases are lost); quarantine lifted (every member restarted on its client
// port). A lower bound: etcd-manager moves on at once after a step that
// made progress but sleeps 10 s when a cycle finds a member not yet
// healthy, and it gzips and uploads its backups.
func fullDump(ctx context.Context, b *testing.B, c *cluster) ([]phase, error) {
	ph := newPhases()
	dir := b.TempDir()
	if err := saveSnapshot(ctx, c.tls, c.hosts[0].ClientURL(), filepath.Join(dir, "before-quarantine.db")); err != nil {
		return ph.list, err
	}
	ph.mark("backup")

	quarantined := make([]string, len(c.hosts))
	procs := make([]*proc, len(c.hosts))
	for i, h := range c.hosts {
		quarantined[i] = fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(b))
		if err := h.Runner.Kill(ctx); err != nil {
			return ph.list, fmt.Errorf("quarantine: stop %s: %w", h.Name, err)
		}
		procs[i] = startMember(b, h, c.from, clientURLs(quarantined[i]))
	}
	if err := waitAll(ctx, c.tls, quarantined, procs); err != nil {
		return ph.list, fmt.Errorf("quarantine: %w", err)
	}
	ph.mark("quarantine")

	snap := filepath.Join(dir, "after-quarantine.db")
	if err := saveSnapshot(ctx, c.tls, quarantined[0], snap); err != nil {
		return ph.list, err
	}
	ph.mark("backup")

	for _, p := range procs {
		if err := p.kill(); err != nil {
			return ph.list, err
		}
	}
	ph.mark("stop")

	token := fmt.Sprintf("restore-etcd-%d", time.Now().UnixNano())
	dataDir := func(h *localcluster.Host) string { return filepath.Join(dir, h.Name) }
	for i, h := range c.hosts {
		set := clientURLs(quarantined[i])
		set["ETCD_DATA_DIR"] = dataDir(h)
		set["ETCD_INITIAL_CLUSTER_STATE"] = "new"
		set["ETCD_INITIAL_CLUSTER_TOKEN"] = token
		procs[i] = startMember(b, h, c.to, set)
	}
	if err := waitAll(ctx, c.tls, quarantined, procs); err != nil {
		return ph.list, fmt.Errorf("new cluster: %w", err)
	}
	ph.mark("new cluster")

	n, err := restoreAndCopy(ctx, b, c, snap, quarantined[0])
	if err != nil {
		return ph.list, err
	}
	ph.mark(fmt.Sprintf("copy %d keys", n))

	normal := make([]string, len(c.hosts))
	for i, h := range c.hosts {
		if err := procs[i].kill(); err != nil {
			return ph.list, err
		}
		// The client URLs of etcd.env: the member's own port.
		procs[i] = startMember(b, h, c.to, map[string]string{"ETCD_DATA_DIR": dataDir(h), "ETCD_INITIAL_CLUSTER_TOKEN": token})
		normal[i] = h.ClientURL()
	}
	if err := waitAll(ctx, c.tls, normal, procs); err != nil {
		return ph.list, fmt.Errorf("lift quarantine: %w", err)
	}
	ph.mark("lift quarantine")
	return ph.list, nil
}

// inPlace is etcd-manager's upgradeInPlace (a lower bound, as fullDump):
// a backup, then one member per cycle killed and started on the new binary
// with its data, the next once every member is healthy.
func inPlace(ctx context.Context, b *testing.B, c *cluster) ([]phase, error) {
	ph := newPhases()
	if err := saveSnapshot(ctx, c.tls, c.hosts[0].ClientURL(), filepath.Join(b.TempDir(), "backup.db")); err != nil {
		return ph.list, err
	}
	ph.mark("backup")
	for _, h := range c.hosts {
		if err := h.Runner.Kill(ctx); err != nil {
			return ph.list, fmt.Errorf("stop %s: %w", h.Name, err)
		}
		p := startMember(b, h, c.to, nil)
		if err := waitServing(ctx, c.tls, h.ClientURL(), p); err != nil {
			return ph.list, err
		}
		ph.mark(h.Name)
	}
	return ph.list, nil
}

func clientURLs(u string) map[string]string {
	return map[string]string{"ETCD_LISTEN_CLIENT_URLS": u, "ETCD_ADVERTISE_CLIENT_URLS": u}
}

// restoreAndCopy is etcd-manager's DoRestore: the backup restored with
// the old version's etcdutl into a temporary single member of that
// version, and every key read from it (pages of 1000, by key) and Put
// into the new cluster through one member.
func restoreAndCopy(ctx context.Context, b *testing.B, c *cluster, snap, dest string) (int, error) {
	base := b.TempDir()
	dir := filepath.Join(base, "data")
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(b))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(b))
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	out, err := exec.CommandContext(rctx, testenv.EtcdBin(b, c.from, "etcdutl"), "snapshot", "restore", snap,
		"--data-dir", dir, "--name", "restore", "--initial-cluster", "restore="+peer,
		"--initial-advertise-peer-urls", peer, "--initial-cluster-token", "restore").CombinedOutput()
	cancel()
	if err != nil {
		return 0, fmt.Errorf("restore: etcdutl %s snapshot restore: %w\n%s", c.from, err, out)
	}
	p := startProc(b, "restore etcd "+c.from, filepath.Join(base, "etcd.log"), []string{"PATH=/usr/bin:/bin", "HOME=" + base},
		testenv.EtcdBin(b, c.from, "etcd"), "--name", "restore", "--data-dir", dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "restore="+peer)
	if err := waitServing(ctx, nil, client, p); err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	src, err := newClient(client, nil)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	dst, err := newClient(dest, c.tls)
	if err != nil {
		return 0, err
	}
	defer dst.Close()
	n, err := copyKeys(ctx, src, dst)
	if err != nil {
		return n, err
	}
	return n, p.kill()
}

func copyKeys(ctx context.Context, src, dst *clientv3.Client) (int, error) {
	n, from := 0, "\x00"
	for range 10_000 {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := src.Get(gctx, from, clientv3.WithFromKey(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(1000))
		cancel()
		if err != nil {
			return n, fmt.Errorf("copy: read from %q: %w", from, err)
		}
		for _, kv := range resp.Kvs {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := dst.Put(pctx, string(kv.Key), string(kv.Value))
			cancel()
			if err != nil {
				return n, fmt.Errorf("copy: put %q: %w", kv.Key, err)
			}
			n++
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return n, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return n, fmt.Errorf("copy: more than 10000 pages")
}

func saveSnapshot(ctx context.Context, tc *tls.Config, url, path string) error {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cfg := clientv3.Config{Endpoints: []string{url}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if _, err := snapshot.SaveWithVersion(sctx, zap.NewNop(), cfg, path); err != nil {
		return fmt.Errorf("backup from %s: %w", url, err)
	}
	return nil
}

func newClient(url string, tc *tls.Config) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", url, err)
	}
	return cli, nil
}

// waitServing waits until url serves a linearizable read, the process
// behind it exited, or servingTimeout passed.
func waitServing(ctx context.Context, tc *tls.Config, url string, p *proc) error {
	deadline := time.Now().Add(servingTimeout)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s exited (%v); log %s", p.name, p.exitErr(), p.log)
		}
		if last = linearizableRead(ctx, tc, url); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s at %s: %w", p.name, url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s at %s: not serving after %v: %w (log %s)", p.name, url, servingTimeout, last, p.log)
}

// linearizableRead dials first (a refused port fails at once) and reads
// through a new client, which has no reconnect backoff to wait out.
func linearizableRead(ctx context.Context, tc *tls.Config, url string) error {
	conn, err := net.DialTimeout("tcp", hostPort(url), 200*time.Millisecond)
	if err != nil {
		return err
	}
	conn.Close()
	cli, err := newClient(url, tc)
	if err != nil {
		return err
	}
	defer cli.Close()
	gctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = cli.Get(gctx, "health")
	return err
}

func hostPort(url string) string {
	return strings.TrimPrefix(strings.TrimPrefix(url, "https://"), "http://")
}

func waitAll(ctx context.Context, tc *tls.Config, urls []string, procs []*proc) error {
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i := range urls {
		wg.Go(func() { errs[i] = waitServing(ctx, tc, urls[i], procs[i]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startMember runs etcd version v for host h as its unit would, from its
// etcd.env (written by member join) with set applied on top and the
// settings rewritten for v, in a process of this benchmark's.
func startMember(b *testing.B, h *localcluster.Host, v string, set map[string]string) *proc {
	b.Helper()
	vars, err := envfile.Read(h.Runner.EnvFile)
	if err != nil {
		b.Fatal(err)
	}
	maps.Copy(vars, set)
	vars, _ = etcdversion.Env(etcdversion.MustParse(v), vars)
	env := []string{"PATH=/usr/bin:/bin"}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	return startProc(b, h.Name+" etcd "+v, filepath.Join(h.Cfg.Root, "bench-etcd.log"), env, testenv.EtcdBin(b, v, "etcd"))
}

// proc is one process this benchmark started; killed in cleanup at the
// latest.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	waitErr   error // set before done is closed
}

func startProc(b *testing.B, name, logFile string, env []string, bin string, args ...string) *proc {
	b.Helper()
	lf, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatalf("%s: log: %v", name, err)
	}
	defer lf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, log: logFile, cmd: cmd, done: make(chan struct{})}
	go func() { p.waitErr = cmd.Wait(); close(p.done) }()
	b.Cleanup(func() {
		if err := p.kill(); err != nil {
			b.Error(err)
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) exitErr() error {
	if !p.exited() {
		return nil
	}
	return p.waitErr
}

// kill ends the process with SIGKILL, as etcd-manager stops etcd
// (etcdProcess.Stop), and waits until it is gone.
func (p *proc) kill() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) still running 10 s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

type phase struct {
	name string
	took time.Duration
}

type phases struct {
	list []phase
	last time.Time
}

func newPhases() *phases { return &phases{last: time.Now()} }

func (p *phases) mark(name string) {
	now := time.Now()
	p.list = append(p.list, phase{name, now.Sub(p.last)})
	p.last = now
}

// result is what the clients saw during one change.
type result struct {
	total        time.Duration
	phases       []phase
	down         []time.Duration // per member, in host order
	longestStall time.Duration
	attempts     int
	failed       int
	acked        int
	lost         int      // acknowledged writes not readable with their value
	renumbered   int      // acknowledged writes read back at another revision
	watchBroken  []string // why; empty when the watch held
	leaseLost    string   // why; empty when the lease and its key survived
}

func (r result) line(change, method string) string {
	var down []string
	for _, d := range r.down {
		down = append(down, fmt.Sprintf("%.1f", d.Seconds()))
	}
	watch := "held"
	if len(r.watchBroken) > 0 {
		watch = "BROKEN: " + strings.Join(r.watchBroken, ", ")
	}
	lease := "kept"
	if r.leaseLost != "" {
		lease = "LOST: " + r.leaseLost
	}
	var ph []string
	for _, p := range r.phases {
		ph = append(ph, fmt.Sprintf("%s %.1fs", p.name, p.took.Seconds()))
	}
	return fmt.Sprintf("%-17s %-22s total %5.1fs | down a/b/c %s s | longest write stall %5.2fs | failed writes %d of %d | lost %d of %d acked, %d at a new revision | watch %s | lease %s | %s",
		change, method, r.total.Seconds(), strings.Join(down, "/"), r.longestStall.Seconds(),
		r.failed, r.attempts, r.lost, r.acked, r.renumbered, watch, lease, strings.Join(ph, ", "))
}

// report gives each figure, the mean of the runs (one with -benchtime 1x).
func report(b *testing.B, rs []result) {
	mean := func(f func(result) float64) float64 {
		s := 0.0
		for _, r := range rs {
			s += f(r)
		}
		return s / float64(len(rs))
	}
	flag := func(broken bool) float64 {
		if broken {
			return 1
		}
		return 0
	}
	b.ReportMetric(0, "ns/op") // it would include founding the cluster
	b.ReportMetric(mean(func(r result) float64 { return r.total.Seconds() }), "s-total")
	b.ReportMetric(mean(func(r result) float64 { return slices.Max(r.down).Seconds() }), "s-max-member-down")
	b.ReportMetric(mean(func(r result) float64 { return r.longestStall.Seconds() }), "s-longest-stall")
	b.ReportMetric(mean(func(r result) float64 { return float64(r.failed) }), "failed-writes")
	b.ReportMetric(mean(func(r result) float64 { return float64(r.lost) }), "lost-writes")
	b.ReportMetric(mean(func(r result) float64 { return float64(r.renumbered) }), "renumbered-writes")
	b.ReportMetric(mean(func(r result) float64 { return flag(len(r.watchBroken) > 0) }), "broken-watches")
	b.ReportMetric(mean(func(r result) float64 { return flag(r.leaseLost != "") }), "lost-leases")
}

// write is one acknowledged Put.
type write struct {
	key, value string
	rev        int64
}

// observer is the load and the probes of one run: a writer and a watch on
// its prefix through a client of all three members, as an API server's,
// and a Status probe per member.
type observer struct {
	cli, probe *clientv3.Client
	stop       chan struct{}
	stopOnce   sync.Once
	wg         sync.WaitGroup // the writer and the probes

	mu       sync.Mutex
	acked    []write
	attempts int
	failed   int
	lastOK   time.Time
	stall    time.Duration
	down     []time.Duration

	lease       clientv3.LeaseID
	watchCancel context.CancelFunc
	watchDone   chan struct{}
	wmu         sync.Mutex
	seen        map[string]string
	lastRev     int64
	watchErrs   []string
	replayed    int
	backwards   int
	stopping    bool // the watch is being cancelled by us
	closed      bool // the watch channel closed
}

func startObserver(b *testing.B, ctx context.Context, c *cluster) *observer {
	b.Helper()
	o := &observer{
		cli:       localcluster.Client(b, c.hosts[0], c.hosts...),
		probe:     localcluster.Client(b, c.hosts[0], c.hosts...),
		stop:      make(chan struct{}),
		down:      make([]time.Duration, len(c.hosts)),
		watchDone: make(chan struct{}),
		seen:      map[string]string{},
	}
	b.Cleanup(o.stopLoad)

	for v := range objectVersions {
		for i := range objects {
			k := fmt.Sprintf("%s%03d", objectPrefix, objects-1-i)
			if _, err := o.cli.Put(ctx, k, fmt.Sprintf("version %d", v)); err != nil {
				b.Fatalf("put %s: %v", k, err)
			}
		}
	}
	// A key on a lease that outlives the run, as Kubernetes keeps events
	// and leader leases.
	lg, err := o.cli.Grant(ctx, 600)
	if err != nil {
		b.Fatalf("grant a lease: %v", err)
	}
	o.lease = lg.ID
	if _, err := o.cli.Put(ctx, leasedKey, "leased", clientv3.WithLease(lg.ID)); err != nil {
		b.Fatalf("put %s: %v", leasedKey, err)
	}

	// Every member serves watches, as each serves its host's API server
	// in production: a member stopped with open streams keeps its client
	// port closed while it waits for them (up to etcd's request timeout,
	// 7 s here) before it exits. These watches are not measured.
	for _, h := range c.hosts {
		cli, err := newClient(h.ClientURL(), c.tls)
		if err != nil {
			b.Fatal(err)
		}
		ictx, cancel := context.WithCancel(context.Background())
		b.Cleanup(func() { cancel(); cli.Close() })
		select {
		case resp := <-cli.Watch(ictx, "/bench/idle", clientv3.WithCreatedNotify()):
			if !resp.Created {
				b.Fatalf("%s: open a watch: %v", h.Name, resp.Err())
			}
		case <-time.After(10 * time.Second):
			b.Fatalf("%s: open a watch: no answer in 10 s", h.Name)
		}
	}

	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	o.watchCancel = cancel
	b.Cleanup(func() { o.stopWatch() })
	ch := o.cli.Watch(wctx, writerPrefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	select {
	case resp, ok := <-ch:
		if !ok || !resp.Created || resp.Err() != nil {
			b.Fatalf("open the watch: %v (closed %v)", resp.Err(), !ok)
		}
	case <-time.After(10 * time.Second):
		b.Fatal("open the watch: no answer in 10 s")
	}
	go o.readWatch(ch)

	o.wg.Add(1 + len(c.hosts))
	go o.write()
	for i, h := range c.hosts {
		go o.probeMember(i, h.ClientURL())
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		o.mu.Lock()
		n := len(o.acked)
		o.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the writer has no write acknowledged after 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(warmup)
	return o
}

func (o *observer) write() {
	defer o.wg.Done()
	tick := time.NewTicker(writeEvery)
	defer tick.Stop()
	defer func() {
		o.mu.Lock()
		if !o.lastOK.IsZero() {
			o.stall = max(o.stall, time.Since(o.lastOK))
		}
		o.mu.Unlock()
	}()
	for i := range int(runTimeout / writeEvery) {
		select {
		case <-o.stop:
			return
		case <-tick.C:
		}
		k, v := fmt.Sprintf("%s%07d", writerPrefix, i), fmt.Sprintf("v%d-%d", i, time.Now().UnixNano())
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		resp, err := o.cli.Put(ctx, k, v)
		cancel()
		now := time.Now()
		o.mu.Lock()
		o.attempts++
		if err != nil {
			o.failed++
		} else {
			if !o.lastOK.IsZero() {
				o.stall = max(o.stall, now.Sub(o.lastOK))
			}
			o.lastOK = now
			o.acked = append(o.acked, write{k, v, resp.Header.Revision})
		}
		o.mu.Unlock()
	}
}

// probeMember sums the time the member at url does not answer Status: from
// the start of the first probe that failed to the start of the next that
// succeeded.
func (o *observer) probeMember(i int, url string) {
	defer o.wg.Done()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	var downSince time.Time
	var total time.Duration
	defer func() {
		if !downSince.IsZero() {
			total += time.Since(downSince)
		}
		o.mu.Lock()
		o.down[i] = total
		o.mu.Unlock()
	}()
	for range int(runTimeout / probeEvery) {
		select {
		case <-o.stop:
			return
		case <-tick.C:
		}
		at := time.Now()
		ok := o.answers(url)
		switch {
		case !ok && downSince.IsZero():
			downSince = at
		case ok && !downSince.IsZero():
			total += at.Sub(downSince)
			downSince = time.Time{}
		}
	}
}

// answers: Status dials the member afresh each time, so a member that is
// back answers at once.
func (o *observer) answers(url string) bool {
	conn, err := net.DialTimeout("tcp", hostPort(url), 200*time.Millisecond)
	if err != nil {
		return false
	}
	conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = o.probe.Status(ctx, url)
	return err == nil
}

func (o *observer) readWatch(ch clientv3.WatchChan) {
	defer close(o.watchDone)
	for resp := range ch {
		o.wmu.Lock()
		if err := resp.Err(); err != nil && !o.stopping {
			o.watchErrs = append(o.watchErrs, err.Error())
		}
		for _, ev := range resp.Events {
			k := string(ev.Kv.Key)
			if _, dup := o.seen[k]; dup {
				o.replayed++
			}
			if ev.Kv.ModRevision <= o.lastRev {
				o.backwards++
			}
			o.lastRev = ev.Kv.ModRevision
			o.seen[k] = string(ev.Kv.Value)
		}
		o.wmu.Unlock()
	}
	o.wmu.Lock()
	o.closed = true
	o.wmu.Unlock()
}

// stopLoad ends the writer and the probes and waits for them.
func (o *observer) stopLoad() {
	o.stopOnce.Do(func() { close(o.stop) })
	o.wg.Wait()
}

func (o *observer) stopWatch() {
	o.wmu.Lock()
	o.stopping = true
	o.wmu.Unlock()
	o.watchCancel()
	select {
	case <-o.watchDone:
	case <-time.After(10 * time.Second):
	}
}

// finish keeps the load on until a write after the change succeeded (the
// clients reconnect in their own time) and a second more, then checks
// every acknowledged write, the watch and the lease.
func (o *observer) finish(b *testing.B, ctx context.Context, changed time.Time) result {
	b.Helper()
	deadline := changed.Add(recoverTimeout)
	for {
		o.mu.Lock()
		ok := o.lastOK.After(changed)
		o.mu.Unlock()
		if ok && time.Since(changed) > time.Second {
			break
		}
		if time.Now().After(deadline) {
			b.Logf("no write succeeded in the %v after the change", recoverTimeout)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	o.stopLoad()
	o.mu.Lock()
	r := result{down: slices.Clone(o.down), longestStall: o.stall, attempts: o.attempts, failed: o.failed, acked: len(o.acked)}
	acked := slices.Clone(o.acked)
	o.mu.Unlock()

	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := o.cli.Get(gctx, writerPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		b.Fatalf("read the writer's keys back: %v", err)
	}
	have := map[string]*write{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = &write{string(kv.Key), string(kv.Value), kv.ModRevision}
	}
	for _, w := range acked {
		switch got := have[w.key]; {
		case got == nil || got.value != w.value:
			r.lost++
		case got.rev != w.rev:
			r.renumbered++
		}
	}

	// Every acknowledged write must arrive on the watch, in order, once.
	missing := 0
	for until := time.Now().Add(10 * time.Second); ; {
		o.wmu.Lock()
		missing = 0
		for _, w := range acked {
			if o.seen[w.key] != w.value {
				missing++
			}
		}
		closed := o.closed
		o.wmu.Unlock()
		if missing == 0 || closed || time.Now().After(until) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	o.wmu.Lock()
	closed := o.closed
	o.wmu.Unlock()
	o.stopWatch()
	o.wmu.Lock()
	if len(o.watchErrs) > 0 {
		r.watchBroken = append(r.watchBroken, fmt.Sprintf("%d errors (first: %s)", len(o.watchErrs), o.watchErrs[0]))
	}
	if closed {
		r.watchBroken = append(r.watchBroken, "channel closed")
	}
	if missing > 0 {
		r.watchBroken = append(r.watchBroken, fmt.Sprintf("%d acked writes never arrived", missing))
	}
	if o.replayed > 0 {
		r.watchBroken = append(r.watchBroken, fmt.Sprintf("%d events for keys already delivered", o.replayed))
	}
	if o.backwards > 0 {
		r.watchBroken = append(r.watchBroken, fmt.Sprintf("revision went backwards %d times", o.backwards))
	}
	o.wmu.Unlock()

	r.leaseLost = o.checkLease(ctx)
	return r
}

// checkLease: the leased key is still there, on its lease, and the lease
// is alive.
func (o *observer) checkLease(ctx context.Context) string {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := o.cli.Get(gctx, leasedKey)
	switch {
	case err != nil:
		return "read " + leasedKey + ": " + err.Error()
	case len(resp.Kvs) == 0:
		return "the key is gone"
	case resp.Kvs[0].Lease == 0:
		return "the key has no lease (it never expires)"
	case resp.Kvs[0].Lease != int64(o.lease):
		return fmt.Sprintf("the key is on lease %x, not %x", resp.Kvs[0].Lease, o.lease)
	}
	ttl, err := o.cli.TimeToLive(gctx, o.lease)
	if err != nil {
		return "lease time to live: " + err.Error()
	}
	if ttl.TTL <= 0 {
		return fmt.Sprintf("lease %x no longer exists", o.lease)
	}
	return ""
}
