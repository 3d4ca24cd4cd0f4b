package dns

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func hosts(pairs ...string) []Host {
	var out []Host
	for i := 0; i < len(pairs); i += 2 {
		h := Host{FQDN: pairs[i]}
		for _, a := range strings.Split(pairs[i+1], ",") {
			if a != "" {
				h.Addresses = append(h.Addresses, netip.MustParseAddr(a))
			}
		}
		out = append(out, h)
	}
	return out
}

const block1 = hostsBegin + "\n10.0.0.1\tetcd-a.c.test\n" + hostsEnd + "\n"

func TestReplaceHostsBlock(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		hosts    []Host
		want     string
		err      bool
	}{
		{"add to empty", "", hosts("etcd-a.c.test", "10.0.0.1"), block1, false},
		{"add after lines, missing final newline", "127.0.0.1 localhost", hosts("etcd-a.c.test", "10.0.0.1"), "127.0.0.1 localhost\n" + block1, false},
		{"update in the middle, lines around kept", "# top\n127.0.0.1  localhost\n" + block1 + "::1 ip6-localhost\n",
			hosts("etcd-a.c.test", "10.0.0.9", "etcd-b.c.test", "10.0.0.2,fd00::2"),
			"# top\n127.0.0.1  localhost\n" + hostsBegin + "\n10.0.0.9\tetcd-a.c.test\n10.0.0.2\tetcd-b.c.test\nfd00::2\tetcd-b.c.test\n" + hostsEnd + "\n::1 ip6-localhost\n", false},
		{"remove the block when nothing resolves", "a\n" + block1 + "b\n", hosts("etcd-a.c.test", ""), "a\nb\n", false},
		{"nothing to do", "a\n", nil, "a\n", false},
		{"a look-alike line is not a marker", "x" + hostsBegin + "\n", hosts("etcd-a.c.test", "10.0.0.1"), "x" + hostsBegin + "\n" + block1, false},
		{"unterminated block is refused", "a\n" + hostsBegin + "\n10.0.0.1 x\n", hosts("etcd-a.c.test", "10.0.0.1"), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReplaceHostsBlock([]byte(tc.in), tc.hosts)
			if tc.err {
				if err == nil {
					t.Fatalf("want an error, got %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestHostsFileSync(t *testing.T) {
	for _, inPlace := range []bool{false, true} {
		name := "atomic"
		if inPlace {
			name = "in place"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "hosts")
			orig := "127.0.0.1 localhost\n# keep me\n"
			if err := os.WriteFile(path, []byte(orig), 0o640); err != nil {
				t.Fatal(err)
			}
			h := &HostsFile{Path: path, InPlace: inPlace}
			ino := inode(t, path)

			changed, err := h.Sync(ctx, hosts("etcd-a.c.test", "10.0.0.1"))
			if err != nil || !changed {
				t.Fatalf("first sync: changed %v, %v", changed, err)
			}
			b, _ := os.ReadFile(path)
			if string(b) != orig+block1 {
				t.Fatalf("got\n%s", b)
			}
			fi, _ := os.Stat(path)
			if fi.Mode().Perm() != 0o640 {
				t.Errorf("mode %v, want 0640 kept", fi.Mode().Perm())
			}
			if replaced := inode(t, path) != ino; replaced == inPlace {
				t.Errorf("file replaced by rename: %v, want %v", replaced, !inPlace)
			}
			if !inPlace {
				if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".hosts.tmp*")); len(m) > 0 {
					t.Errorf("temp files left: %v", m)
				}
			}

			// Unchanged: no write at all (the mtime stays in the past).
			past := time.Now().Add(-time.Hour).Truncate(time.Second)
			os.Chtimes(path, past, past)
			ino = inode(t, path)
			changed, err = h.Sync(ctx, hosts("etcd-a.c.test", "10.0.0.1"))
			if err != nil || changed {
				t.Fatalf("repeat sync: changed %v, %v", changed, err)
			}
			if fi, _ := os.Stat(path); !fi.ModTime().Equal(past) || inode(t, path) != ino {
				t.Errorf("unchanged sync rewrote the file")
			}

			// Someone edits outside the block; we update and then remove ours.
			b, _ = os.ReadFile(path)
			os.WriteFile(path, append(b, "10.9.9.9 added-later\n"...), 0o640)
			if _, err := h.Sync(ctx, hosts("etcd-a.c.test", "10.0.0.2", "etcd-b.c.test", "10.0.0.3")); err != nil {
				t.Fatal(err)
			}
			b, _ = os.ReadFile(path)
			want := orig + hostsBegin + "\n10.0.0.2\tetcd-a.c.test\n10.0.0.3\tetcd-b.c.test\n" + hostsEnd + "\n10.9.9.9 added-later\n"
			if string(b) != want {
				t.Fatalf("update: got\n%s\nwant\n%s", b, want)
			}
			if _, err := h.Sync(ctx, hosts("etcd-a.c.test", "", "etcd-b.c.test", "")); err != nil {
				t.Fatal(err)
			}
			b, _ = os.ReadFile(path)
			if string(b) != orig+"10.9.9.9 added-later\n" {
				t.Fatalf("remove: got\n%s", b)
			}
		})
	}
}

// A read-only directory (the unit's ReadWritePaths=/etc/hosts case) falls
// back to the in-place write.
// Under the unit only the hosts file is writable, not /etc: the atomic
// rename fails and the in-place write takes over. Without root the
// directory is made read-only; root ignores directory modes, so there the
// file is bind-mounted onto itself, as ReadWritePaths=/etc/hosts does,
// and a rename onto it fails with EBUSY.
func TestHostsFileReadOnlyDir(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hosts")
	if err := os.WriteFile(path, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := syscall.Mount(path, path, "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("bind-mount %s onto itself (root without CAP_SYS_ADMIN?): %v", path, err)
		}
		t.Cleanup(func() {
			if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", path, err)
			}
		})
	} else {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
	}
	ino := func() uint64 {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := ino()
	h := &HostsFile{Path: path}
	if _, err := h.Sync(context.Background(), hosts("etcd-a.c.test", "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "etcd-a.c.test") || !strings.HasPrefix(string(b), "127.0.0.1 localhost\n") {
		t.Fatalf("got\n%s", b)
	}
	if after := ino(); after != before {
		t.Errorf("inode %d became %d: the file was replaced, not rewritten in place", before, after)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*")); len(m) != 0 {
		t.Errorf("temp files left: %v", m)
	}
}

// The in-place write waits for another writer's flock no longer than the
// round's context, and leaves the file as it was.
func TestHostsFileInPlaceLockBoundedByContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	holder, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	h := &HostsFile{Path: path, InPlace: true}
	if _, err := h.Sync(ctx, hosts("etcd-a.c.test", "10.0.0.1")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hosts file locked elsewhere: %v, want context.DeadlineExceeded", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "127.0.0.1 localhost\n" {
		t.Errorf("file changed without the lock:\n%s", b)
	}
}
