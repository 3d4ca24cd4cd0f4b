package filestore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storetest"
)

func open(t *testing.T) store.Store {
	s, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open)
}

// A writer that crashed mid-Put leaves its temp file; nobody sees it and
// CleanIncomplete removes it once it is old enough.
func TestCrashedWriterLeftovers(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	s, err := filestore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutBytes(ctx, s, "snap/done", []byte("x"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(root, "snap", ".tmp-big-0123456789ab")
	fresh := filepath.Join(root, ".tmp-other-ba9876543210")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string][]store.Entry{
		"":      {{Name: "snap", Dir: true}},
		"snap/": {{Name: "done"}},
	} {
		got, err := s.List(ctx, prefix)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("List %q = %v, %v; want %v", prefix, got, err, want)
		}
	}
	n, err := s.CleanIncomplete(ctx, "", 10*time.Minute)
	if err != nil || n != 1 {
		t.Errorf("CleanIncomplete older than 10m = %d, %v; want 1, nil", n, err)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old temp file still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temp file (a Put maybe still running) was removed: %v", err)
	}
	if n, err := s.CleanIncomplete(ctx, "", 0); err != nil || n != 1 {
		t.Errorf("CleanIncomplete older than 0 = %d, %v; want 1, nil", n, err)
	}
	if _, err := os.Stat(filepath.Join(root, "snap", "done")); err != nil {
		t.Errorf("complete object removed: %v", err)
	}
}

// Names the store uses for itself are not keys: otherwise List would hide
// such an object and CleanIncomplete would delete it.
func TestReservedNames(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	for _, key := range []string{".tmp-x", "a/.tmp-snapshot", ".lock"} {
		if _, err := store.PutBytes(ctx, s, key, []byte("x"), store.PutOptions{}); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("Put %q: %v, want ErrBadKey", key, err)
		}
	}
	if _, err := store.PutBytes(ctx, s, "a/.lock", []byte("x"), store.PutOptions{}); err != nil {
		t.Errorf("Put a/.lock: %v (only the top-level .lock is the store's)", err)
	}
}

// A compare-and-swap write waits for the store's lock no longer than its
// context: on NFS a hung client can hold the lock for minutes.
func TestCompareAndSwapLockBoundedByContext(t *testing.T) {
	root := t.TempDir()
	s, err := filestore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	info, err := store.PutBytes(t.Context(), s, "claim", []byte("old"), store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder, err := os.OpenFile(filepath.Join(root, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = store.PutBytes(ctx, s, "claim", []byte("new"), store.PutOptions{IfMatch: info.ETag})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock held elsewhere: %v, want context.DeadlineExceeded", err)
	}
	if b, _, err := store.GetBytes(t.Context(), s, "claim", 100); err != nil || string(b) != "old" {
		t.Errorf("after the failed write: %q %v, want \"old\"", b, err)
	}
	holder.Close() // releases the lock
	if _, err := store.PutBytes(t.Context(), s, "claim", []byte("new"), store.PutOptions{IfMatch: info.ETag}); err != nil {
		t.Errorf("lock released: %v", err)
	}
}

// The store holds the CA's key: whatever the umask of the process that
// writes (a unit's 0022, an operator's 0000), every object is 0600 and
// every directory the store makes 0700.
func TestModesWhateverTheUmask(t *testing.T) {
	for _, umask := range []int{0o000, 0o022, 0o077} {
		old := syscall.Umask(umask)
		root := t.TempDir()
		s, err := filestore.New(root)
		if err != nil {
			syscall.Umask(old)
			t.Fatal(err)
		}
		ctx := t.Context()
		_, err1 := store.PutBytes(ctx, s, "etcdadm/pki/ca.key", []byte("key"), store.PutOptions{})
		_, err2 := store.PutBytes(ctx, s, "etcdadm/peers/a.json", []byte("{}"), store.PutOptions{IfNoneMatch: true})
		info, err3 := store.PutBytes(ctx, s, "control/etcd-cluster-spec", []byte("{}"), store.PutOptions{})
		_, err4 := store.PutBytes(ctx, s, "control/etcd-cluster-spec", []byte("{ }"), store.PutOptions{IfMatch: info.ETag})
		syscall.Umask(old)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			t.Fatalf("umask %04o: %v", umask, err)
		}
		err = filepath.WalkDir(root, func(p string, de os.DirEntry, err error) error {
			if err != nil || p == root {
				return err
			}
			fi, err := de.Info()
			if err != nil {
				return err
			}
			want := os.FileMode(0o600)
			if de.IsDir() {
				want = 0o700 | os.ModeDir
			}
			if fi.Mode() != want {
				t.Errorf("umask %04o: %s is %v, want %v", umask, p[len(root):], fi.Mode(), want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
