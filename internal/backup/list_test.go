package backup

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// storeWithBadNewest holds three backups an hour apart; the newest one's
// meta file does not parse. It returns the store and the names, oldest
// first.
func storeWithBadNewest(t *testing.T) (store.Store, []string) {
	t.Helper()
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var names []string
	for i := range 3 {
		res, err := Write(t.Context(), st, Snapshot{Data: bytes.NewReader(fakeSnapshot(4096)), EtcdVersion: "3.6.16"}, t0.Add(time.Duration(i)*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, res.Name)
	}
	if _, err := store.PutBytes(t.Context(), st, names[2]+"/"+etcdmanager.MetaFile, []byte("{not json"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return st, names
}

func TestListMarksUnreadableBackup(t *testing.T) {
	st, names := storeWithBadNewest(t)
	list, err := List(t.Context(), st)
	if err != nil {
		t.Fatalf("one bad meta file failed the whole list: %v", err)
	}
	if len(list) != 3 {
		t.Fatalf("listed %d backups, want all 3", len(list))
	}
	for i, b := range list[:2] {
		if b.Name != names[i] || b.Err != nil || b.Meta.EtcdVersion != "3.6.16" {
			t.Errorf("good backup %d: %s err=%v meta=%+v", i, b.Name, b.Err, b.Meta)
		}
	}
	if bad := list[2]; bad.Name != names[2] || !errors.Is(bad.Err, ErrCorrupt) {
		t.Errorf("bad backup listed as %s err=%v, want %s marked corrupt", bad.Name, bad.Err, names[2])
	}
}

func TestLatestSkipsUnreadableBackup(t *testing.T) {
	st, names := storeWithBadNewest(t)
	b, err := Get(t.Context(), st, "latest")
	if err != nil || b.Name != names[1] {
		t.Fatalf("latest = %s, %v; want the newest readable backup %s", b.Name, err, names[1])
	}
	rep, err := Verify(t.Context(), st, "latest", "")
	if err != nil || rep.Backup.Name != names[1] || !rep.CheckedIntegrity {
		t.Fatalf("verify latest = %s (integrity checked %v), %v; want %s verified", rep.Backup.Name, rep.CheckedIntegrity, err, names[1])
	}
	// Asked for by name, the unreadable backup is an error, not a result.
	if _, err := Get(t.Context(), st, names[2]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("get %s: %v, want ErrCorrupt", names[2], err)
	}
}

func TestLatestNoneReadable(t *testing.T) {
	st, names := storeWithBadNewest(t)
	for _, n := range names[:2] {
		if _, err := store.PutBytes(t.Context(), st, integrityKey(n), []byte("[]"), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := List(t.Context(), st)
	if err != nil || len(list) != 3 {
		t.Fatalf("list: %d backups, %v", len(list), err)
	}
	if _, err := Get(t.Context(), st, "latest"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("latest with every backup unreadable: %v, want ErrCorrupt", err)
	}
}
