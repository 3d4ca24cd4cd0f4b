package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/restore"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

func getAll(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	rc, _, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func put(t *testing.T, st store.Store, key string, b []byte) {
	t.Helper()
	if _, err := st.Put(context.Background(), key, bytes.NewReader(b), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptBackupsAreRefused: a flipped bit, a truncated object, a wrong
// integrity record: verify fails with ErrCorrupt, and restore refuses
// without creating the data directory. Against a directory and MinIO.
func TestCorruptBackupsAreRefused(t *testing.T) {
	pki := testenv.NewPKI(t)
	m := testenv.StartEtcdCluster(t, "3.6.16", 1, pki)[0]
	fill(t, m.Client(t), 500)
	for _, kind := range []string{"file", "minio"} {
		t.Run(kind, func(t *testing.T) {
			st, _, _ := stores(t)[kind](t)
			out := upload(t, m, st)
			dataKey := out.Backup + "/" + etcdmanager.DataFile
			intKey := backup.IntegrityPrefix + out.Backup + ".json"
			goodGz, goodInt := getAll(t, st, dataKey), getAll(t, st, intKey)
			if _, err := backup.Verify(ctxT(t), st, out.Backup, ""); err != nil {
				t.Fatalf("fresh backup does not verify: %v", err)
			}
			for _, tc := range []struct {
				name   string
				gz     func([]byte) []byte
				record func([]byte) []byte
			}{
				{"flipped bit", func(b []byte) []byte { b = bytes.Clone(b); b[len(b)/2] ^= 0x10; return b }, nil},
				{"truncated", func(b []byte) []byte { return b[:len(b)*2/3] }, nil},
				{"wrong integrity record", nil, func(b []byte) []byte {
					var in map[string]any
					json.Unmarshal(b, &in)
					in["gzipSHA256"] = strings.Repeat("0", 64)
					out, _ := json.Marshal(in)
					return out
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					if tc.gz != nil {
						put(t, st, dataKey, tc.gz(goodGz))
					}
					if tc.record != nil {
						put(t, st, intKey, tc.record(goodInt))
					}
					t.Cleanup(func() { put(t, st, dataKey, goodGz); put(t, st, intKey, goodInt) })
					_, err := backup.Verify(ctxT(t), st, out.Backup, "")
					if !errors.Is(err, backup.ErrCorrupt) {
						t.Fatalf("verify: %v, want ErrCorrupt", err)
					}
					dataDir := filepath.Join(t.TempDir(), "data")
					_, err = restore.Local(ctxT(t), st, restore.Config{Backup: out.Backup, DataDir: dataDir, Name: "x", InitialCluster: "x=https://127.0.0.1:2380"}, quiet())
					if !errors.Is(err, backup.ErrCorrupt) {
						t.Fatalf("restore: %v, want ErrCorrupt", err)
					}
					if _, serr := os.Stat(dataDir); !errors.Is(serr, os.ErrNotExist) {
						t.Fatalf("refused restore left %s behind", dataDir)
					}
					leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dataDir), ".etcdadm-restore-*"))
					if len(leftovers) != 0 {
						t.Fatalf("refused restore left scratch files: %v", leftovers)
					}
				})
			}
			// Without our record (as etcd-manager writes them) the embedded
			// snapshot hash still catches a corrupt snapshot...
			if err := st.Delete(context.Background(), intKey); err != nil {
				t.Fatal(err)
			}
			rep, err := backup.Verify(ctxT(t), st, out.Backup, "")
			if err != nil || rep.CheckedIntegrity {
				t.Fatalf("etcd-manager-style backup: %+v %v", rep, err)
			}
			put(t, st, dataKey, regzipFlipped(t, goodGz))
			if _, err := backup.Verify(ctxT(t), st, out.Backup, ""); !errors.Is(err, backup.ErrCorrupt) {
				t.Fatalf("re-gzipped corrupt snapshot without record: %v, want ErrCorrupt", err)
			}
		})
	}
}

// regzipFlipped decompresses a backup, flips one bit of the snapshot and
// compresses it again: a valid gzip holding a corrupt snapshot.
func regzipFlipped(t *testing.T, gz []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	snap[len(snap)/2] ^= 1
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(snap)
	zw.Close()
	return b.Bytes()
}
