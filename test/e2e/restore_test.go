//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// TestClusterRestore: three masters with data and a lease-attached key,
// and a kube-apiserver on each; the operator follows Kubernetes' own
// procedure: stops the apiservers, runs `etcdadm restore NAME --yes` of an
// earlier backup, starts etcd-member-join on each master, then the
// apiservers. Every key is as in the backup, the lease and its key are
// kept, the old data is kept aside, and the restore is recorded done.
// Kubernetes sees it too: objects created after the backup are gone, those
// in it are back, every resourceVersion served after is above every one
// served before, the informer re-lists rather than going back in time,
// and the masterlease of an apiserver that no longer exists expires.
func TestClusterRestore(t *testing.T) {
	c := newClusterWith(t, clusterOptions{members: 3, kube: true})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	hosts, eps := c.bootAll(t, names)
	a := hosts[0]
	waitHealthy(t, a, names, 3*time.Minute)
	for _, h := range hosts {
		assertUnitsWork(t, h)
	}
	kp := newKubePlane(t, c)
	kp.startAll(t, hosts, eps)
	// An apiserver that runs at the backup and never again.
	gone := apiserver{unit: "kube-apiserver-gone.service", advertise: "10.77.0.250", port: 6444}
	kp.install(t, a, gone, eps)
	kp.waitReady(t, a, gone, 3*time.Minute)
	kube := func(args ...string) string {
		t.Helper()
		out, err := kubectl(t, a, args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	kube("create", "namespace", kubeNS)
	kload := startKubeLoad(t, c, kp, hostURLs(hosts, 6443), false, "E2E_KUBE_WAIT_FOR=after-restore")
	kube("create", "configmap", "in-backup", "-n", kubeNS, "--from-literal=k=v")
	waitFor(t, time.Minute, "a masterlease for every apiserver", func() (bool, string) {
		l := masterLeases(t, a)
		return len(l) == 4, fmt.Sprint(l)
	})

	ctl := func(args ...string) string {
		t.Helper()
		return a.MustExec(t, append(strings.Fields(etcdctl), args...)...)
	}
	ctl("put", "/registry/a", "before")
	grant := strings.Fields(ctl("lease", "grant", "900")) // "lease 694d... granted with TTL(900s)"
	if len(grant) < 2 {
		t.Fatalf("lease grant: %v", grant)
	}
	lease := grant[1]
	ctl("put", "--lease="+lease, "/registry/e2e/leased", "x")
	for _, h := range hosts {
		h.MustExec(t, "systemctl", "start", "etcd-snapshot-uploader.service")
	}
	backups := backupNames(t, c) // one, unless leadership moved between the runs
	if len(backups) == 0 {
		t.Fatal("no backup: the leader's uploader took none")
	}
	a.MustExec(t, "systemctl", "disable", "--now", gone.unit)
	ctl("put", "/registry/a", "after the backup")
	ctl("put", "/registry/new", "after the backup")
	kube("create", "configmap", "after-backup", "-n", kubeNS, "--from-literal=k=v")
	rvBefore, _ := strconv.ParseUint(kube("get", "configmap", "after-backup", "-n", kubeNS, "-o", "jsonpath={.metadata.resourceVersion}"), 10, 64)

	for _, h := range hosts { // Kubernetes' procedure: no apiserver runs during a restore
		h.MustExec(t, "systemctl", "stop", "kube-apiserver.service")
	}
	if out, err := c.adm(t, "restore", backups[len(backups)-1], "--yes", "--store", c.storeURL); err != nil {
		t.Fatalf("etcdadm restore: %v\n%s", err, out)
	}
	start := time.Now()
	for _, h := range hosts {
		h.MustExec(t, "systemctl", "start", "--no-block", "etcd-member-join.service")
	}
	waitRestored(t, a, 4*time.Minute)
	waitHealthy(t, a, names, 2*time.Minute)
	t.Logf("FIGURE restore of 3 members by the units: %v", time.Since(start).Round(100*time.Millisecond))
	for _, h := range hosts {
		h.MustExec(t, "systemctl", "start", "--no-block", "kube-apiserver.service")
	}
	for _, h := range hosts {
		kp.waitReady(t, h, mainAPIServer(h), 3*time.Minute)
	}
	t.Logf("FIGURE restore with the apiservers stopped -> every apiserver ready: %v", time.Since(start).Round(100*time.Millisecond))

	if got := strings.TrimSpace(ctl("get", "--print-value-only", "/registry/a")); got != "before" {
		t.Errorf("/registry/a = %q after the restore, want the backup's %q", got, "before")
	}
	if got := strings.TrimSpace(ctl("get", "/registry/new")); got != "" {
		t.Errorf("/registry/new (written after the backup) is there: %q", got)
	}
	if ttl := ctl("lease", "timetolive", lease, "--keys"); !strings.Contains(ttl, "/registry/e2e/leased") || strings.Contains(ttl, "already expired") {
		t.Errorf("lease after the restore: %s; want it kept with its key", ttl)
	}
	for _, h := range hosts {
		if aside := h.MustExec(t, "sh", "-c", "ls -d /var/lib/etcd/member.before-restore-*"); strings.Count(aside, "\n") != 1 {
			t.Errorf("%s: old data kept aside: %q", h.Name(), aside)
		}
	}

	// What Kubernetes sees.
	kube("get", "configmap", "in-backup", "-n", kubeNS)
	if out, err := kubectl(t, a, "get", "configmap", "after-backup", "-n", kubeNS); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("configmap after-backup (created after the backup) after the restore: %s %v", out, err)
	}
	kube("create", "configmap", "after-restore", "-n", kubeNS, "--from-literal=k=v")
	rvAfter, _ := strconv.ParseUint(kube("get", "configmap", "after-restore", "-n", kubeNS, "-o", "jsonpath={.metadata.resourceVersion}"), 10, 64)
	if rvAfter <= rvBefore {
		t.Errorf("resourceVersion after the restore %d is not above %d, served before it", rvAfter, rvBefore)
	}
	want := []string{a.IP().String(), hosts[1].IP().String(), hosts[2].IP().String()}
	slices.Sort(want)
	expired := time.Now()
	waitFor(t, 2*time.Minute, "the masterleases of the running apiservers alone", func() (bool, string) {
		l := masterLeases(t, a)
		slices.Sort(l)
		return slices.Equal(l, want), fmt.Sprint(l)
	})
	t.Logf("FIGURE masterlease of the apiserver that is gone expired %v after the apiservers were ready", time.Since(expired).Round(100*time.Millisecond))
	r := finishKubeLoad(t, kload)
	t.Logf("FIGURE kube restore: informer events %d, re-lists %d (410 Gone %d), re-watches %d, went back %d; apiserver unready %v, longest %v; its cache %v",
		r.Events, r.Relists, r.TooOld, r.Rewatches, r.WentBack, r.Unready, r.Longest, r.Store)
	if r.Relists < 1 || r.WentBack != 0 || r.OutOfOrder != 0 || !slices.Equal(r.Store, []string{"after-restore", "in-backup"}) {
		t.Errorf("the informer across the restore: %+v; want a re-list, nothing going back in time, and its cache holding in-backup and after-restore alone", r)
	}
}

// restoreReport is what etcdadm status -o json says of a cluster restore.
type restoreReport struct {
	Versions struct {
		Restore *struct {
			State string `json:"state"`
		} `json:"restore"`
	} `json:"versions"`
}

func (r restoreReport) restoreDone() bool {
	return r.Versions.Restore != nil && r.Versions.Restore.State == "done"
}

// waitRestored waits until etcdadm status on h says the restore is done.
func waitRestored(t *testing.T, h *harness.Host, timeout time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, errOut, _ := storeStatus(t, ctx, h, "-o", "json")
		cancel()
		var s restoreReport
		if err := json.Unmarshal([]byte(out), &s); err == nil && s.restoreDone() {
			return
		}
		last = out + errOut
	}
	t.Fatalf("restore not done after %v; last status:\n%s\njournal:\n%s", timeout, last, journal(t, h))
}

// TestTeardown: after 'etcdadm teardown', each master's member join stops
// etcd and the units that could start it again and keeps the data aside;
// a fresh master booted from the same Ignition config founds nothing.
func TestTeardown(t *testing.T) {
	c := newCluster(t, 3)
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	hosts, _ := c.bootAll(t, names)
	waitHealthy(t, hosts[0], names, 3*time.Minute)
	if out, err := c.adm(t, "teardown", "--yes", "--store", c.storeURL); err != nil {
		t.Fatalf("etcdadm teardown: %v\n%s", err, out)
	}
	for _, h := range hosts {
		h.MustExec(t, "systemctl", "start", "etcd-member-join.service")
	}
	fresh := c.boot(t, "etcd-d")
	for _, h := range append(hosts, fresh) {
		waitUnitState(t, h, "etcd-member-join.service", "inactive", 2*time.Minute)
		for _, u := range []string{"etcd.service", "etcd-member-join.timer", "etcd-version-switcher.timer", "etcd-snapshot-uploader.timer"} {
			if st := strings.TrimSpace(h.MustExec(t, "systemctl", "show", "-p", "ActiveState", "--value", u)); st != "inactive" {
				t.Errorf("%s: %s is %s after the teardown", h.Name(), u, st)
			}
		}
	}
	for _, h := range hosts {
		if aside := h.MustExec(t, "sh", "-c", "ls -d /var/lib/etcd/member.torn-down-*"); strings.Count(aside, "\n") != 1 {
			t.Errorf("%s: data kept aside: %q", h.Name(), aside)
		}
	}
	if out, _, err := fresh.Exec(t, context.Background(), "test", "-e", "/var/lib/etcd/member"); err == nil {
		t.Errorf("the fresh host founded or joined a cluster on a torn-down store: %s", out)
	}
	if out, err := c.adm(t, "seed", "--store", c.storeURL, "--members", "3", "--version", e2eVersion); err == nil || !strings.Contains(out, "torn down") {
		t.Errorf("seed without --force on a torn-down store: %v\n%s", err, out)
	}
}

// waitUnitState waits until unit is in state on h.
func waitUnitState(t *testing.T, h *harness.Host, unit, state string, timeout time.Duration) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Second) {
		if got = strings.TrimSpace(h.MustExec(t, "systemctl", "show", "-p", "ActiveState", "--value", unit)); got == state {
			return
		}
	}
	t.Fatalf("%s: %s is %s, not %s, after %v\n%s", h.Name(), unit, got, state, timeout, journal(t, h))
}

// assertUnitsWork: no unit on h failed or is looping through restarts (a
// unit the config enables must work; one it does not enable must stay off).
func assertUnitsWork(t *testing.T, h *harness.Host) {
	t.Helper()
	for _, state := range []string{"failed", "activating"} {
		out := strings.TrimSpace(h.MustExec(t, "systemctl", "list-units", "--state="+state, "--no-legend", "--plain", "--all"))
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line) // UNIT LOAD ACTIVE SUB DESCRIPTION
			// A oneshot may be running its job right now (SUB "start");
			// "auto-restart" is a unit that keeps failing.
			if len(f) >= 4 && (state == "failed" || f[3] == "auto-restart") {
				t.Errorf("%s: unit %s is %s/%s", h.Name(), f[0], f[2], f[3])
			}
		}
	}
}
