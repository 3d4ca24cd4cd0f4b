package bench

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
	"github.com/etcdadm/etcdadm-immutable/test/localcluster"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// restoreLeases is how many leases, each with one key, the database holds.
const restoreLeases = 200

// restoreRow is one method's figures.
type restoreRow struct {
	method           string
	wall             time.Duration
	keys, leases     int64
	revision, before int64
	note             string
}

// BenchmarkRestore restores one backup of a 3-member cluster into 3
// members, side by side in one run: etcdadm restore (the command written,
// every host's member join downloading, verifying and restoring it with a
// revision bump, leases kept) against the floor (etcdutl snapshot restore
// of the same snapshot from a local file on each member, then start) and
// etcd-manager's way (the snapshot restored into a temporary single node,
// every key copied with Puts, 1000 per page, into a new cluster). Then a
// lost majority: two members die with their data and 'recover
// --from-member' brings three healthy members back. The database size is
// ETCDADM_BENCH_RESTORE_MIB (default 1024). Run by make bench; figures in
// docs/benchmarks.md.
func BenchmarkRestore(b *testing.B) {
	size := int64(1024)
	if s := os.Getenv("ETCDADM_BENCH_RESTORE_MIB"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 1 {
			b.Fatalf("ETCDADM_BENCH_RESTORE_MIB=%q: a number of MiB", s)
		}
		size = v
	}
	ctx := context.Background()
	s3 := testenv.StartMinIO(b)
	st, err := storeurl.Open(ctx, s3.URL("restore"), s3.Env())
	if err != nil {
		b.Fatal(err)
	}
	if err := clusterspec.Seed(ctx, st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: etcdVersion}}, false); err != nil {
		b.Fatal(err)
	}
	if _, err := pki.Init(ctx, st, pki.InitOptions{}); err != nil {
		b.Fatal(err)
	}
	var hosts []*localcluster.Host
	for _, n := range []string{"etcd-a", "etcd-b", "etcd-c"} {
		h := localcluster.NewHost(b, st, n, etcdVersion)
		h.Cfg.Timeout = 10 * time.Minute
		hosts = append(hosts, h)
	}
	parallel(b, hosts, func(h *localcluster.Host) error { _, err := h.Join(ctx); return err })
	cli := localcluster.Client(b, hosts[0], hosts...)

	f := &filler{cli: cli, endpoint: hosts[0].ClientURL(), g: newObjectGen(7)}
	db, err := f.fill(ctx, size<<20)
	if err != nil {
		b.Fatal(err)
	}
	for i := range restoreLeases {
		l, err := cli.Grant(ctx, 3600)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/masterleases/10.0.%d.%d", i/250, i%250), "x", clientv3.WithLease(l.ID)); err != nil {
			b.Fatal(err)
		}
	}
	s, err := member.Open(ctx, hosts[0].Cfg, hosts[0].Deps())
	if err != nil {
		b.Fatal(err)
	}
	name, err := s.Backup(ctx)
	s.Close()
	if err != nil {
		b.Fatal(err)
	}
	src := count(b, cli)
	fmt.Printf("BenchmarkRestore: etcd %s, 3 members (mutual TLS), MinIO on loopback; database %.0f MiB, %d keys, %d leases, revision %d (filled in %s); backup %s\n",
		etcdVersion, mib(db.Size), src.keys, src.leases, src.revision, db.Fill.Round(time.Second), name)

	work := b.TempDir()
	// The download alone: the backup object to a local snapshot file.
	start := time.Now()
	snap := filepath.Join(work, "snapshot.db")
	download(b, st, name, snap)
	dl := time.Since(start)
	// Three at once, as the three hosts of this one machine download: on
	// real hosts each has its own CPU and disk, here they share two cores.
	start = time.Now()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); download(b, st, name, filepath.Join(work, fmt.Sprintf("snapshot-%d.db", i))) }()
	}
	wg.Wait()
	dl3 := time.Since(start)

	// etcdadm restore: what the command writes, then every host's member
	// join acting at once, until the cluster serves. The hosts registered
	// lately, as their member-join timers keep them (every 15 min).
	parallel(b, hosts, func(h *localcluster.Host) error { _, err := h.Join(ctx); return err })
	start = time.Now()
	if _, _, err := recovery.Request(ctx, st, name, time.Now()); err != nil {
		b.Fatal(err)
	}
	parallel(b, hosts, func(h *localcluster.Host) error {
		acted, err := recovery.Act(ctx, h.Cfg, h.Deps())
		if err == nil && !acted {
			err = fmt.Errorf("did not act on the restore")
		}
		return err
	})
	cli2 := localcluster.Client(b, hosts[0], hosts...)
	ours := count(b, cli2)
	ours.method, ours.wall, ours.before = "etcdadm restore (download, verify, restore ×3, start)", time.Since(start), src.revision
	rows := []restoreRow{ours, floorRestore(b, snap, src), keyCopy(b, snap, src)}

	printRestore(os.Stdout, dl, dl3, rows)
	// A lost majority, recovered from the survivor.
	rec := recoverFromOne(b, st, hosts, cli2)
	fmt.Printf("quorum lost (2 of 3 with their data) → recover --from-member → 3 members: %.1fs\n", rec.Seconds())
	floor := rows[1].wall
	b.ReportMetric(ours.wall.Seconds(), "etcdadm-s")
	b.ReportMetric(floor.Seconds(), "floor-s")
	b.ReportMetric(dl.Seconds(), "download-s")
	b.ReportMetric(dl3.Seconds(), "download3-s")
	b.ReportMetric(rows[2].wall.Seconds(), "keycopy-s")
	b.ReportMetric(rec.Seconds(), "recover-s")
}

// count is what a client sees of a cluster: keys, leases, revision.
func count(b *testing.B, cli *clientv3.Client) restoreRow {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gr, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	ls, err := cli.Leases(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return restoreRow{keys: gr.Count, leases: int64(len(ls.Leases)), revision: gr.Header.Revision}
}

func download(b *testing.B, st store.Store, name, path string) {
	b.Helper()
	rc, _, err := st.Get(context.Background(), name+"/"+etcdmanager.DataFile)
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, zr); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
}

// restoredMembers restores snap into n new members with etcdutl, all at
// once, and starts them.
func restoredMembers(b *testing.B, snap string, n int, pk *testenv.PKI) []*testenv.EtcdMember {
	b.Helper()
	base := b.TempDir()
	cfgs := make([]testenv.MemberConfig, n)
	var initial []string
	for i := range cfgs {
		cfgs[i] = testenv.MemberConfig{Name: fmt.Sprintf("m%d", i), DataDir: filepath.Join(base, fmt.Sprintf("m%d", i)), ClientPort: testenv.FreePort(b), PeerPort: testenv.FreePort(b)}
		initial = append(initial, fmt.Sprintf("m%d=https://127.0.0.1:%d", i, cfgs[i].PeerPort))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, c := range cfgs {
		c.InitialCluster = strings.Join(initial, ",")
		cfgs[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := exec.Command(testenv.EtcdBin(b, etcdVersion, "etcdutl"), "snapshot", "restore", snap, "--name", c.Name, "--data-dir", c.DataDir,
				"--initial-cluster", c.InitialCluster, "--initial-advertise-peer-urls", fmt.Sprintf("https://127.0.0.1:%d", c.PeerPort), "--skip-hash-check=false").CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("etcdutl snapshot restore: %w\n%s", err, out)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return testenv.StartEtcdMembers(b, etcdVersion, cfgs, pk)
}

// floorRestore: etcdutl restores the local snapshot on three members at
// once, which then start and serve.
func floorRestore(b *testing.B, snap string, src restoreRow) restoreRow {
	b.Helper()
	pk := testenv.NewPKI(b)
	start := time.Now()
	ms := restoredMembers(b, snap, 3, pk)
	r := count(b, ms[0].Client(b))
	r.method, r.wall, r.before = "floor: etcdutl restore ×3 from a local file, start", time.Since(start), src.revision
	for _, m := range ms {
		m.Stop()
	}
	return r
}

// keyCopy is etcd-manager's restore: the snapshot into a temporary single
// node, a new empty cluster, every key copied with a Put, 1000 per page.
// Leases are not copied; revisions start again.
func keyCopy(b *testing.B, snap string, src restoreRow) restoreRow {
	b.Helper()
	ctx := context.Background()
	pk := testenv.NewPKI(b)
	start := time.Now()
	tmp := restoredMembers(b, snap, 1, pk)[0]
	dst := testenv.StartEtcdCluster(b, etcdVersion, 3, pk)
	from, to := tmp.Client(b), dst[0].Client(b)
	key, end := "\x00", "\x00"
	for {
		gr, err := from.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(1000), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			b.Fatal(err)
		}
		for _, kv := range gr.Kvs {
			if _, err := to.Put(ctx, string(kv.Key), string(kv.Value)); err != nil {
				b.Fatal(err)
			}
		}
		if !gr.More {
			break
		}
		key = string(gr.Kvs[len(gr.Kvs)-1].Key) + "\x00"
	}
	r := count(b, to)
	r.method, r.wall, r.before = "etcd-manager: temporary node, Put every key (1000 a page)", time.Since(start), src.revision
	r.note = "leases lost, revisions restart"
	tmp.Stop()
	for _, m := range dst {
		m.Stop()
	}
	return r
}

// recoverFromOne kills two members with their data and times 'etcdadm
// recover --from-member' (the request, the survivor's restart alone, the
// two joining again) until three members serve.
func recoverFromOne(b *testing.B, st store.Store, hosts []*localcluster.Host, cli *clientv3.Client) time.Duration {
	b.Helper()
	ctx := context.Background()
	for _, h := range hosts[1:] {
		h.Runner.Kill(ctx)
		if err := os.RemoveAll(filepath.Join(h.Cfg.Root, "var/lib/etcd/member")); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	var eps []string
	for _, h := range hosts {
		eps = append(eps, h.ClientURL())
	}
	// The survivor may be busy (a 1 GiB database compacting): ask until
	// it answers, as an operator would run status again.
	var q recovery.Quorum
	var err error
	for try := 0; try < 60; try++ {
		q, err = recovery.ProbeQuorum(ctx, eps, func(ep string) (*clientv3.Client, error) {
			return localcluster.Client(b, hosts[0], hostAt(hosts, ep)), nil
		})
		if err == nil && q.Answering == 1 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		b.Fatal(err)
	}
	if _, err := recovery.RequestRecover(ctx, st, q, "etcd-a", time.Now(), recovery.DefaultRecoverWithin); err != nil {
		b.Fatal(err)
	}
	for i, h := range hosts {
		if _, err := recovery.ActRecover(ctx, h.Cfg, h.Deps()); err != nil {
			b.Fatal(err)
		}
		if i > 0 {
			if _, err := h.Join(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	ml, err := cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		b.Fatalf("after recover: %v %v", ml, err)
	}
	return time.Since(start)
}

func hostAt(hosts []*localcluster.Host, ep string) *localcluster.Host {
	for _, h := range hosts {
		if h.ClientURL() == ep {
			return h
		}
	}
	return hosts[0]
}

func parallel(b *testing.B, hosts []*localcluster.Host, fn func(*localcluster.Host) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(hosts))
	for i, h := range hosts {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn(h) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("%s: %v", hosts[i].Name, err)
		}
	}
}

func printRestore(w io.Writer, dl, dl3 time.Duration, rows []restoreRow) {
	fmt.Fprintf(w, "\n%-58s %9s %9s %7s %14s  %s\n", "method", "wall", "keys", "leases", "revision", "")
	for _, r := range rows {
		fmt.Fprintf(w, "%-58s %8.1fs %9d %7d %14d  %s\n", r.method, r.wall.Seconds(), r.keys, r.leases, r.revision, r.note)
	}
	ours, floor, cp := rows[0].wall, rows[1].wall, rows[2].wall
	fmt.Fprintf(w, "download of the backup alone: %.1fs\n", dl.Seconds())
	fmt.Fprintf(w, "the same three times at once (the three hosts of this machine): %.1fs\n", dl3.Seconds())
	fmt.Fprintf(w, "etcdadm / (floor + download) = %.2f (target ≤ 1.2): %s\n", ours.Seconds()/(floor+dl).Seconds(), verdict(ours.Seconds() <= 1.2*(floor+dl).Seconds()))
	fmt.Fprintf(w, "etcdadm / (floor + three downloads at once) = %.2f (the same target where three hosts share this machine): %s\n", ours.Seconds()/(floor+dl3).Seconds(), verdict(ours.Seconds() <= 1.2*(floor+dl3).Seconds()))
	fmt.Fprintf(w, "key copy / etcdadm = %.1f× (target ≥ 5×): %s\n", cp.Seconds()/ours.Seconds(), verdict(cp >= 5*ours))
	fmt.Fprintf(w, "every lease kept: %s\n", verdict(rows[0].leases == rows[1].leases))
}
