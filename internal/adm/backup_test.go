package adm

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// runEtcdadm runs "etcdadm ARGS" in process; cli.Exit errors are returned
// instead of exiting.
func runEtcdadm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := App(&out)
	app.ErrWriter = &bytes.Buffer{}
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.Run(Interspersed(app, append([]string{"etcdadm"}, args...)))
	return out.String(), err
}

// A snapshot as etcd streams it: a database image and its sha256.
func fakeSnapshot() []byte {
	db := bytes.Repeat([]byte("etcd"), 1024)
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

func TestBackupListShowsUnreadableBackup(t *testing.T) {
	t.Setenv("ETCDADM_STORE", "")
	dir := t.TempDir()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	var names []string
	for i := range 2 {
		res, err := backup.Write(t.Context(), st, backup.Snapshot{Data: bytes.NewReader(fakeSnapshot()), EtcdVersion: "3.6.16"}, t0.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, res.Name)
	}
	good, bad := names[0], names[1]
	if _, err := store.PutBytes(t.Context(), st, bad+"/"+etcdmanager.MetaFile, []byte(`{"etcdVersion": 3}`), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	url := "file://" + dir

	out, err := runEtcdadm(t, "backup", "list", "--store", url)
	if err != nil {
		t.Fatalf("backup list failed: %v", err)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if n, _, ok := strings.Cut(l, " "); ok {
			lines[n] = l
		}
	}
	if l := lines[good]; !strings.Contains(l, "3.6.16") || !strings.Contains(l, "sha256") {
		t.Errorf("good backup %s not listed as readable:\n%s", good, out)
	}
	if l := lines[bad]; !strings.Contains(l, "UNREADABLE") || !strings.Contains(l, "_etcd_backup.meta") {
		t.Errorf("bad backup %s not listed as unreadable with the reason:\n%s", bad, out)
	}

	out, err = runEtcdadm(t, "backup", "list", "--store", url, "-o", "json")
	if err != nil {
		t.Fatalf("backup list -o json failed: %v", err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0]["error"] != nil || rows[1]["verified"] != "UNREADABLE" || rows[1]["error"] == nil {
		t.Errorf("json rows: %+v, want the good one, then the bad one with its error", rows)
	}

	out, err = runEtcdadm(t, "backup", "verify", "latest", "--store", url)
	if err != nil || !strings.Contains(out, "backup "+good+": OK") {
		t.Errorf("verify latest: %v\n%s\nwant the newest readable backup %s verified", err, out, good)
	}
}
