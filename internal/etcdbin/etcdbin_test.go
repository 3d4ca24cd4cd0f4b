package etcdbin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

func writeVersion(t *testing.T, dir, v string) {
	t.Helper()
	vd := filepath.Join(dir, "v"+v)
	if err := os.MkdirAll(vd, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range Programs() {
		if err := os.WriteFile(filepath.Join(vd, p), []byte("#!/bin/sh\necho "+p+" "+v+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// A version a merged sysext image offers is on the host: listed, and
// copied into /opt/etcd when the host needs it, with no store (a nil
// store would fail any read).
func TestEnsureFromExtension(t *testing.T) {
	root := t.TempDir()
	d := HostDir(root)
	writeVersion(t, string(d), "3.5.35")
	writeVersion(t, filepath.Join(root, ExtensionDir), "3.6.16")
	writeVersion(t, filepath.Join(root, ExtensionDir), "3.5.35")
	local, err := d.Local()
	if err != nil || len(local) != 2 || local[0].String() != "3.5.35" || local[1].String() != "3.6.16" {
		t.Fatalf("Local: %v, %v; want 3.5.35 and 3.6.16 once each", local, err)
	}
	v := etcdversion.MustParse("3.6.16")
	if d.Has(v) {
		t.Fatal("3.6.16 in /opt/etcd before Ensure")
	}
	if err := d.Ensure(context.Background(), v, Releases{}); err != nil {
		t.Fatalf("Ensure from the image: %v", err)
	}
	if err := os.Symlink("v"+v.String(), d.CurrentLink()); err != nil { // as localetcd.Use does
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(string(d), "current", "etcdctl"))
	if err != nil || string(b) != "#!/bin/sh\necho etcdctl 3.6.16\n" {
		t.Fatalf("current/etcdctl: %q, %v", b, err)
	}
	// The image unmerged (sysupdate moved to the next patch): the copy
	// stays.
	if err := os.RemoveAll(filepath.Join(root, "usr")); err != nil {
		t.Fatal(err)
	}
	if !d.Has(v) {
		t.Error("3.6.16 gone from /opt/etcd with its image")
	}
	// Neither in /opt/etcd nor in an image: the store is asked.
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(context.Background(), etcdversion.MustParse("3.7.3"), Releases{Store: st}); !errors.Is(err, ErrNoRelease) {
		t.Errorf("Ensure of a version nowhere: %v, want ErrNoRelease", err)
	}
}

// EnsureCurrent: /opt/etcd/current written by Ignition before the version
// it names is there (a sysext host) gets that version from the merged
// image; a present version, or no link at all, needs nothing.
func TestEnsureCurrent(t *testing.T) {
	root := t.TempDir()
	d := HostDir(root)
	if err := d.EnsureCurrent(context.Background(), Releases{}); err != nil {
		t.Fatalf("no current link: %v", err)
	}
	if err := os.MkdirAll(string(d), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("v3.6.16", filepath.Join(string(d), "current")); err != nil {
		t.Fatal(err)
	}
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	err = d.EnsureCurrent(context.Background(), Releases{Store: st})
	if !errors.Is(err, ErrNoRelease) || !strings.Contains(err.Error(), "current names etcd 3.6.16") {
		t.Errorf("nowhere to get 3.6.16 from: %v, want ErrNoRelease naming the link", err)
	}
	writeVersion(t, filepath.Join(root, ExtensionDir), "3.6.16")
	if err := d.EnsureCurrent(context.Background(), Releases{}); err != nil {
		t.Fatalf("from the image: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(string(d), "current", "etcd")); err != nil || string(b) != "#!/bin/sh\necho etcd 3.6.16\n" {
		t.Errorf("current/etcd after EnsureCurrent: %q, %v", b, err)
	}
	if err := os.RemoveAll(filepath.Join(root, "usr")); err != nil {
		t.Fatal(err)
	}
	if err := d.EnsureCurrent(context.Background(), Releases{}); err != nil {
		t.Errorf("present in /opt/etcd, image gone: %v", err)
	}
}

// A version installed under member join's umask (0077) is still runnable
// by the etcd user: etcd.service failed with "Permission denied" on a
// sysext host before.
func TestInstallIgnoresUmask(t *testing.T) {
	root := t.TempDir()
	d := HostDir(root)
	writeVersion(t, filepath.Join(root, ExtensionDir), "3.6.16")
	old := syscall.Umask(0o077)
	err := d.Ensure(context.Background(), etcdversion.MustParse("3.6.16"), Releases{})
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]string{""}, Programs()...) {
		st, err := os.Stat(filepath.Join(string(d), "v3.6.16", p))
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("v3.6.16/%s: %v, %v; want mode 0755", p, st.Mode(), err)
		}
	}
}
