//go:build linux

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/ignition"
	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestConfigVariants: one cluster of three masters booted from three
// configs: Flatcar with every binary downloaded by Ignition from a server
// (nothing of ours bound into that host), Fedora CoreOS's variant, and the
// Flatcar config with baked binaries. All three members become healthy
// and no unit any config enables fails on any host.
func TestConfigVariants(t *testing.T) {
	t.Parallel() // mostly waits: it runs beside the other long scenarios
	c := newCluster(t, 3)
	urlIgn := c.urlConfig(t)
	fcosIgn := c.render(t, ignition.Options{Variant: ignition.FCOS, Binaries: ignition.BinariesBaked})

	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	hosts := []*harness.Host{
		c.n.Boot(t, names[0], harness.HostOptions{Ignition: urlIgn, FetchRemote: true}),
		c.n.Boot(t, names[1], harness.HostOptions{Ignition: fcosIgn, Binds: c.binds}),
		c.boot(t, names[2]),
	}
	waitHealthy(t, hosts[0], names, 3*time.Minute)
	for _, h := range hosts {
		assertUnitsWork(t, h)
	}
	// The downloaded programs are the ones served, executable, and every
	// program a unit of the url-mode host runs exists there.
	a := hosts[0]
	for _, line := range strings.Split(strings.TrimSpace(a.MustExec(t, "sh", "-c", "grep -h '^ExecStart=' /etc/systemd/system/*.service | sed 's/^ExecStart=[-@!+]*//; s/ .*//' | sort -u")), "\n") {
		if out := a.MustExec(t, "sh", "-c", "test -x "+line+" && echo ok || echo missing"); strings.TrimSpace(out) != "ok" {
			t.Errorf("%s: ExecStart program %s is %s", a.Name(), line, strings.TrimSpace(out))
		}
	}
	if mounts := a.MustExec(t, "sh", "-c", "grep -c ' /opt/' /proc/self/mountinfo || true"); strings.TrimSpace(mounts) != "0" {
		t.Errorf("%s: something is bound under /opt (%s mounts): the url-mode host must get every binary from the download", a.Name(), strings.TrimSpace(mounts))
	}
}

// render renders o for c's store and e2eVersion, with c's settings and
// units unless o has its own.
func (c *cluster) render(t testing.TB, o ignition.Options) []byte {
	t.Helper()
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = "+accessKey+"\naws_secret_access_key = "+secretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.Store, o.S3CredentialsFile, o.LogLevel = c.storeURL, creds, "debug"
	if c.hostStore != "" {
		o.Store, o.S3CredentialsFile = c.hostStore, ""
	}
	if o.EtcdVersion == "" {
		o.EtcdVersion = e2eVersion
	}
	if o.Env == nil {
		o.Env = c.opts.Env
	}
	if o.EnableUnits == nil {
		o.EnableUnits = c.opts.EnableUnits
	}
	_, ign, err := ignition.Render(o)
	if err != nil {
		t.Fatalf("render %s/%s: %v", o.Variant, o.Binaries, err)
	}
	return ign
}

// urlConfig is c's Flatcar config with every binary downloaded by Ignition
// from serveBinaries (boot it with FetchRemote).
func (c *cluster) urlConfig(t testing.TB) []byte {
	t.Helper()
	base, sums := serveBinaries(t, c.bin, e2eVersion)
	return c.render(t, ignition.Options{Variant: ignition.Flatcar, Binaries: ignition.BinariesURL, BinariesBaseURL: base, SHA256File: sums})
}

// serveBinaries serves, on the test machine's loopback (ignition-apply
// fetches from there), the layout url mode expects: bin/<program> and
// etcd/vV/<program>; it returns the base URL and a sha256sum file.
func serveBinaries(t testing.TB, binDir, version string) (baseURL, sumsFile string) {
	t.Helper()
	root := t.TempDir()
	var sums strings.Builder
	link := func(src, rel string) {
		dst := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(src, dst); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), rel)
	}
	progs, err := os.ReadDir(binDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		link(filepath.Join(binDir, p.Name()), "bin/"+p.Name())
	}
	etcdDir := filepath.Dir(testenv.EtcdBin(t, version, "etcd"))
	for _, p := range []string{"etcd", "etcdctl", "etcdutl"} {
		link(filepath.Join(etcdDir, p), "etcd/v"+version+"/"+p)
	}
	sumsFile = filepath.Join(t.TempDir(), "SHA256SUMS")
	if err := os.WriteFile(sumsFile, []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(root)), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), sumsFile
}
