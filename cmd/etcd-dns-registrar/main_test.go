package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/dns"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// TestDeps: the registrar runs on every master next to etcd and must stay
// small: no etcd server code (tailscale's TestDeps).
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"go.etcd.io/etcd/server", "go.etcd.io/bbolt", "go.etcd.io/raft"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("etcd-dns-registrar links %s (from %s)", pkg, banned)
			}
		}
	}
}

// The binary end to end: DNS suffix from the store's settings, hosts
// provider under --root, metrics, clean exit on SIGTERM.
func TestBinaryHosts(t *testing.T) {
	testBinaryHosts(t, "ETCDADM_ADDRESS=10.1.2.3", "10.1.2.3")
}

// The address 'etcdadm render --ip' gives member join (ETCDADM_IPS in
// host.env, which the unit reads) is the one the registrar publishes, not
// whatever address the test machine has.
func TestBinaryPublishesETCDADMIPS(t *testing.T) {
	testBinaryHosts(t, "ETCDADM_IPS=10.0.0.12,2001:db8::12", "10.0.0.12")
}

// testBinaryHosts runs the registrar with addrEnv and waits for etcd-a to
// resolve to want in the hosts file and in its store record.
func testBinaryHosts(t *testing.T, addrEnv, want string) {
	t.Helper()
	dir := t.TempDir()
	bin := buildBinary(t)
	storeDir, root := filepath.Join(dir, "store"), filepath.Join(dir, "root")
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.MkdirAll(storeDir, 0o755)
	os.WriteFile(filepath.Join(root, "etc", "hosts"), []byte("127.0.0.1 localhost\n"), 0o644)
	st, err := filestore.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	c := clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}, Settings: clusterspec.Settings{DNSSuffix: "c.test"}}
	if err := c.Defaults(); err != nil {
		t.Fatal(err)
	}
	if err := clusterspec.Seed(context.Background(), st, c, false); err != nil {
		t.Fatal(err)
	}
	metrics := filepath.Join(dir, "dns.prom")
	cmd := exec.Command(bin)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"ETCDADM_STORE=file://" + storeDir,
		"ETCDADM_MEMBER_NAME=etcd-a",
		addrEnv,
		"ETCDADM_ROOT=" + root,
		"ETCDADM_DNS_INTERVAL=100ms",
		"ETCDADM_DNS_METRICS_FILE=" + metrics,
	}
	logFile := filepath.Join(dir, "log")
	lf, _ := os.Create(logFile)
	defer lf.Close()
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("exit after SIGTERM: %v", err)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Error("did not stop within 10s of SIGTERM")
		}
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("log:\n%s", b)
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		h, _ := os.ReadFile(filepath.Join(root, "etc", "hosts"))
		m, _ := os.ReadFile(metrics)
		if strings.Contains(string(h), want+"\tetcd-a.c.test\n") && strings.Contains(string(m), "etcdadm_dns_degraded 0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hosts file not written in time:\n%s\nmetrics:\n%s", h, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if recs, _, _, err := dns.Load(context.Background(), st); err != nil || len(recs) != 1 || recs[0].Name != "etcd-a" || recs[0].Addresses[0].String() != want {
		t.Errorf("registry %+v, %v; want etcd-a at %s", recs, err, want)
	}
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
	buildOut  []byte
)

// buildBinary builds the command once per test binary run.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "etcd-dns-registrar-test")
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "etcd-dns-registrar")
		buildOut, buildErr = exec.Command("go", "build", "-o", buildBin, ".").CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build: %v\n%s", buildErr, buildOut)
	}
	return buildBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildBin != "" {
		os.RemoveAll(filepath.Dir(buildBin))
	}
	os.Exit(code)
}

// Bad configuration exits 2 before doing anything.
func TestBinaryConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinary(t)
	for _, args := range [][]string{
		{"--provider", "bind"},
		{"--provider", "rfc2136"},
		{"--lease", "1s"},
		{"--name", "Bad_Name"},
	} {
		full := append([]string{"--store", "file://" + dir, "--address", "10.0.0.1", "--dns-suffix", "c.test", "--root", dir}, args...)
		cmd := exec.Command(bin, full...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitConfig {
			t.Errorf("%v: want exit %d, got %v\n%s", args, exitConfig, err, out)
		}
	}
}
