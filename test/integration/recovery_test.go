package integration

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestClusterRestore: a 3-member cluster with data and a lease-attached
// key is restored from an earlier backup by a command written the way
// etcd-manager-ctl writes it, for a backup without our integrity record
// (as etcd-manager leaves them). Every key is as in the backup, the lease
// and its key are kept, revisions only go up, a watch from before gets a
// compaction error (it must re-list), the old data is kept aside, the
// command is retired and the cluster has a new token.
func TestClusterRestore(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st := newCluster(t, 3, v)
	hosts := foundAt(t, st, v)
	cli := clientFor(t, hosts[0], hosts...)
	ctx := ctxT(t)
	for _, k := range []string{"/registry/a", "/registry/b", "/registry/c"} {
		if _, err := cli.Put(ctx, k, "before"); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/registry/masterleases/10.0.0.1", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	name := backupNow(t, hosts[0])
	// As etcd-manager leaves a backup: no integrity record of ours.
	if err := st.Delete(ctx, "etcdadm/backups/"+name+".json"); err != nil {
		t.Fatal(err)
	}
	after, err := cli.Put(ctx, "/registry/a", "after the backup")
	if err != nil {
		t.Fatal(err)
	}
	cli.Put(ctx, "/registry/new", "after the backup")
	seenRev := after.Header.Revision + 1
	watch := cli.Watch(clientv3.WithRequireLeader(ctx), "/registry/", clientv3.WithPrefix(), clientv3.WithRev(seenRev))
	tokenBefore := mustLoad(t, st).Settings.ClusterToken

	// etcd-manager-ctl restore-backup NAME, byte for byte.
	cmd := `{"timestamp":"1752000000123456789","restoreBackup":{"clusterSpec":{"memberCount":3,"etcdVersion":"` + v + `"},"backup":"` + name + `"}}`
	cmdKey := "control/2026-07-08T09:20:31Z-000000/_command.json"
	if _, err := store.PutBytes(ctx, st, cmdKey, []byte(cmd), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// etcd-a plans the restore; etcd-b then cannot download the backup
	// (its link to the store fails): it must stop nothing and keep its
	// data in place until a later run succeeds.
	first := make(chan error, 1)
	go func() { _, err := recovery.Act(ctx, hosts[0].Cfg, hosts[0].Deps()); first <- err }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if rec, _ := recovery.Latest(ctx, st); rec != nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("etcd-a made no restore plan within a minute")
		}
	}
	b := hosts[1]
	cut := b.Deps()
	cut.Store = failingData{cut.Store}
	if acted, err := recovery.Act(ctx, b.Cfg, cut); err == nil || acted || !strings.Contains(err.Error(), "stopped nothing") {
		t.Fatalf("%s with its backup download failing: acted=%v %v, want an error saying it stopped nothing", b.Name, acted, err)
	}
	if active, _ := b.Runner.Active(ctx); !active {
		t.Fatalf("%s: etcd stopped although the backup could not be fetched", b.Name)
	}
	if aside, _ := filepath.Glob(filepath.Join(b.Cfg.Root, "var/lib/etcd/member.before-restore-*")); len(aside) != 0 {
		t.Fatalf("%s: data moved aside although the backup could not be fetched: %v", b.Name, aside)
	}
	actAll(t, hosts[1:])
	if err := <-first; err != nil {
		t.Fatalf("etcd-a: restore: %v", err)
	}

	if _, err := st.Stat(ctx, cmdKey); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the command is still there after the restore: %v", err)
	}
	rec, err := recovery.Latest(ctx, st)
	if err != nil || rec == nil || rec.State != recovery.Done || len(rec.Restored) != 3 {
		t.Fatalf("record %+v %v", rec, err)
	}
	if tok := mustLoad(t, st).Settings.ClusterToken; tok == tokenBefore || tok != rec.Token {
		t.Fatalf("token %s (was %s, restore's %s): want the restore's new token", tok, tokenBefore, rec.Token)
	}
	cli2 := clientFor(t, hosts[0], hosts...)
	checkValues(t, cli2, map[string]string{"/registry/a": "before", "/registry/b": "before", "/registry/c": "before", "/registry/new": ""})
	ttl, err := cli2.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 {
		t.Errorf("lease after restore: %+v %v; want it kept with its key", ttl, err)
	}
	pr, err := cli2.Put(ctx, "/registry/d", "after the restore")
	if err != nil || pr.Header.Revision <= seenRev {
		t.Fatalf("revision after the restore %v (err %v), clients saw up to %d: time went back", pr, err, seenRev)
	}
	for _, h := range hosts {
		aside, _ := filepath.Glob(filepath.Join(h.Cfg.Root, "var/lib/etcd/member.before-restore-*"))
		if len(aside) != 1 {
			t.Errorf("%s: old data not kept aside: %v", h.Name, aside)
		}
		// The backup's checked copy each host restored from is gone.
		if left, _ := filepath.Glob(filepath.Join(h.Cfg.Root, "var/lib/etcd/.etcdadm-restore-*")); len(left) != 0 {
			t.Errorf("%s: the restore left %v on the volume", h.Name, left)
		}
	}
	// The watch opened before the restore ends when its cluster goes
	// away, never with events from before what it saw. A client that
	// watches again from the revision it saw (a reflector, kube-apiserver's
	// watch cache) is told that revision is compacted: it re-lists.
	for wr := range watch {
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision < seenRev {
				t.Fatalf("the watch saw revision %d after %d: time went back", ev.Kv.ModRevision, seenRev)
			}
		}
		if wr.Canceled || wr.Err() != nil {
			break
		}
	}
	rewatch := cli2.Watch(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(seenRev))
	select {
	case wr := <-rewatch:
		if !errors.Is(wr.Err(), rpctypes.ErrCompacted) && wr.CompactRevision == 0 {
			t.Fatalf("watching again from revision %d: %+v, err %v; want a compaction error (re-list)", seenRev, wr, wr.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watching again from before the restore got no compaction error (it must re-list)")
	}
}

// TestRestoreRefusalsChangeNothing: a missing backup, a corrupt one, one
// from a newer etcd than the cluster runs, an unconfirmed restore and a
// second restore while one is pending change nothing in the store.
func TestRestoreRefusalsChangeNothing(t *testing.T) {
	vs := testenv.EtcdVersions()
	dir := t.TempDir()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := clusterspec.Seed(ctx, st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: vs[0]}}, false); err != nil {
		t.Fatal(err)
	}
	m := testenv.StartEtcdCluster(t, vs[0], 1, testenv.NewPKI(t))[0]
	backupOf := func() string { return upload(t, m, st).Backup }
	good, newer, corrupt := backupOf(), backupOf(), backupOf()
	meta, err := etcdmanager.MarshalMeta(etcdmanager.BackupInfo{EtcdVersion: vs[2], Timestamp: time.Now().Unix()})
	if err != nil {
		t.Fatal(err)
	}
	store.PutBytes(ctx, st, newer+"/"+etcdmanager.MetaFile, meta, store.PutOptions{})
	store.PutBytes(ctx, st, corrupt+"/"+etcdmanager.DataFile, []byte("not gzip"), store.PutOptions{})
	url := "file://" + dir
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"restore", "2026-05-05T00:00:00Z-000001", "--yes"}, "no such backup"},
		{[]string{"restore", newer, "--yes"}, "upgrade first"},
		{[]string{"restore", corrupt, "--yes"}, "corrupt"},
		{[]string{"restore", good}, "not confirmed"},
	} {
		before := hashDir(t, dir)
		r := runBin(t, nil, "etcdadm", append(tc.args, "--store", url)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "Nothing was changed") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
		if hashDir(t, dir) != before {
			t.Errorf("%v: the store changed", tc.args)
		}
	}
	if r := runBin(t, nil, "etcdadm", "restore", good, "--yes", "--store", url); r.code != 0 {
		t.Fatalf("restore %s: exit %d\n%s%s", good, r.code, r.stdout, r.stderr)
	}
	before := hashDir(t, dir)
	if r := runBin(t, nil, "etcdadm", "restore", good, "--yes", "--store", url); r.code != 2 || !strings.Contains(r.stderr, "already requested") || hashDir(t, dir) != before {
		t.Errorf("second restore while one is pending: exit %d\n%s", r.code, r.stderr)
	}
}

func mustLoad(t *testing.T, st store.Store) clusterspec.Cluster {
	t.Helper()
	c, err := clusterspec.Load(ctxT(t), st)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkValues reads each key and compares it with what the backup held
// ("" for a key that must not exist).
func checkValues(t *testing.T, cli *clientv3.Client, want map[string]string) {
	t.Helper()
	for k, w := range want {
		gr, err := cli.Get(ctxT(t), k)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if len(gr.Kvs) > 0 {
			got = string(gr.Kvs[0].Value)
		}
		if got != w {
			t.Errorf("%s = %q after the restore, want %q (as in the backup)", k, got, w)
		}
	}
}

// actAll runs every host's part of the restore at once, as their member
// join units would.
func actAll(t *testing.T, hosts []*host) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(hosts))
	acted := make([]bool, len(hosts))
	for i, h := range hosts {
		wg.Add(1)
		go func() { defer wg.Done(); acted[i], errs[i] = recovery.Act(ctxT(t), h.Cfg, h.Deps()) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil || !acted[i] {
			t.Fatalf("%s: restore: acted=%v err=%v", hosts[i].Name, acted[i], err)
		}
	}
}

// failingData is a host's store whose backup downloads fail (a broken
// link to the store) while the small control objects still work.
type failingData struct{ store.Store }

func (f failingData) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	if strings.HasSuffix(key, "/"+etcdmanager.DataFile) {
		return nil, store.Info{}, errors.New("injected: connection reset by peer")
	}
	return f.Store.Get(ctx, key)
}

// TestRestoreStopsAMemberItLeavesOut: four members run, the spec says
// three, and a restore rebuilds three of them. The fourth host's member,
// left out of the restored cluster, stops and keeps its old data aside
// rather than serving it.
func TestRestoreStopsAMemberItLeavesOut(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st := newCluster(t, 3, v)
	hosts := foundAt(t, st, v)
	ctx := ctxT(t)
	if _, _, err := clusterspec.SetSpec(ctx, st, 4, ""); err != nil {
		t.Fatal(err)
	}
	d := newHost(t, st, "etcd-d", v)
	d.mustJoin(t, member.Join)
	hosts = append(hosts, d)
	name := backupNow(t, hosts[0])
	if _, _, err := clusterspec.SetSpec(ctx, st, 3, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := recovery.Request(ctx, st, name, time.Now()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(hosts))
	for i, h := range hosts {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = recovery.Act(ctx, h.Cfg, h.Deps()) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	rec, err := recovery.Latest(ctx, st)
	if err != nil || rec == nil || len(rec.Members) != 3 {
		t.Fatalf("restore record %+v %v, want 3 members", rec, err)
	}
	var out []*host
	for _, h := range hosts {
		if !slices.ContainsFunc(rec.Members, func(p member.Peer) bool { return p.Name == h.Name }) {
			out = append(out, h)
		}
	}
	if len(out) != 1 {
		t.Fatalf("hosts left out of the restore: %d, want 1", len(out))
	}
	if active, _ := out[0].Runner.Active(ctx); active {
		t.Fatalf("%s, left out of the restored cluster, still runs etcd on its old data", out[0].Name)
	}
	if aside, _ := filepath.Glob(filepath.Join(out[0].Cfg.Root, "var/lib/etcd/member.outside-restore-*")); len(aside) != 1 {
		t.Fatalf("%s: its old data is not kept aside: %v", out[0].Name, aside)
	}
}

// backupNow takes a verified backup through h's member, as the uploader
// does, and returns its name.
func backupNow(t *testing.T, h *host) string {
	t.Helper()
	s, err := member.Open(ctxT(t), h.Cfg, h.Deps())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	name, err := s.Backup(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return name
}
