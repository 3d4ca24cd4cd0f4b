//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/ignition"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

const (
	e2eVersion = "3.6.16"
	bucket     = "etcd-store"
	accessKey  = "e2e-access-key"
	secretKey  = "e2e-secret-key-not-for-production"
)

// cluster is one test network with a MinIO store and the Ignition config
// every master boots from.
type cluster struct {
	n        *harness.Network
	storeURL string // the store as the test machine reaches it
	// hostStore is the store's URL on the hosts when it differs (a file
	// store bound into them).
	hostStore string
	ign       []byte
	binds     []harness.Bind
	devices   []string // device nodes bound into every host
	bin       string
	// opts are what the config every master boots from was rendered with.
	opts ignition.Options
	// runStore starts MinIO on its data again, stopStore stops it (the
	// store's outage).
	runStore  func() error
	stopStore func()
}

func newCluster(t testing.TB, members int) *cluster {
	return newClusterWith(t, clusterOptions{members: members})
}

// clusterOptions: the spec's member count and DNS suffix ("" for none),
// units the config enables besides the default ones, and further
// settings for etcdadm.env.
type clusterOptions struct {
	members int
	// version the cluster is seeded and rendered with (default
	// e2eVersion); versions are baked besides it.
	version   string
	versions  []string
	dnsSuffix string
	enable    []string
	env       map[string]string
	// binds are further directories bound into every host.
	binds []harness.Bind
	// unseeded: the store stays empty (no seed, no CA): 'etcdadm adopt'
	// fills it.
	unseeded bool
	// manual: no shared store at all; hosts boot 'etcdadm render
	// --manual' and are built by hand with etcdadm init / join.
	manual bool
	// tags: build tags of the binaries the hosts run (crashpoints).
	tags string
	// kube: the hosts get kube-apiserver and kubectl at /opt/kubernetes/bin.
	kube bool
	// sysext: the hosts boot 'etcdadm render --binaries sysext
	// --sysext-baked' with these extensions (directories, as in
	// /var/lib/extensions) and no other binaries of ours or etcd's.
	sysext []harness.Bind
	// fileStore: the store is file://hostFileStore on the hosts instead
	// of MinIO: "shared", a directory of the test machine (root's, 0700)
	// bound there on every host and seeded from the test; "host", the
	// hosts' own directory (tmpfiles makes it), seeded by the test on a
	// host (etcdadm's golden config, one master).
	fileStore string
}

// hostFileStore is where a file store lives on the hosts: the golden
// config's.
const hostFileStore = "/var/lib/etcdadm/store"

func newClusterWith(t testing.TB, o clusterOptions) *cluster {
	t.Helper()
	members, dnsSuffix := o.members, o.dnsSuffix
	version := o.version
	if version == "" {
		version = e2eVersion
	}
	c := &cluster{n: harness.NewNetwork(t, "10.77.0.0/24"), bin: buildCommands(t, o.tags)}
	opts := ignition.Options{Variant: ignition.Flatcar, EtcdVersion: version, Binaries: ignition.BinariesBaked, LogLevel: "debug", EnableUnits: o.enable, Env: o.env, Manual: o.manual}
	if o.sysext != nil {
		opts.Binaries, opts.SysextBaked = ignition.BinariesSysext, true
	}
	switch {
	case o.manual:
	case o.fileStore != "":
		opts.Store, c.hostStore = "file://"+hostFileStore, "file://"+hostFileStore
		if o.fileStore == "shared" {
			dir := t.TempDir()
			os.Chmod(dir, 0o700)
			c.storeURL = "file://" + dir
			o.binds = append(o.binds, harness.Bind{Source: dir, Target: hostFileStore})
		}
	default:
		c.startStore(t)
		opts.Store, opts.S3CredentialsFile = c.storeURL, filepath.Join(t.TempDir(), "credentials")
		os.WriteFile(opts.S3CredentialsFile, []byte("[default]\naws_access_key_id = "+accessKey+"\naws_secret_access_key = "+secretKey+"\n"), 0o600)
	}
	for _, args := range [][]string{
		{"seed", "--store", c.storeURL, "--members", fmt.Sprint(members), "--version", version, "--cluster-name", "e2e", "--dns-suffix", dnsSuffix},
		{"pki", "init", "--store", c.storeURL},
	} {
		if o.unseeded || o.manual || o.fileStore == "host" {
			break
		}
		if out, err := c.adm(t, args...); err != nil {
			t.Fatalf("etcdadm %s: %v\n%s", args[0], err, out)
		}
	}
	_, ign, err := ignition.Render(opts)
	if err != nil {
		t.Fatal(err)
	}
	c.ign, c.opts = ign, opts
	c.binds = []harness.Bind{{Source: c.bin, Target: "/opt/etcdadm/bin", ReadOnly: true}}
	for _, v := range append([]string{version}, o.versions...) {
		if v != version || len(c.binds) == 1 {
			c.binds = append(c.binds, harness.Bind{Source: filepath.Dir(testenv.EtcdBin(t, v, "etcd")), Target: "/opt/etcd/v" + v, ReadOnly: true})
		}
	}
	if o.sysext != nil {
		c.binds = o.sysext
	}
	c.binds = append(c.binds, o.binds...)
	if o.kube {
		c.binds = append(c.binds, harness.Bind{Source: kubeBinDir(t), Target: "/opt/kubernetes/bin", ReadOnly: true})
	}
	return c
}

// startStore runs MinIO in the switch namespace: the hosts reach it on
// the bridge, nothing outside the test network does.
func (c *cluster) startStore(t testing.TB) {
	t.Helper()
	minioBin := filepath.Join(testenv.CacheDir(), "bin", "minio")
	if _, err := os.Stat(minioBin); err != nil {
		t.Fatalf("%s missing: run make components", minioBin)
	}
	dir := t.TempDir()
	ip := c.n.SwitchIP().String()
	logf, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stopStore(); logf.Close() })
	c.runStore = func() error {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := c.n.Command(ctx, minioBin, "server", "--quiet", "--address", ip+":9000", "--console-address", ip+":9001", filepath.Join(dir, "data"))
		cmd.Env = []string{"MINIO_ROOT_USER=" + accessKey, "MINIO_ROOT_PASSWORD=" + secretKey, "MINIO_BROWSER=off", "MINIO_PROMETHEUS_AUTH_TYPE=public", "HOME=" + dir}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			cancel()
			return err
		}
		c.stopStore = func() { cancel(); cmd.Wait(); c.stopStore = func() {} }
		// The bucket is made once; later it answers once MinIO does.
		mk := c.n.Command(ctx, os.Args[0], "-test.run=^$")
		mk.Env = []string{"E2E_HELPER=mkbucket", "E2E_ENDPOINT=" + ip + ":9000", "E2E_BUCKET=" + bucket, "AWS_ACCESS_KEY_ID=" + accessKey, "AWS_SECRET_ACCESS_KEY=" + secretKey}
		if out, err := mk.CombinedOutput(); err != nil {
			return fmt.Errorf("create bucket: %w\n%s", err, out)
		}
		return nil
	}
	c.stopStore = func() {}
	if err := c.runStore(); err != nil {
		t.Fatal(err)
	}
	c.storeURL = fmt.Sprintf("s3://%s/cluster?endpoint=http://%s:9000&region=us-east-1", bucket, ip)
}

// adm runs etcdadm in the switch namespace, next to the store.
func (c *cluster) adm(t testing.TB, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := c.n.Command(ctx, filepath.Join(c.bin, "etcdadm"), args...)
	cmd.Env = []string{"AWS_ACCESS_KEY_ID=" + accessKey, "AWS_SECRET_ACCESS_KEY=" + secretKey}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *cluster) boot(t testing.TB, name string, extra ...string) *harness.Host {
	t.Helper()
	return c.n.Boot(t, name, c.hostOptions(extra...))
}

// hostOptions are what every master boots with (and powers on again with).
func (c *cluster) hostOptions(extra ...string) harness.HostOptions {
	return harness.HostOptions{Ignition: c.ign, Binds: c.binds, Devices: c.devices, NspawnArgs: extra}
}

type memberStatus struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Healthy  bool     `json:"healthy"`
	Learner  bool     `json:"learner"`
	Leader   bool     `json:"leader"`
	PeerURLs []string `json:"peerURLs"`
}

type hostStatus struct {
	Members []memberStatus `json:"members"`
	Units   []struct {
		Name   string `json:"name"`
		Active string `json:"active"`
	} `json:"units"`
}

// hostEtcdadm runs the host's etcdadm: baked or downloaded into
// /opt/etcdadm/bin, or /usr/bin's from a merged sysext image.
const hostEtcdadm = `if [ -x /opt/etcdadm/bin/etcdadm ]; then exec /opt/etcdadm/bin/etcdadm "$@"; fi; exec /usr/bin/etcdadm`

// status runs etcdadm status on a host, as an operator would.
func status(t testing.TB, h *harness.Host) (hostStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, errOut, err := h.Exec(t, ctx, "sh", "-c", hostEtcdadm+` "$@"`, "etcdadm", "status", "-o", "json", "--dial-timeout", "2s")
	if err != nil {
		return hostStatus{}, fmt.Errorf("%w: %s", err, errOut)
	}
	var s hostStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return hostStatus{}, fmt.Errorf("%w: %s", err, out)
	}
	return s, nil
}

// waitHealthy waits until h sees want healthy voting members named names.
func waitHealthy(t testing.TB, h *harness.Host, names []string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		s, err := status(t, h)
		if err == nil {
			var healthy []string
			learners := 0
			for _, m := range s.Members {
				if m.Learner {
					learners++
				} else if m.Healthy {
					healthy = append(healthy, m.Name)
				}
			}
			slices.Sort(healthy)
			if slices.Equal(healthy, names) && learners == 0 && len(s.Members) == len(names) {
				return time.Since(start)
			}
			last = fmt.Sprintf("members %+v", s.Members)
		} else {
			last = err.Error()
		}
		time.Sleep(time.Second)
	}
	for _, name := range names {
		t.Logf("journal hint: nsenter into %s and run journalctl -u etcd-member-join -u etcd", name)
	}
	t.Fatalf("%s: not %d healthy members %v after %v; last: %s\njournal of %s:\n%s", h.Name(), len(names), names, timeout, last, h.Name(), journal(t, h))
	return 0
}

func journal(t testing.TB, h *harness.Host) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _, _ := h.Exec(t, ctx, "journalctl", "--no-pager", "-n", "60", "-u", "etcd-member-join", "-u", "etcd", "-u", "etcd-snapshot-uploader")
	return out
}

func backupNames(t *testing.T, c *cluster) []string {
	t.Helper()
	out, err := c.adm(t, "backup", "list", "--store", c.storeURL, "-o", "json")
	if err != nil {
		t.Fatalf("backup list: %v\n%s", err, out)
	}
	var rows []struct{ Name string }
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("backup list: %v\n%s", err, out)
	}
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
	}
	return names
}

// TestCluster: three masters boot from one Ignition config into a healthy
// cluster with mutual TLS, back up on their timer, survive restarts and
// stops, and replace a dead host: all done by the units alone. A
// kube-apiserver runs on each master; while a master's host is powered
// off for good, Kubernetes' clients lose nothing (kubePlane).
func TestCluster(t *testing.T) {
	outer := t // hosts live as long as the whole test, not one subtest
	c := newClusterWith(t, clusterOptions{members: 3, kube: true})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	bootStart := time.Now()
	hosts := map[string]*harness.Host{}
	for _, n := range names {
		hosts[n] = c.boot(t, n)
	}
	a := hosts["etcd-a"]
	waitHealthy(t, a, names, 3*time.Minute)
	t.Logf("FIGURE boot 3 hosts -> healthy 3-member cluster: %v", time.Since(bootStart).Round(100*time.Millisecond))

	t.Run("mtls", func(t *testing.T) {
		// Plain http and a client without a certificate are refused.
		out, _, err := a.Exec(t, context.Background(), "/opt/etcd/current/etcdctl", "--endpoints", "https://127.0.0.1:2379",
			"--cacert", "/etc/etcd/pki/ca.crt", "--dial-timeout", "3s", "--command-timeout", "3s", "get", "x")
		if err == nil {
			t.Fatalf("a client without a certificate was served: %s", out)
		}
		env, _, _ := a.Exec(t, context.Background(), "stat", "-c", "%a %U", "/etc/etcd/etcd.env", "/etc/etcd/pki/server.key", "/etc/etcd/pki/peer.key")
		for _, line := range strings.Split(strings.TrimSpace(env), "\n") {
			if !strings.HasPrefix(line, "600 ") {
				t.Errorf("secret file mode/owner %q, want 600", line)
			}
		}
		if !strings.Contains(env, "600 etcd") {
			t.Errorf("keys not owned by etcd: %s", env)
		}
	})

	t.Run("snapshot-timer", func(t *testing.T) {
		dropIn := "[Timer]\nOnCalendar=\nOnCalendar=*:*:0/20\nRandomizedDelaySec=0\nAccuracySec=1s\n"
		for _, n := range names {
			h := hosts[n]
			h.MustExec(t, "mkdir", "-p", "/etc/systemd/system/etcd-snapshot-uploader.timer.d")
			h.MustExec(t, "sh", "-c", "printf '"+strings.ReplaceAll(dropIn, "\n", "\\n")+"' > /etc/systemd/system/etcd-snapshot-uploader.timer.d/e2e.conf")
			h.MustExec(t, "systemctl", "daemon-reload")
			h.MustExec(t, "systemctl", "restart", "etcd-snapshot-uploader.timer")
		}
		deadline := time.Now().Add(2 * time.Minute)
		var got []string
		for time.Now().Before(deadline) {
			if got = backupNames(t, c); len(got) >= 2 {
				break
			}
			time.Sleep(2 * time.Second)
		}
		if len(got) < 2 {
			t.Fatalf("backups after the timer fired: %v\n%s", got, journal(t, a))
		}
		// Every firing slot (20 s) holds exactly one backup: one per run.
		slots := map[int64]int{}
		for _, n := range got {
			ts, _, _ := etcdmanager.ParseBackupName(n)
			slots[ts.Unix()/20]++
		}
		for slot, count := range slots {
			if count != 1 {
				t.Errorf("timer slot %d produced %d backups, want 1: %v", slot, count, got)
			}
		}
		if out, err := c.adm(t, "backup", "verify", "latest", "--store", c.storeURL); err != nil {
			t.Fatalf("verify: %v\n%s", err, out)
		}
		for _, n := range names {
			hosts[n].MustExec(t, "rm", "/etc/systemd/system/etcd-snapshot-uploader.timer.d/e2e.conf")
			hosts[n].MustExec(t, "systemctl", "daemon-reload")
		}
	})

	t.Run("restart-and-stop", func(t *testing.T) {
		hosts["etcd-c"].MustExec(t, "systemctl", "restart", "etcd")
		waitHealthy(t, a, names, time.Minute)
		s, err := status(t, a)
		if err != nil {
			t.Fatal(err)
		}
		var follower string
		for _, m := range s.Members {
			if !m.Leader && m.Name != "etcd-a" {
				follower = m.Name
			}
		}
		hosts[follower].MustExec(t, "systemctl", "stop", "etcd")
		put := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_, errOut, err := a.Exec(t, ctx, "/opt/etcd/current/etcdctl", "--endpoints", "https://127.0.0.1:2379",
				"--cacert", "/etc/etcd/pki/ca.crt", "--cert", "/etc/etcd/pki/client.crt", "--key", "/etc/etcd/pki/client.key",
				"put", "/e2e/with-one-member-down", "ok")
			if err != nil {
				return fmt.Errorf("%w: %s", err, errOut)
			}
			return nil
		}
		if err := put(); err != nil {
			t.Fatalf("cluster not writable with %s stopped: %v", follower, err)
		}
		hosts[follower].MustExec(t, "systemctl", "start", "etcd")
		waitHealthy(t, a, names, time.Minute)
	})

	t.Run("replace-dead-host", func(t *testing.T) {
		dead := hosts["etcd-b"]
		oldIP := dead.IP()
		apiservers := []*harness.Host{hosts["etcd-a"], dead, hosts["etcd-c"]}
		kp := newKubePlane(t, c)
		kp.startAll(t, apiservers, hostURLs(apiservers, 2379))
		// The writer and the informer start on the apiserver that dies.
		load := startKubeLoad(t, c, kp, hostURLs([]*harness.Host{dead, a, hosts["etcd-c"]}, 6443), true)
		waitFor(t, time.Minute, "the apiservers' masterleases", func() (bool, string) {
			l := masterLeases(t, a)
			return len(l) == 3, fmt.Sprint(l)
		})
		time.Sleep(5 * time.Second) // objects before the loss
		dead.Crash(t)               // powered off for good: nothing shuts down cleanly
		start := time.Now()
		t.Logf("FIGURE dead master's apiserver masterlease expired %v after the power went", waitLeaseGone(t, a, oldIP.String(), 2*time.Minute).Round(100*time.Millisecond))
		fresh := c.boot(outer, "etcd-b-new", "--hostname=etcd-b")
		if got := strings.TrimSpace(fresh.MustExec(t, "hostname")); got != "etcd-b" {
			t.Fatalf("fresh host's hostname %q", got)
		}
		waitHealthy(t, a, names, 3*time.Minute)
		t.Logf("FIGURE replace a dead host (boot a blank one -> 3/3 healthy): %v", time.Since(start).Round(100*time.Millisecond))
		s, _ := status(t, a)
		for _, m := range s.Members {
			if m.Name == "etcd-b" && !strings.Contains(strings.Join(m.PeerURLs, ","), fresh.IP().String()) {
				t.Fatalf("etcd-b still at %v (old %s, new %s)", m.PeerURLs, oldIP, fresh.IP())
			}
		}
		if out := journal(t, fresh); !strings.Contains(out, "replace") {
			t.Errorf("the fresh host did not take the replace path:\n%s", out)
		}
		hosts["etcd-b"] = fresh
		checkKubeLoad(t, "host loss", finishKubeLoad(t, load), []string{oldIP.String()}, 1)
	})

	t.Run("status-on-host", func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("journal of the fresh etcd-b:\n%s", journal(t, hosts["etcd-b"]))
			}
		})
		waitHealthy(t, a, names, time.Minute)
		for _, n := range names {
			if got := strings.TrimSpace(hosts[n].MustExec(t, "systemctl", "is-active", "etcd-wait-healthy.service")); got != "active" {
				t.Errorf("%s: etcd-wait-healthy.service is %s, want active (kube-apiserver orders after it)", n, got)
			}
		}
		// On a master the store and its credentials come from the host itself.
		out := a.MustExec(t, "/opt/etcdadm/bin/etcdadm", "status")
		for _, want := range []string{"3/3 voting members healthy", "LEADER", "server.crt", "etcd-member-join.service", "etcd-snapshot-uploader.timer", "NEXT RUN", "last backup:"} {
			if !strings.Contains(out, want) {
				t.Errorf("etcdadm status on a host lacks %q:\n%s", want, out)
			}
		}
		t.Logf("etcdadm status on etcd-a:\n%s", out)
	})
}
