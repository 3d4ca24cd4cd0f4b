//go:build linux

package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/ignition"
	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// shortCerts is the member certificates' lifetime where the matrix proves
// renewal: etcd-pki-renew.timer then runs every 30 s and renews them
// about 2.5 min after they were issued; they would run out at 6 min.
const shortCerts = "6m"

// TestEveryUnitEveryConfig (issue 23 A and B): every configuration we
// support, combined into three clusters — store: S3, a file store shared
// by the masters, a file store on the one master; volumes: pool and
// local; names: RFC 2136, /etc/hosts and none; binaries: url, baked and
// sysext (downloaded and updated). Each cluster boots from its rendered config; then every unit
// the host enables or schedules (each .service its timers run, and the
// long-running ones) is started once on every host and must succeed or
// skip by its own condition, leaving no failed unit. On the S3 and the
// shared-file-store clusters the member certificates live 6 minutes:
// etcd-pki-renew.timer renews them while a client writes, with no failed
// request and no etcd restart, past the moment the first ones ran out.
func TestEveryUnitEveryConfig(t *testing.T) {
	t.Parallel()
	t.Run("s3-pool-rfc2136-url", func(t *testing.T) {
		t.Parallel()
		hosts := bootS3PoolRFC2136URL(t)
		runEveryUnit(t, "S3, pool, RFC 2136, url", hosts)
		proveRenewal(t, hosts)
	})
	t.Run("sharedfile-local-none-baked", func(t *testing.T) {
		t.Parallel()
		hosts := bootSharedFileLocal(t)
		runEveryUnit(t, "shared file store, local, no names, baked", hosts)
		proveRenewal(t, hosts)
	})
	t.Run("hostfile-pool-hosts-sysext", func(t *testing.T) {
		t.Parallel()
		hosts := bootHostFileSysext(t)
		runEveryUnit(t, "file store on the master, pool, /etc/hosts, sysext", hosts)
	})
}

// bootS3PoolRFC2136URL: MinIO, loopfile pool volumes, member names in
// Knot by RFC 2136, every binary downloaded by Ignition.
func bootS3PoolRFC2136URL(t *testing.T) []*harness.Host {
	o := poolOptions(3)
	o.env["ETCDADM_CERT_VALIDITY"] = shortCerts
	o, startDNS := withRFC2136(t, o)
	c := newClusterWith(t, o)
	startDNS(c)
	poolVolumes(t, c)
	ign := c.urlConfig(t)
	var hosts []*harness.Host
	for i := range 3 {
		hosts = append(hosts, c.n.Boot(t, fmt.Sprintf("master-%d", i+1), harness.HostOptions{Ignition: ign, FetchRemote: true, Binds: notOurBinaries(c.binds), Devices: c.devices}))
	}
	return waitClaimed(t, hosts, []string{"etcd-a", "etcd-b", "etcd-c"})
}

// bootSharedFileLocal: a file store shared by the masters (a directory
// of the test machine, as NFS would be), a fixed local disk and name per
// master (one config each, as 'etcdadm render --env' per host), no DNS.
func bootSharedFileLocal(t *testing.T) []*harness.Host {
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	c := newClusterWith(t, clusterOptions{members: 3, fileStore: "shared", env: map[string]string{"ETCDADM_CERT_VALIDITY": shortCerts}})
	var hosts []*harness.Host
	for _, name := range names {
		dev := localDisk(t)
		env := maps.Clone(c.opts.Env)
		maps.Copy(env, map[string]string{"ETCDADM_VOLUME_PROVIDER": "local", "ETCDADM_VOLUME_NAME": name, "ETCDADM_VOLUME_DEVICE": dev})
		ign := c.render(t, ignition.Options{Variant: ignition.Flatcar, Binaries: ignition.BinariesBaked, Env: env, Name: name})
		hosts = append(hosts, c.n.Boot(t, name, harness.HostOptions{Ignition: ign, Binds: c.binds, Devices: []string{dev}}))
	}
	return waitClaimed(t, hosts, names)
}

// bootHostFileSysext: one master whose store is its own directory (the
// golden config's file:///var/lib/etcdadm/store, made by tmpfiles), seeded
// on the host as its operator would; a pool volume, its name in
// /etc/hosts, etcd and etcdadm as sysext images Ignition downloads and
// etcd-sysupdate.timer keeps current (systemd 254's systemd-sysupdate).
func bootHostFileSysext(t *testing.T) []*harness.Host {
	o := poolOptions(1)
	o.fileStore = "host"
	c := newClusterWith(t, o)
	poolVolumes(t, c)
	images := buildSysextImages(t, e2eVersion)
	served := t.TempDir()
	images.publish(t, served, images.files...)
	startHelper(t, c, "files", nil, "E2E_DIR="+served, "E2E_ADDR="+net.JoinHostPort(c.n.SwitchIP().String(), "8080"))
	ign := c.render(t, ignition.Options{Variant: ignition.Flatcar, Binaries: ignition.BinariesSysext, BinariesBaseURL: serveDir(t, served),
		SHA256File: filepath.Join(served, "SHA256SUMS"), SysextUpdateURL: "http://" + net.JoinHostPort(c.n.SwitchIP().String(), "8080")})
	h := c.n.Boot(t, "master-1", harness.HostOptions{Ignition: ign, FetchRemote: true, Binds: notOurBinaries(c.binds), Devices: c.devices, Rootfs: "sysupdate"})
	for _, args := range [][]string{
		{"seed", "--members", "1", "--version", e2eVersion, "--cluster-name", "e2e", "--dns-suffix", volSuffix},
		{"pki", "init"},
	} {
		onHostWithStore(t, h, args...)
	}
	return waitClaimed(t, []*harness.Host{h}, []string{"etcd-a"})
}

// notOurBinaries are binds other than our binaries and etcd's: a host
// that downloads those gets the rest (volumes, DNS settings).
func notOurBinaries(binds []harness.Bind) []harness.Bind {
	var out []harness.Bind
	for _, b := range binds {
		if !strings.HasPrefix(b.Target, "/opt/") {
			out = append(out, b)
		}
	}
	return out
}

// onHostWithStore runs the host's etcdadm as its operator would, with
// the host's store and S3 credentials.
func onHostWithStore(t *testing.T, h *harness.Host, args ...string) string {
	t.Helper()
	script := `. /etc/etcdadm/etcdadm.env && export ETCDADM_STORE AWS_SHARED_CREDENTIALS_FILE=/etc/etcdadm/s3-credentials && ` + hostEtcdadm + ` "$@"`
	return h.MustExec(t, append([]string{"sh", "-c", script, "etcdadm"}, args...)...)
}

// waitClaimed checks the hosts hold the members named (one each) and
// waits until they form a healthy cluster; hosts come back in that order.
func waitClaimed(t *testing.T, booted []*harness.Host, names []string) []*harness.Host {
	t.Helper()
	by := map[string]*harness.Host{}
	for _, h := range booted {
		by[identity(t, h)] = h
	}
	if got := slices.Sorted(maps.Keys(by)); !slices.Equal(got, names) {
		t.Fatalf("members held by the hosts: %v, want %v", got, names)
	}
	waitHealthy(t, by[names[0]], names, 4*time.Minute)
	var hosts []*harness.Host
	for _, n := range names {
		hosts = append(hosts, by[n])
		waitServing(t, by[n])
	}
	return hosts
}

// waitServing waits until the host's own systemd says its member serves:
// etcd.service and etcd-wait-healthy.service (what kube-apiserver is
// ordered after) active. The cluster's view can come first: a member
// answers its peers before systemd has its readiness and ran
// etcd.service's ExecStartPost.
func waitServing(t *testing.T, h *harness.Host) {
	t.Helper()
	start := time.Now()
	waitFor(t, 2*time.Minute, h.Name()+": etcd.service and etcd-wait-healthy.service active", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, _, _ := h.Exec(t, ctx, "systemctl", "is-active", "etcd.service", "etcd-wait-healthy.service")
		if slices.Equal(strings.Fields(out), []string{"active", "active"}) {
			return true, ""
		}
		return false, out + "\n" + unitsJournal(t, h)
	})
	if waited := time.Since(start); waited > time.Second {
		t.Logf("%s: etcd.service, etcd-wait-healthy.service active %v after the cluster saw the member healthy", h.Name(), waited.Round(time.Second))
	}
}

// localDisk is a blank 512 MiB disk for the local provider: an image
// file of the test machine behind a loop device, detached when the test
// ends (after its host is gone).
func localDisk(t *testing.T) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 512<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v\n%s", img, err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	return dev
}

// runEveryUnit starts, on every host, each of our units the host runs:
// what its timers activate and the services it keeps running, as the
// host itself lists them. Each start must end in success (or be skipped
// by the unit's own condition: nothing to do on that host), and no unit
// may be failed afterwards.
func runEveryUnit(t *testing.T, config string, hosts []*harness.Host) {
	t.Helper()
	for _, h := range hosts {
		var units []string
		timers := h.MustExec(t, "sh", "-c", "systemctl list-timers --all --no-legend --plain 'etcd*' | awk '{print $NF}'")
		running := h.MustExec(t, "sh", "-c", "systemctl list-units --type=service --state=active --no-legend --plain 'etcd*' | awk '{print $1}'")
		for _, u := range strings.Fields(timers + " " + running) {
			if !slices.Contains(units, u) {
				units = append(units, u)
			}
		}
		slices.Sort(units)
		for _, want := range []string{"etcd-member-join.service", "etcd-pki-renew.service", "etcd-snapshot-uploader.service", "etcd.service"} {
			if !slices.Contains(units, want) {
				t.Errorf("%s: %s is neither scheduled nor running (units: %v)\n%s", h.Name(), want, units, unitsJournal(t, h))
			}
		}
		for _, u := range units {
			res := startOnce(t, h, u)
			t.Logf("MATRIX %s | %s | %s | %s", config, h.Name(), u, res)
		}
		assertUnitsWork(t, h)
	}
	// The leader's uploader run left a backup the operator can list.
	var backups []struct{ Name string }
	if out := onHostWithStore(t, hosts[0], "backup", "list", "-o", "json"); json.Unmarshal([]byte(out), &backups) != nil || len(backups) == 0 {
		t.Errorf("%s: no backup listed after the uploader ran on every host:\n%s", config, out)
	}
}

// unitsJournal is what our units on h logged lately, in time order.
func unitsJournal(t *testing.T, h *harness.Host) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _, _ := h.Exec(t, ctx, "journalctl", "--no-pager", "-o", "short-precise", "-n", "150", "-u", "etcd*")
	return out
}

// startOnce starts unit u and waits until its run is over (a oneshot's
// start returns then; Type=exec's member join runs on); a unit already
// running long-term counts when it is active.
func startOnce(t *testing.T, h *harness.Host, u string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, errOut, err := h.Exec(t, ctx, "systemctl", "start", u); err != nil {
		t.Errorf("%s: systemctl start %s: %v: %s\n%s", h.Name(), u, err, errOut, unitLog(t, h, u))
		return "start failed"
	}
	for ctx.Err() == nil {
		props := map[string]string{}
		out, _, _ := h.Exec(t, ctx, "systemctl", "show", "-p", "ActiveState,SubState,Result,ConditionResult,ExecMainStatus,Type", u)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			k, v, _ := strings.Cut(l, "=")
			props[k] = v
		}
		switch {
		case props["ConditionResult"] == "no":
			return "skipped by its condition"
		case props["ActiveState"] == "activating" || props["ActiveState"] == "deactivating" ||
			(props["Type"] == "exec" && props["ActiveState"] == "active" && props["SubState"] == "running" && u == "etcd-member-join.service"):
			time.Sleep(time.Second)
			continue
		case props["Result"] != "success" || props["ActiveState"] == "failed":
			t.Errorf("%s: %s: %v\n%s", h.Name(), u, props, unitLog(t, h, u))
			return "FAILED"
		case props["ActiveState"] == "active":
			return "active"
		default:
			return "exit " + props["ExecMainStatus"]
		}
	}
	t.Errorf("%s: %s still running after 5 min", h.Name(), u)
	return "timed out"
}

// proveRenewal waits, while a client on the first host writes, until the
// first certificates of every host ran out and etcd-pki-renew.timer had
// renewed them all: no request may fail, no acknowledged write be lost,
// and etcd must not have restarted on any host.
func proveRenewal(t *testing.T, hosts []*harness.Host) {
	t.Helper()
	files := []string{"server.crt", "peer.crt", "client.crt"}
	first := map[string]time.Time{} // host/file -> NotAfter of the first certificate
	var lastExpiry time.Time
	etcdStart := map[string]string{}
	for _, h := range hosts {
		for _, f := range files {
			na := notAfter(t, h, f)
			first[h.Name()+"/"+f] = na
			if na.After(lastExpiry) {
				lastExpiry = na
			}
		}
		etcdStart[h.Name()] = h.MustExec(t, "systemctl", "show", "-p", "ExecMainStartTimestampMonotonic,NRestarts,MainPID", "etcd.service")
	}
	w := startHostWriter(t, hosts[0])
	deadline := lastExpiry.Add(30 * time.Second)
	t.Logf("certificates run out by %s; waiting past it (%s)", lastExpiry.Format(time.TimeOnly), time.Until(deadline).Round(time.Second))
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Second)
	}
	for _, h := range hosts {
		for _, f := range files {
			if na := notAfter(t, h, f); !na.After(first[h.Name()+"/"+f]) {
				t.Errorf("%s: %s not renewed: it ran out at %s", h.Name(), f, na.Format(time.TimeOnly))
			}
		}
		if got := h.MustExec(t, "systemctl", "show", "-p", "ExecMainStartTimestampMonotonic,NRestarts,MainPID", "etcd.service"); got != etcdStart[h.Name()] {
			t.Errorf("%s: etcd restarted during the renewal: %q, before %q", h.Name(), got, etcdStart[h.Name()])
		}
		if log := unitLog(t, h, "etcd-pki-renew.service"); !strings.Contains(log, "renewed /etc/etcd/pki/server.crt") {
			t.Errorf("%s: etcd-pki-renew.service never renewed server.crt:\n%s", h.Name(), log)
		}
	}
	if failed, errs := w.finish(t); failed > 0 {
		t.Errorf("%d writes failed during the renewal:\n%s", failed, errs)
	}
	waitHealthy(t, hosts[0], hostNames(t, hosts), time.Minute)
}

// notAfter reads when a host's certificate runs out.
func notAfter(t *testing.T, h *harness.Host, file string) time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.Root(), "etc/etcd/pki", file))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: %s: no PEM", h.Name(), file)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.NotAfter
}

func hostNames(t *testing.T, hosts []*harness.Host) []string {
	var out []string
	for _, h := range hosts {
		out = append(out, identity(t, h))
	}
	slices.Sort(out)
	return out
}
