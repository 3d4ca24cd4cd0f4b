package volume_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/internal/volume"
)

const imgSize = 64 << 20

// host is one simulated host: its own root, sharing the image directory
// and store of the test.
type host struct {
	cfg  volume.Config
	deps volume.Deps
}

type fixture struct {
	t      *testing.T
	imgDir string
	store  store.Store
	driver *volume.Loopfile
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the volume tests attach loop devices and mount: run them as root (go test -exec sudo)")
	}
	for _, tool := range []string{"losetup", "blkid", "mkfs.ext4", "e2fsck", "resize2fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install util-linux and e2fsprogs", tool)
		}
	}
}

func newFixture(t *testing.T) *fixture {
	requireRoot(t)
	s, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, imgDir: t.TempDir(), store: s}
	f.driver = &volume.Loopfile{Dir: f.imgDir, Size: imgSize}
	// Detach every loop device of the test's images last, even on
	// failure (cleanups run in reverse order: unmounts come first).
	t.Cleanup(func() {
		imgs, _ := filepath.Glob(filepath.Join(f.imgDir, "*.img"))
		for _, img := range imgs {
			detachImage(t, img)
		}
	})
	return f
}

func detachImage(t *testing.T, img string) {
	if err := volume.DetachImage(context.Background(), img); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// host returns a pool host with its own root; its data directory is
// unmounted at cleanup.
func (f *fixture) host(id string) *host {
	root := f.t.TempDir()
	target := filepath.Join(root, volume.DataDir)
	f.t.Cleanup(func() { unmountAll(f.t, target) })
	return &host{
		cfg: volume.Config{Provider: volume.ProviderPool, Volumes: volume.Names(3), Lease: 2 * time.Minute, HostID: id, Root: root},
		deps: volume.Deps{Store: f.store, Driver: f.driver, Mounter: volume.PlainMounter{},
			Log: testLogger(f.t), Attempts: 2, Backoff: time.Millisecond},
	}
}

func unmountAll(t *testing.T, target string) {
	for range 10 {
		err := unix.Unmount(target, 0)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return
		}
		if err != nil {
			t.Errorf("cleanup: unmount %s: %v", target, err)
			return
		}
	}
}

func mountedDevice(t *testing.T, target string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte(" "+target+" "))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func blkidValue(t *testing.T, dev, tag string) string {
	t.Helper()
	out, err := exec.Command("blkid", "-p", "-s", tag, "-o", "value", dev).Output()
	if err != nil {
		t.Fatalf("blkid %s: %v", dev, err)
	}
	return strings.TrimSpace(string(out))
}

func TestAttachBlankPool(t *testing.T) {
	f := newFixture(t)
	h := f.host("host-a")
	id, err := volume.Attach(t.Context(), h.cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	if id.Member != "etcd-a" || id.Volume != "etcd-a" || !strings.HasPrefix(id.Device, "/dev/loop") {
		t.Fatalf("identity %+v, want etcd-a on a loop device", id)
	}
	target := filepath.Join(h.cfg.Root, volume.DataDir)
	if !mountedDevice(t, target) {
		t.Fatalf("%s is not mounted", target)
	}
	if got := blkidValue(t, id.Device, "LABEL"); got != "etcd-a" {
		t.Errorf("label %q, want etcd-a", got)
	}
	want := "ETCDADM_MEMBER_NAME=etcd-a\nETCDADM_VOLUME=etcd-a\nETCDADM_DEVICE=" + id.Device + "\n"
	if got := readFile(t, filepath.Join(h.cfg.Root, volume.IdentityFile)); !strings.HasSuffix(got, want) {
		t.Errorf("identity.env:\n%s\nwant it to end in:\n%s", got, want)
	}
	if err := os.WriteFile(filepath.Join(target, "member"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Re-run: same identity, same device, data untouched.
	again, err := volume.Attach(t.Context(), h.cfg, h.deps)
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if again.Volume != id.Volume || again.Device != id.Device || again.Claim.Generation != id.Claim.Generation {
		t.Errorf("re-run gave %+v, first %+v", again, id)
	}
	if got := readFile(t, filepath.Join(target, "member")); got != "data" {
		t.Errorf("data after re-run: %q", got)
	}
	r, err := volume.Renew(t.Context(), h.cfg, h.deps)
	if err != nil || r.Volume != "etcd-a" || r.Verdict.Action != volume.ActKeep || r.Verdict.Source != "store" {
		t.Fatalf("renew: %+v, %v", r, err)
	}
	c := r.Store
	// The metrics give the lease as the renewal left it; a failed run
	// says so and keeps that expiry (an alert counts down to it).
	prom := filepath.Join(t.TempDir(), "etcd_volume.prom")
	for _, runErr := range []error{nil, errors.New("store down")} {
		if err := volume.WriteMetrics(prom, h.cfg, runErr, time.Unix(1000, 0)); err != nil {
			t.Fatal(err)
		}
		got := readFile(t, prom)
		for _, want := range []string{
			fmt.Sprintf("etcdadm_volume_lease_expiry_timestamp_seconds{volume=\"etcd-a\"} %d\n", c.Until.Unix()),
			fmt.Sprintf("etcdadm_volume_claim_expiry_timestamp_seconds{volume=\"etcd-a\",source=\"store\"} %d\n", c.Until.Unix()),
			"etcdadm_volume_claim_confirmed{volume=\"etcd-a\",source=\"store\"} 1\n",
			"etcdadm_volume_claim_confirmed{volume=\"etcd-a\",source=\"etcd\"} 0\n",
			"etcdadm_volume_fenced 0\n",
			fmt.Sprintf("etcdadm_volume_lease_seconds %g\n", h.cfg.Lease.Seconds()),
			"etcdadm_volume_last_renew_timestamp_seconds 1000\n",
			fmt.Sprintf("etcdadm_volume_last_renew_success %d\n", map[bool]int{true: 1}[runErr == nil]),
		} {
			if !strings.Contains(got, want) {
				t.Errorf("after a run with error %v, metrics lack %q:\n%s", runErr, want, got)
			}
		}
	}

	// A second host gets the next volume, not this one.
	h2 := f.host("host-b")
	id2, err := volume.Attach(t.Context(), h2.cfg, h2.deps)
	if err != nil {
		t.Fatal(err)
	}
	if id2.Volume != "etcd-b" || id2.Device == id.Device {
		t.Errorf("second host got %+v", id2)
	}
}

func TestAttachRefusesDoubleMount(t *testing.T) {
	f := newFixture(t)
	h := f.host("host-a")
	id, err := volume.Attach(t.Context(), h.cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	// The same host id under another root: same claim, same loop device,
	// which is already mounted elsewhere.
	other := f.host("host-a")
	_, err = volume.Attach(t.Context(), other.cfg, other.deps)
	if !errors.Is(err, volume.ErrInUse) {
		t.Fatalf("second mount of %s: %v, want ErrInUse", id.Device, err)
	}
	if mountedDevice(t, filepath.Join(other.cfg.Root, volume.DataDir)) {
		t.Error("mounted anyway")
	}
	if _, err := os.Stat(filepath.Join(other.cfg.Root, volume.IdentityFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("identity.env written on refusal: %v", err)
	}
}

func TestAttachKeepsExistingData(t *testing.T) {
	f := newFixture(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "keep"), []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	img := f.driver.Image("etcd-a")
	if out, err := exec.Command("mkfs.ext4", "-q", "-L", "etcd-a", "-d", src, img, "32M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v: %s", err, out)
	}
	uuid := blkidValue(t, img, "UUID")

	h := f.host("host-a")
	id, err := volume.Attach(t.Context(), h.cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	if got := blkidValue(t, id.Device, "UUID"); got != uuid {
		t.Errorf("UUID %s, was %s: the file system was re-created", got, uuid)
	}
	if got := readFile(t, filepath.Join(h.cfg.Root, volume.DataDir, "keep")); got != "precious" {
		t.Errorf("data: %q", got)
	}
	// The image grew to --size and resize2fs grew the file system.
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(h.cfg.Root, volume.DataDir), &st); err != nil {
		t.Fatal(err)
	}
	if size := int64(st.Blocks) * st.Bsize; size < 48<<20 {
		t.Errorf("file system is %d bytes after resize, want close to %d", size, imgSize)
	}
}

func TestAttachRefusesForeignData(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, img string)
	}{
		{"garbage", func(t *testing.T, img string) {
			b := bytes.Repeat([]byte("not a file system "), 1000)
			if err := os.WriteFile(img, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"partition-table", func(t *testing.T, img string) {
			// An MBR with one Linux partition from sector 2048 on.
			mbr := make([]byte, 1<<20)
			e := mbr[446:]
			e[4] = 0x83
			binary.LittleEndian.PutUint32(e[8:], 2048)
			binary.LittleEndian.PutUint32(e[12:], imgSize/512-2048)
			mbr[510], mbr[511] = 0x55, 0xaa
			if err := os.WriteFile(img, mbr, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			img := f.driver.Image("etcd-a")
			tc.make(t, img)
			before, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			h := f.host("host-a")
			h.cfg.Volumes = []string{"etcd-a"}
			_, err = volume.Attach(t.Context(), h.cfg, h.deps)
			if !errors.Is(err, volume.ErrNotExt4) {
				t.Fatalf("attach: %v, want ErrNotExt4", err)
			}
			after, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			// The image may have grown (sparse zeros); what was there is intact.
			if !bytes.Equal(after[:len(before)], before) {
				t.Error("the image was written to")
			}
			if mountedDevice(t, filepath.Join(h.cfg.Root, volume.DataDir)) {
				t.Error("mounted anyway")
			}
		})
	}
}

func TestAttachLocal(t *testing.T) {
	f := newFixture(t)
	dev, err := f.driver.Attach(t.Context(), "local")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	t.Cleanup(func() { unmountAll(t, filepath.Join(root, volume.DataDir)) })
	cfg := volume.Config{Provider: volume.ProviderLocal, Name: "etcd-x", Device: dev, Root: root}
	id, err := volume.Attach(t.Context(), cfg, volume.Deps{Mounter: volume.PlainMounter{}, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if id.Member != "etcd-x" || id.Device != dev {
		t.Errorf("identity %+v", id)
	}
	if !mountedDevice(t, filepath.Join(root, volume.DataDir)) {
		t.Error("not mounted")
	}
	// Renew is a no-op for a local volume.
	if c, err := volume.Renew(t.Context(), cfg, volume.Deps{}); c != nil || err != nil {
		t.Errorf("renew local: %+v, %v", c, err)
	}
}

func TestAttachNone(t *testing.T) {
	root := t.TempDir()
	id, err := volume.Attach(context.Background(), volume.Config{Provider: volume.ProviderNone, Root: root}, volume.Deps{})
	if id != nil || err != nil {
		t.Fatalf("none: %+v, %v", id, err)
	}
	if des, _ := os.ReadDir(root); len(des) != 0 {
		t.Errorf("none wrote %v", des)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  volume.Config
		want string // "" = valid
	}{
		{volume.Config{Provider: "none"}, ""},
		{volume.Config{Provider: "nfs"}, "--provider"},
		{volume.Config{Provider: "local", Name: "etcd-a"}, "--device"},
		{volume.Config{Provider: "local", Device: "/dev/vdb", Name: "Etcd_A"}, "--name"},
		{volume.Config{Provider: "pool", Volumes: []string{"etcd-a"}, Lease: time.Minute, HostID: "h"}, ""},
		{volume.Config{Provider: "pool", Lease: time.Minute, HostID: "h"}, "--volumes"},
		{volume.Config{Provider: "pool", Volumes: []string{"etcd-a"}, Lease: time.Second, HostID: "h"}, "--lease"},
		{volume.Config{Provider: "pool", Volumes: []string{"a-very-long-volume-name"}, Lease: time.Minute, HostID: "h"}, "--volumes"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, volume.ErrConfig)):
			t.Errorf("%+v: %v, want an ErrConfig naming %s", tc.cfg, err, tc.want)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
