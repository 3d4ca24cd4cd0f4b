//go:build linux

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/volume"
	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

const (
	volumeLease = 30 * time.Second
	volSuffix   = "etcd.e2e.internal"
	// The hosts' loopfile directory: shared storage every host mounts.
	loopfileDir = "/var/lib/etcdadm/volumes"
)

// TestPoolVolumes: masters boot from one config with the pool provider
// and loopfile volumes on shared storage. Each claims its own volume and
// every member name resolves everywhere. When the holder of etcd-b dies
// for good, a fresh host claims etcd-b once the lease runs out, mounts it
// with its data and rejoins (no replace) while a writer loses nothing, and
// the kube-apiservers on the masters, which reach etcd by member name, keep
// Kubernetes' clients whole; a volume that comes back blank takes member
// join's replace path.
func TestPoolVolumes(t *testing.T) {
	outer := t
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	o := poolOptions(len(names))
	o.kube = true
	c, shared, hosts := newPoolClusterWith(t, names, o)
	a := hosts["etcd-a"]
	for _, from := range names {
		for _, to := range names {
			waitResolves(t, hosts[from], to, hosts[to].IP().String())
		}
		if out := hosts[from].MustExec(t, "findmnt", "-n", "-o", "SOURCE,FSTYPE", "/var/lib/etcd"); !strings.HasPrefix(out, "/dev/loop") || !strings.Contains(out, "ext4") {
			t.Errorf("%s: /var/lib/etcd is %q, want an ext4 loop device", from, strings.TrimSpace(out))
		}
	}

	t.Run("holder-dies", func(t *testing.T) {
		dead := hosts["etcd-b"]
		oldIP := dead.IP()
		masters := []*harness.Host{dead, a, hosts["etcd-c"]} // the writer and informer start on the one that dies
		kp := newKubePlane(t, c)
		kp.startAll(t, masters, memberURLs(names, volSuffix))
		kload := startKubeLoad(t, c, kp, hostURLs(masters, 6443), true)
		w := startHostWriter(t, a)
		time.Sleep(5 * time.Second) // some writes before the crash
		dead.Crash(t)
		crashed := time.Now()
		fresh := c.boot(outer, "master-4")
		if got := identity(t, fresh); got != "etcd-b" {
			t.Fatalf("the fresh host took %s, want etcd-b (its claim ran out)", got)
		}
		waitHealthy(t, a, names, 3*time.Minute)
		took := time.Since(crashed)
		t.Logf("FIGURE pool volume: crash of etcd-b's host -> fresh host holds etcd-b, 3/3 healthy: %v (lease %v, target lease + 15s = %v)",
			took.Round(100*time.Millisecond), volumeLease, volumeLease+15*time.Second)
		hosts["etcd-b"] = fresh
		waitResolves(t, a, "etcd-b", fresh.IP().String())
		if fresh.IP() == oldIP {
			t.Fatalf("fresh host has the dead host's address %s", oldIP)
		}
		attach := unitLog(t, fresh, "etcd-volume-attach")
		if !strings.Contains(attach, "took over an expired volume") {
			t.Errorf("the fresh host did not take etcd-b over:\n%s", attach)
		}
		join := unitLog(t, fresh, "etcd-member-join")
		if !strings.Contains(join, "rejoin: ") || strings.Contains(join, "replace: ") {
			t.Errorf("member join on the fresh host did not rejoin on the volume's data:\n%s", join)
		}
		if aside := fresh.MustExec(t, "sh", "-c", "ls -d /var/lib/etcd/member.* 2>/dev/null || true"); strings.TrimSpace(aside) != "" {
			t.Errorf("data moved aside on the fresh host: %s", aside)
		}
		w.finish(t)
		waitLeaseGone(t, a, oldIP.String(), time.Minute)
		checkKubeLoad(t, "host loss with pool volumes", finishKubeLoad(t, kload), []string{oldIP.String()}, 1)
	})

	t.Run("blank-volume", func(t *testing.T) {
		dead := hosts["etcd-c"]
		dead.Crash(t)
		// The disk is lost: a new, blank image takes its place (the old
		// one is kept aside, never deleted).
		img := filepath.Join(shared, "etcd-c.img")
		if err := os.Rename(img, img+".lost"); err != nil {
			t.Fatal(err)
		}
		fresh := c.boot(outer, "master-5")
		if got := identity(t, fresh); got != "etcd-c" {
			t.Fatalf("the fresh host took %s, want etcd-c", got)
		}
		waitHealthy(t, a, names, 3*time.Minute)
		hosts["etcd-c"] = fresh
		if attach := unitLog(t, fresh, "etcd-volume-attach"); !strings.Contains(attach, "device is blank: formatting") {
			t.Errorf("the blank image was not formatted:\n%s", attach)
		}
		if join := unitLog(t, fresh, "etcd-member-join"); !strings.Contains(join, "replace: ") {
			t.Errorf("member join did not replace the member whose data was lost:\n%s", join)
		}
	})

	t.Run("cut-off-holder-fences", func(t *testing.T) {
		// etcd-c's host loses the network: it cannot renew, so before its
		// lease runs out it stops etcd and unmounts the volume; a fresh
		// host then takes etcd-c over with its data.
		cut := hosts["etcd-c"]
		cut.Partition(t, true)
		cutAt := time.Now()
		fenced := false
		for deadline := cutAt.Add(volumeLease + 20*time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			out, _, _ := cut.Exec(t, ctx, "sh", "-c", "systemctl is-active etcd.service; findmnt -n /var/lib/etcd || echo unmounted")
			cancel()
			if strings.Fields(out)[0] != "active" && strings.Contains(out, "unmounted") {
				fenced = true
				break
			}
		}
		if !fenced {
			t.Fatalf("the cut-off host still runs etcd or holds the volume %v after the cut:\n%s", time.Since(cutAt), unitLog(t, cut, "etcd-volume-renew"))
		}
		t.Logf("cut-off host fenced itself %v after losing the network (lease %v)", time.Since(cutAt).Round(100*time.Millisecond), volumeLease)
		if log := unitLog(t, cut, "etcd-volume-renew"); !strings.Contains(log, "FENCING") {
			t.Errorf("renew log does not say it fenced:\n%s", log)
		}
		fresh := c.boot(outer, "master-6")
		if got := identity(t, fresh); got != "etcd-c" {
			t.Fatalf("the fresh host took %s, want etcd-c", got)
		}
		waitHealthy(t, a, names, 3*time.Minute)
		if join := unitLog(t, fresh, "etcd-member-join"); !strings.Contains(join, "rejoin: ") {
			t.Errorf("member join on the fresh host did not rejoin on the volume's data:\n%s", join)
		}
		hosts["etcd-c"] = fresh
		// Back on the network, the fenced host stays down.
		cut.Partition(t, false)
		time.Sleep(15 * time.Second)
		states := strings.Fields(cut.MustExec(t, "sh", "-c", "systemctl is-active etcd.service etcd-volume-attach.service etcd-dns-registrar.service || true"))
		if slices.Contains(states, "active") || slices.Contains(states, "activating") {
			t.Errorf("the fenced host started again after the network came back: etcd, etcd-volume-attach, etcd-dns-registrar %v", states)
		}
		// The name stays with the new holder.
		waitResolves(t, a, "etcd-c", fresh.IP().String())
		waitHealthy(t, a, names, time.Minute)
	})

	t.Run("claims", func(t *testing.T) {
		// Every volume is held by the host that runs its member, and the
		// renew timer keeps the leases live.
		for _, n := range names {
			hosts[n].MustExec(t, "systemctl", "start", "etcd-volume-renew.service")
			if got := strings.TrimSpace(hosts[n].MustExec(t, "systemctl", "is-active", "etcd-volume-renew.timer")); got != "active" {
				t.Errorf("%s: etcd-volume-renew.timer is %s", n, got)
			}
		}
	})
}

// newPoolCluster boots one master per name from a config with the pool
// provider, loopfile volumes in a shared directory (returned) and the DNS
// registrar, and waits until they form a healthy cluster. Each host must
// have claimed a different volume; hosts are returned by member name.
func newPoolCluster(t testing.TB, names []string) (*cluster, string, map[string]*harness.Host) {
	t.Helper()
	return newPoolClusterWith(t, names, poolOptions(len(names)))
}

// newPoolClusterWith is newPoolCluster with other options.
func newPoolClusterWith(t testing.TB, names []string, o clusterOptions) (*cluster, string, map[string]*harness.Host) {
	t.Helper()
	c := newClusterWith(t, o)
	shared := poolVolumes(t, c)
	hosts := map[string]*harness.Host{}
	var booted []*harness.Host
	for i := range names {
		booted = append(booted, c.boot(t, fmt.Sprintf("master-%d", i+1)))
	}
	for _, h := range booted {
		hosts[identity(t, h)] = h
	}
	if got := slices.Sorted(maps.Keys(hosts)); !slices.Equal(got, names) {
		t.Fatalf("members claimed by the hosts: %v, want %v", got, names)
	}
	waitHealthy(t, hosts[names[0]], names, 3*time.Minute)
	return c, shared, hosts
}

// poolOptions: masters with the pool volume provider and DNS names.
func poolOptions(members int) clusterOptions {
	return clusterOptions{
		members: members, dnsSuffix: volSuffix, enable: []string{"etcd-dns-registrar.service"},
		env: map[string]string{
			"ETCDADM_VOLUME_PROVIDER": "pool",
			"ETCDADM_VOLUME_SIZE":     "512M",
			"ETCDADM_VOLUME_LEASE":    volumeLease.String(),
			"ETCDADM_DNS_INTERVAL":    "5s",
		},
	}
}

// poolVolumes gives c's hosts the shared loopfile directory and loop
// devices; it returns the directory.
func poolVolumes(t testing.TB, c *cluster) string {
	t.Helper()
	shared := t.TempDir()
	os.Chmod(shared, 0o700)
	c.binds = append(c.binds, harness.Bind{Source: shared, Target: loopfileDir})
	c.devices = harness.LoopDevices(t, 8)
	// Registered before any host boots, so it runs after every host is
	// gone: the loop devices are the test machine's, not the hosts'.
	t.Cleanup(func() { detachImages(t, shared) })
	return shared
}

// identity is the member a host's etcd-volume-attach gave it.
func identity(t testing.TB, h *harness.Host) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, errOut, err := h.Exec(t, ctx, "sh", "-c", `for i in $(seq 170); do
  state=$(systemctl show -P ActiveState etcd-volume-attach.service)
  case $state in active|failed) break;; esac
  sleep 1
done
. /run/etcdadm/identity.env && echo "$ETCDADM_MEMBER_NAME"`)
	if err != nil {
		t.Fatalf("%s: no identity: %v %s\n%s", h.Name(), err, errOut, unitLog(t, h, "etcd-volume-attach"))
	}
	return strings.TrimSpace(out)
}

func waitResolves(t *testing.T, h *harness.Host, member, ip string) {
	t.Helper()
	name := member + "." + volSuffix
	var out string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, _, _ = h.Exec(t, ctx, "getent", "hosts", name)
		cancel()
		if strings.HasPrefix(out, ip+" ") {
			return
		}
	}
	t.Errorf("on %s, %s resolves to %q, want %s", h.Name(), name, strings.TrimSpace(out), ip)
}

func unitLog(t testing.TB, h *harness.Host, unit string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _, _ := h.Exec(t, ctx, "journalctl", "--no-pager", "-o", "cat", "-u", unit)
	return out
}

// hostWriter writes /writer/NNNNNN keys through the host's etcd from a
// transient unit inside it, recording each acknowledged key.
type hostWriter struct{ h *harness.Host }

const etcdctl = "/opt/etcd/current/etcdctl --endpoints https://127.0.0.1:2379 --cacert /etc/etcd/pki/ca.crt --cert /etc/etcd/pki/client.crt --key /etc/etcd/pki/client.key"

// startHostWriter runs a client on h that writes through etcdctl (a new
// connection, and the certificate files read again, for every request),
// recording what was acknowledged and what failed.
func startHostWriter(t *testing.T, h *harness.Host) *hostWriter {
	t.Helper()
	script := `i=0; while [ ! -e /run/e2e-writer.stop ] && [ $i -lt 100000 ]; do
  i=$((i+1)); k=$(printf /writer/%06d $i)
  if ` + etcdctl + ` --command-timeout 5s put $k v >/dev/null 2>>/run/e2e-writer.err; then echo $k >>/run/e2e-writer.acked; else echo $k >>/run/e2e-writer.failed; fi
done`
	h.MustExec(t, "systemd-run", "--unit", "e2e-writer", "--service-type", "exec", "/bin/sh", "-c", script)
	return &hostWriter{h}
}

// finish stops the writer, checks every acknowledged key is there and
// returns the failed writes with the last errors.
func (w *hostWriter) finish(t *testing.T) (failed int, errs string) {
	t.Helper()
	w.h.MustExec(t, "touch", "/run/e2e-writer.stop")
	w.h.MustExec(t, "sh", "-c", "for i in $(seq 30); do systemctl -q is-active e2e-writer || exit 0; sleep 1; done; exit 1")
	acked := strings.Fields(w.h.MustExec(t, "cat", "/run/e2e-writer.acked"))
	have := map[string]bool{}
	for _, k := range strings.Fields(w.h.MustExec(t, "sh", "-c", etcdctl+" get --prefix --keys-only /writer/")) {
		have[k] = true
	}
	lost := 0
	for _, k := range acked {
		if !have[k] {
			lost++
		}
	}
	if lost > 0 || len(acked) == 0 {
		t.Fatalf("writer: %d acknowledged writes, %d lost", len(acked), lost)
	}
	failed = len(strings.Fields(w.h.MustExec(t, "sh", "-c", "cat /run/e2e-writer.failed 2>/dev/null || true")))
	t.Logf("FIGURE writer on %s: %d acknowledged writes, %d failed, none lost", w.h.Name(), len(acked), failed)
	return failed, w.h.MustExec(t, "sh", "-c", "tail -5 /run/e2e-writer.err 2>/dev/null || true")
}

// detachImages detaches the loop devices of the shared images (the
// hosts are gone; the kernel's loop devices are not).
func detachImages(t testing.TB, dir string) {
	imgs, _ := filepath.Glob(filepath.Join(dir, "*.img*"))
	for _, img := range imgs {
		if err := volume.DetachImage(context.Background(), img); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}
