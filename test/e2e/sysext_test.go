//go:build linux

package e2e

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/sysext"
	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// TestSysextHosts: three masters boot 'etcdadm render --binaries sysext
// --sysext-baked' with the images make images builds, and nothing else of
// ours or etcd's: systemd-sysext merges them, the units from the etcdadm
// image start through etcdadm-sysext.target (started once the images are
// merged, on this systemd 252 too, which does not reload after a merge),
// member join copies etcd from
// the merged etcd image into /opt/etcd, and the cluster founds. The
// extensions are the images' contents as directories: a .raw image needs
// loop devices the nspawn hosts do not have (images/sysext's test has
// systemd-dissect take each .raw image as an extension instead).
func TestSysextHosts(t *testing.T) {
	t.Parallel() // mostly waits: it runs beside the other long scenarios
	exts := sysextExtensions(t)
	c := newClusterWith(t, clusterOptions{members: 3, sysext: exts})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	start := time.Now()
	hosts, _ := c.bootAll(t, names)
	a := hosts[0]
	waitHealthy(t, a, names, 3*time.Minute)
	t.Logf("FIGURE boot 3 sysext hosts -> healthy 3-member cluster: %v", time.Since(start).Round(100*time.Millisecond))
	for _, h := range hosts {
		st := h.MustExec(t, "systemd-sysext", "status")
		for _, ext := range []string{"etcdadm", "etcd-3.6"} {
			if !strings.Contains(st, ext) {
				t.Errorf("%s: systemd-sysext status does not list %s:\n%s", h.Name(), ext, st)
			}
		}
		// (Debian's /lib is a link to /usr/lib: both name the image's.)
		if got := strings.TrimSpace(h.MustExec(t, "systemctl", "show", "-p", "FragmentPath", "--value", "etcd-member-join.service")); strings.TrimPrefix(got, "/usr") != "/lib/systemd/system/etcd-member-join.service" {
			t.Errorf("%s: etcd-member-join.service comes from %q, want the etcdadm image's /usr/lib/systemd/system", h.Name(), got)
		}
		if v := h.MustExec(t, "/opt/etcd/current/etcd", "--version"); !strings.Contains(v, "etcd Version: "+e2eVersion) {
			t.Errorf("%s: /opt/etcd/current/etcd --version: %s", h.Name(), v)
		}
		wants := strings.Fields(h.MustExec(t, "systemctl", "show", "-p", "Wants", "--value", "etcdadm-sysext.target"))
		for _, u := range []string{"etcd-member-join.service", "etcd-snapshot-uploader.timer"} {
			if !slices.Contains(wants, u) {
				t.Errorf("%s: etcdadm-sysext.target does not start %s: %v", h.Name(), u, wants)
			}
		}
		assertUnitsWork(t, h)
	}
}

// sysextExtensions builds the sysext images of e2eVersion and etcdadm
// with images/sysext/build.sh and returns them as extensions: each
// image's contents, a directory named as it is activated, bound at
// /var/lib/extensions (clusterOptions.sysext).
func sysextExtensions(t testing.TB) []harness.Bind {
	t.Helper()
	images := buildSysextImages(t, e2eVersion)
	exts := t.TempDir()
	etcd := sysext.Etcd(etcdversion.MustParse(e2eVersion))
	for _, file := range images.files {
		raw := filepath.Join(images.dir, file)
		name := etcd.Name
		if _, ok := sysext.EtcdadmVersion(file); ok {
			name = sysext.Etcdadm("").Name
		} else if file != etcd.File {
			t.Fatalf("build.sh made %s, want %s and an etcdadm image", raw, etcd.File)
		}
		if out, err := exec.Command("unsquashfs", "-no-progress", "-d", filepath.Join(exts, name), raw).CombinedOutput(); err != nil {
			t.Fatalf("unsquashfs %s: %v\n%s", raw, err, out)
		}
	}
	return []harness.Bind{{Source: exts, Target: "/var/lib/extensions", ReadOnly: true}}
}
