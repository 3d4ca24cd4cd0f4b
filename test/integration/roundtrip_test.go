package integration

import (
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/restore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestRoundTrip: for each etcd version, write keys (some with leases), back
// up, restore into a new data dir, start etcd on it: same keys, same
// revision, leases intact. Each version against a directory store and one
// S3 server, so both S3 implementations see every path.
func TestRoundTrip(t *testing.T) {
	pki := testenv.NewPKI(t)
	s3For := map[string]string{"3.5.35": "versitygw", "3.6.16": "minio", "3.7.3": "minio"}
	for _, version := range testenv.EtcdVersions() {
		for _, kind := range []string{"file", s3For[version]} {
			t.Run(version+"/"+kind, func(t *testing.T) {
				st, _, _ := stores(t)[kind](t)
				src := testenv.StartEtcdCluster(t, version, 1, pki)[0]
				want := fill(t, src.Client(t), 300)
				out := upload(t, src, st)
				if out.Skipped || out.Integrity.EtcdVersion != version {
					t.Fatalf("outcome %+v", out)
				}
				if out.Integrity.MinRevision != want.revision {
					t.Errorf("integrity record says revision >= %d, cluster was at %d", out.Integrity.MinRevision, want.revision)
				}
				src.Stop()

				peer := testenv.FreePort(t)
				dataDir := filepath.Join(t.TempDir(), "restored")
				initial := "restored=https://127.0.0.1:" + strconv.Itoa(peer)
				res, err := restore.Local(ctxT(t), st, restore.Config{Backup: "latest", DataDir: dataDir, Name: "restored", InitialCluster: initial}, quiet())
				if err != nil {
					t.Fatal(err)
				}
				if res.Report.Backup.Name != out.Backup || !res.Report.CheckedIntegrity {
					t.Fatalf("restored %+v, want verified backup %s", res.Report, out.Backup)
				}
				if res.Stats.Revision != want.revision || res.Stats.LiveKeys != int64(len(want.kv)) {
					t.Errorf("restore reports revision %d and %d keys, want %d and %d", res.Stats.Revision, res.Stats.LiveKeys, want.revision, len(want.kv))
				}
				m := testenv.StartEtcdMember(t, version, testenv.MemberConfig{Name: "restored", DataDir: dataDir, PeerPort: peer, InitialCluster: initial}, pki)
				check(t, m.Client(t), want)

				// Restoring again into the same directory is refused and
				// changes nothing.
				_, err = restore.Local(ctxT(t), st, restore.Config{Backup: "latest", DataDir: dataDir, Name: "restored", InitialCluster: initial}, quiet())
				if !errors.Is(err, restore.ErrDataDirNotEmpty) {
					t.Fatalf("second restore into %s: %v, want ErrDataDirNotEmpty", dataDir, err)
				}
				check(t, m.Client(t), want)
			})
		}
	}
}

// TestListShowsOnlyCompleteBackups: what the operator sees in a list.
func TestListShowsOnlyCompleteBackups(t *testing.T) {
	pki := testenv.NewPKI(t)
	st, _, _ := stores(t)["file"](t)
	m := testenv.StartEtcdCluster(t, "3.6.16", 1, pki)[0]
	fill(t, m.Client(t), 20)
	a := upload(t, m, st)
	b := upload(t, m, st)
	list, err := backup.List(ctxT(t), st)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != a.Backup || list[1].Name != b.Backup {
		t.Fatalf("listed %v, want [%s %s]", names(list), a.Backup, b.Backup)
	}
	if list[1].Meta.ClusterSpec == nil || list[1].Meta.ClusterSpec.MemberCount != 1 || list[1].Integrity == nil {
		t.Fatalf("backup %+v lacks its cluster spec or integrity record", list[1])
	}
}

func names(list []backup.Backup) []string {
	var out []string
	for _, b := range list {
		out = append(out, b.Name)
	}
	return out
}
