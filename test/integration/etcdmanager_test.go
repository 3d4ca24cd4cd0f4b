package integration

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/restore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestEtcdManagerBackup: a backup laid out as etcd-manager writes it
// (etcdctl snapshot, gzip, protobuf-JSON meta, no integrity record) is
// listed, verified and restored.
func TestEtcdManagerBackup(t *testing.T) {
	const version = "3.5.35"
	pki := testenv.NewPKI(t)
	m := testenv.StartEtcdCluster(t, version, 1, pki)[0]
	want := fill(t, m.Client(t), 200)
	snapFile := filepath.Join(t.TempDir(), "snapshot.db")
	cmd := exec.Command(testenv.EtcdBin(t, version, "etcdctl"), "snapshot", "save", snapFile,
		"--endpoints", m.Endpoint(), "--cacert", pki.CACert, "--cert", pki.ClientCert, "--key", pki.ClientKey)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
	}
	m.Stop()
	snap, err := os.ReadFile(snapFile)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(snap)
	zw.Close()

	for _, kind := range []string{"file", "versitygw"} {
		t.Run(kind, func(t *testing.T) {
			st, _, _ := stores(t)[kind](t)
			name := etcdmanager.BackupName(time.Now().Add(-time.Hour), 1)
			put(t, st, name+"/"+etcdmanager.DataFile, gz.Bytes())
			put(t, st, name+"/"+etcdmanager.MetaFile, []byte(`{
  "etcdVersion": "`+version+`",
  "timestamp": "`+strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)+`",
  "clusterSpec": {
    "memberCount": 1,
    "etcdVersion": "`+version+`"
  }
}`))
			list, err := backup.List(ctxT(t), st)
			if err != nil || len(list) != 1 || list[0].Integrity != nil || list[0].Meta.EtcdVersion != version {
				t.Fatalf("list: %+v %v", list, err)
			}
			rep, err := backup.Verify(ctxT(t), st, "latest", "")
			if err != nil || rep.CheckedIntegrity || rep.SnapshotSize != int64(len(snap)) {
				t.Fatalf("verify: %+v %v", rep, err)
			}
			peer := testenv.FreePort(t)
			initial := "m=https://127.0.0.1:" + strconv.Itoa(peer)
			dataDir := filepath.Join(t.TempDir(), "data")
			if _, err := restore.Local(ctxT(t), st, restore.Config{Backup: name, DataDir: dataDir, Name: "m", InitialCluster: initial}, quiet()); err != nil {
				t.Fatal(err)
			}
			r := testenv.StartEtcdMember(t, version, testenv.MemberConfig{Name: "m", DataDir: dataDir, PeerPort: peer, InitialCluster: initial}, pki)
			check(t, r.Client(t), want)
		})
	}
}
