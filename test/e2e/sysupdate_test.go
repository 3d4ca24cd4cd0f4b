//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/ignition"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/sysext"
	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestSysupdatePatch: three masters on systemd 254 (systemd-sysupdate)
// boot 'etcdadm render --binaries sysext' and nothing else of ours or
// etcd's: Ignition downloads the etcd 3.6.15 and etcdadm images (.raw,
// sha256-checked), systemd-sysext merges them from loop devices, the
// cluster founds at 3.6.15. Then the image server gets etcd 3.6.16 and
// each host's etcd-sysupdate.service (the timer's job, run now) fetches it
// through the sysupdate transfer, merges it and registers it; the host
// completing the set declares 3.6.16, and the version switchers restart
// the members one at a time while a client writes and watches: nothing
// acknowledged lost, no watch event missed.
func TestSysupdatePatch(t *testing.T) {
	t.Parallel() // mostly waits: it runs beside the other long scenarios
	from, to := testenv.PreviousPatch(), e2eVersion
	images := buildSysextImages(t, from, to)
	etcdFrom, etcdTo := sysext.Etcd(etcdversion.MustParse(from)), sysext.Etcd(etcdversion.MustParse(to))
	adm := ""
	for _, f := range images.files {
		if _, ok := sysext.EtcdadmVersion(f); ok {
			adm = f
		}
	}
	served := t.TempDir()
	images.publish(t, served, etcdFrom.File, adm)

	c := newClusterWith(t, clusterOptions{members: 3, version: from})
	ignURL := serveDir(t, served)
	startHelper(t, c, "files", nil, "E2E_DIR="+served, "E2E_ADDR="+net.JoinHostPort(c.n.SwitchIP().String(), "8080"))
	updateURL := "http://" + net.JoinHostPort(c.n.SwitchIP().String(), "8080")
	c.ign = c.render(t, ignition.Options{Variant: ignition.Flatcar, EtcdVersion: from, Binaries: ignition.BinariesSysext,
		BinariesBaseURL: ignURL, SHA256File: filepath.Join(served, "SHA256SUMS"), SysextUpdateURL: updateURL})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	var hosts []*harness.Host
	for _, n := range names {
		// The loop devices of the moment: systemd-sysext on a host removes
		// the loop devices it detaches, and nspawn needs each node it binds.
		opts := harness.HostOptions{Ignition: c.ign, FetchRemote: true, Devices: harness.LoopDevices(t, 8), Rootfs: "sysupdate"}
		hosts = append(hosts, c.n.Boot(t, n, opts))
	}
	waitHealthy(t, hosts[0], names, 3*time.Minute)
	for _, h := range hosts {
		st := h.MustExec(t, "systemd-sysext", "status")
		for _, ext := range []string{"etcdadm", etcdFrom.Name} {
			if !strings.Contains(st, ext) {
				t.Fatalf("%s: systemd-sysext status does not list %s:\n%s", h.Name(), ext, st)
			}
		}
		if v := h.MustExec(t, "/opt/etcd/current/etcd", "--version"); !strings.Contains(v, "etcd Version: "+from) {
			t.Fatalf("%s: /opt/etcd/current/etcd --version: %s", h.Name(), v)
		}
	}
	eps := hostURLs(hosts, 2379)
	load := startClientLoad(t, c, eps)

	// Before the new image: a run changes nothing and declares nothing.
	line := sysupdateRun(t, hosts[0])
	if line != "images current" {
		t.Errorf("%s: etcd-sysupdate status %q with no newer image, want \"images current\"", hosts[0].Name(), line)
	}
	images.publish(t, served, etcdFrom.File, etcdTo.File, adm)
	start := time.Now()
	mono := monotonicNow(t, hosts[0])
	for i, h := range hosts {
		line := sysupdateRun(t, h)
		want := "updated " + etcdTo.Name + ": " + etcdFrom.File + " → " + etcdTo.File
		if !strings.HasPrefix(line, want) {
			t.Errorf("%s: etcd-sysupdate status %q, want it to start %q", h.Name(), line, want)
		}
		// Only the host that completes the set declares the patch.
		if declared := strings.Contains(line, "declared etcd "+to); declared != (i == len(hosts)-1) {
			t.Errorf("%s (host %d of %d): etcd-sysupdate status %q: declared %v", h.Name(), i+1, len(hosts), line, declared)
		}
		link := h.MustExec(t, "readlink", etcdTo.Link())
		if filepath.Base(strings.TrimSpace(link)) != etcdTo.File {
			t.Errorf("%s: %s -> %s, want %s", h.Name(), etcdTo.Link(), link, etcdTo.File)
		}
		if st := h.MustExec(t, "systemd-sysext", "status"); !strings.Contains(st, etcdTo.Name) {
			t.Errorf("%s: systemd-sysext status after the update:\n%s", h.Name(), st)
		}
	}
	// The declaring host started its switcher; the others' timers would
	// within 5 minutes: the operator does not wait.
	startSwitchers(t, hosts)
	waitRolled(t, hosts, to, 6*time.Minute)
	t.Logf("FIGURE sysupdate patch %s -> %s on 3 members, from the first etcd-sysupdate run: %v", from, to, time.Since(start).Round(100*time.Millisecond))
	checkOneAtATime(t, hosts, mono)
	r := load.finish(t)
	t.Logf("client load: %+v", r)
	if r.Acked == 0 || r.Lost != 0 || r.WatchMissed != 0 || len(r.WatchErrors) != 0 || r.OutOfOrder != 0 {
		t.Fatalf("client load: %+v", r)
	}
	for _, h := range hosts {
		assertUnitsWork(t, h)
	}
}

// sysupdateRun starts h's etcd-sysupdate.service, as its timer does, and
// returns the status line the run left.
func sysupdateRun(t *testing.T, h *harness.Host) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, errOut, err := h.Exec(t, ctx, "systemctl", "start", "etcd-sysupdate.service"); err != nil {
		j, _, _ := h.Exec(t, context.Background(), "journalctl", "--no-pager", "-n", "80", "-u", "etcd-sysupdate", "-u", "systemd-sysext")
		t.Fatalf("%s: systemctl start etcd-sysupdate: %v\n%s%s\n%s", h.Name(), err, out, errOut, j)
	}
	return strings.TrimSpace(h.MustExec(t, "systemctl", "show", "-p", "StatusText", "--value", "etcd-sysupdate.service"))
}

// monotonicNow is the hosts' CLOCK_MONOTONIC in µs (one kernel: the same
// clock on every host), as systemd's *TimestampMonotonic show it.
func monotonicNow(t *testing.T, h *harness.Host) int64 {
	t.Helper()
	s := strings.Fields(h.MustExec(t, "cat", "/proc/uptime"))
	up, err := strconv.ParseFloat(s[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return int64(up * 1e6)
}

// checkOneAtATime: after since, every host's etcd.service went down and
// came back once, and no two were down at the same time.
func checkOneAtATime(t *testing.T, hosts []*harness.Host, since int64) {
	t.Helper()
	type down struct {
		host        string
		from, until int64
	}
	var downs []down
	for _, h := range hosts {
		var ts [2]int64
		for i, p := range []string{"InactiveEnterTimestampMonotonic", "ActiveEnterTimestampMonotonic"} {
			v, err := strconv.ParseInt(strings.TrimSpace(h.MustExec(t, "systemctl", "show", "-p", p, "--value", "etcd.service")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			ts[i] = v
		}
		if ts[0] < since || ts[1] < ts[0] {
			t.Errorf("%s: etcd.service did not restart after the update (inactive at %d µs, active at %d µs, update at %d µs)", h.Name(), ts[0], ts[1], since)
			continue
		}
		downs = append(downs, down{h.Name(), ts[0], ts[1]})
	}
	for i, a := range downs {
		for _, b := range downs[i+1:] {
			if a.from < b.until && b.from < a.until {
				t.Errorf("etcd was down on %s (%d–%d µs) and %s (%d–%d µs) at once", a.host, a.from, a.until, b.host, b.from, b.until)
			}
		}
	}
	for _, d := range downs {
		t.Logf("%s: etcd down %v", d.host, time.Duration(d.until-d.from)*time.Microsecond)
	}
}

// sysextImages are images/sysext/build.sh's output.
type sysextImages struct {
	dir   string
	files []string // the image files
	sums  map[string]string
}

// buildSysextImages builds the etcd images of versions and the etcdadm
// image.
func buildSysextImages(t testing.TB, versions ...string) sysextImages {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("bash", "../../images/sysext/build.sh", dir)
	cmd.Env = append(os.Environ(), "ETCD_VERSIONS="+strings.Join(versions, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("images/sysext/build.sh: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	im := sysextImages{dir: dir, sums: map[string]string{}}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sum, file, ok := strings.Cut(l, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", l)
		}
		im.files = append(im.files, file)
		im.sums[file] = sum
	}
	return im
}

// publish makes dir serve files (and only those) with their SHA256SUMS,
// as an image server does: the images first, the list last.
func (im sysextImages) publish(t testing.TB, dir string, files ...string) {
	t.Helper()
	var sums strings.Builder
	for _, f := range files {
		sum, ok := im.sums[f]
		if !ok {
			t.Fatalf("no image %s built (have %v)", f, im.files)
		}
		if _, err := os.Stat(filepath.Join(dir, f)); errors.Is(err, os.ErrNotExist) {
			if err := os.Link(filepath.Join(im.dir, f), filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, f)
	}
	tmp := filepath.Join(dir, ".SHA256SUMS")
	if err := os.WriteFile(tmp, []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "SHA256SUMS")); err != nil {
		t.Fatal(err)
	}
}

// serveDir serves dir on the test machine's loopback (ignition-apply
// fetches from there) and returns its URL.
func serveDir(t testing.TB, dir string) string {
	t.Helper()
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runFilesHelper is the helper's body (E2E_HELPER=files): serve E2E_DIR
// on E2E_ADDR, in the test network, until SIGTERM.
func runFilesHelper() error {
	ln, err := net.Listen("tcp", os.Getenv("E2E_ADDR"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(os.Getenv("E2E_DIR"))), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
