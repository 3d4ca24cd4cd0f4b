//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestRollingVersions: three masters booted at 3.5 from one Ignition
// config are moved 3.5 → 3.6 → 3.7 → 3.6 → 3.5 by their
// etcd-version-switcher units alone (the operator only runs etcdadm
// upgrade), with a client writing and a watch opened before the first
// step running throughout: no acknowledged write lost, no watch event
// missed, reordered or failed. A kube-apiserver on each master serves a
// writer and an informer throughout: every apiserver stays ready but for
// measured blips, and the informer sees every event in order without a
// "too old resource version" or a re-list.
func TestRollingVersions(t *testing.T) {
	vs := testenv.EtcdVersions()
	c := newClusterWith(t, clusterOptions{members: 3, version: vs[0], versions: vs, kube: true})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	hosts, eps := c.bootAll(t, names)
	waitHealthy(t, hosts[0], names, 3*time.Minute)
	kp := newKubePlane(t, c)
	kp.startAll(t, hosts, eps)
	kload := startKubeLoad(t, c, kp, hostURLs(hosts, 6443), true)
	load := startClientLoad(t, c, eps)
	for _, to := range []string{vs[1], vs[2], vs[1], vs[0]} {
		start := time.Now()
		if out, err := c.adm(t, "upgrade", "--to", to, "--store", c.storeURL); err != nil {
			t.Fatalf("etcdadm upgrade --to %s: %v\n%s", to, err, out)
		}
		// The operator does not wait for the timer.
		for _, h := range hosts {
			h.MustExec(t, "systemctl", "start", "--no-block", "etcd-version-switcher.service")
		}
		waitRolled(t, hosts, to, 6*time.Minute)
		t.Logf("FIGURE rollout to %s by the units: %v", to, time.Since(start).Round(100*time.Millisecond))
	}
	// Each switcher sees the rollout done within its poll interval and
	// says so in its status line (kept after it exits).
	var line string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if line = hosts[0].MustExec(t, "systemctl", "show", "-p", "StatusText", "--value", "etcd-version-switcher.service"); strings.Contains(line, "done") {
			break
		}
	}
	if !strings.Contains(line, "done") {
		t.Errorf("etcd-version-switcher status line %q does not say the rollout is done", line)
	}
	kr := finishKubeLoad(t, kload)
	checkKubeLoad(t, "rolling upgrade and downgrade", kr, nil, 0)
	if kr.TooOld != 0 {
		t.Errorf("the informer was told its resourceVersion is too old %d times", kr.TooOld)
	}
	r := load.finish(t)
	t.Logf("client load: %+v", r)
	if r.Acked == 0 || r.Lost != 0 || r.WatchMissed != 0 || len(r.WatchErrors) != 0 || r.OutOfOrder != 0 {
		t.Fatalf("client load: %+v", r)
	}
}

// rolloutStatus is the part of etcdadm status -o json a rollout shows.
type rolloutStatus struct {
	Members  []memberStatus `json:"members"`
	Versions struct {
		ClusterVersion string `json:"clusterVersion"`
		Rollout        *struct {
			Target string `json:"target"`
			State  string `json:"state"`
			Note   string `json:"note"`
		} `json:"rollout"`
	} `json:"versions"`
}

// storeStatus runs etcdadm status on h as an operator there would, with
// the host's store settings and credentials.
func storeStatus(t *testing.T, ctx context.Context, h *harness.Host, args ...string) (string, string, error) {
	script := `. /etc/etcdadm/etcdadm.env && export AWS_SHARED_CREDENTIALS_FILE=/etc/etcdadm/s3-credentials && set -- status --units=false --dial-timeout 2s --store "$ETCDADM_STORE" "$@"; ` + hostEtcdadm + ` "$@"`
	return h.Exec(t, ctx, append([]string{"sh", "-c", script, "status"}, args...)...)
}

// bootAll boots the masters named and returns them with their client URLs.
func (c *cluster) bootAll(t *testing.T, names []string) ([]*harness.Host, []string) {
	t.Helper()
	var hosts []*harness.Host
	for _, n := range names {
		hosts = append(hosts, c.boot(t, n))
	}
	return hosts, hostURLs(hosts, 2379)
}

// waitRolled waits until every member runs want, the cluster version
// moved, and the rollout says done, as etcdadm status on a host shows it.
func waitRolled(t *testing.T, hosts []*harness.Host, want string, timeout time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, errOut, _ := storeStatus(t, ctx, hosts[0], "-o", "json")
		cancel()
		var s rolloutStatus
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			last = fmt.Sprintf("%v %s", err, errOut)
			continue
		}
		ok := len(s.Members) == len(hosts) && s.Versions.Rollout != nil && s.Versions.Rollout.Target == want && s.Versions.Rollout.State == "done" &&
			strings.HasPrefix(s.Versions.ClusterVersion, want[:strings.LastIndex(want, ".")]+".")
		for _, m := range s.Members {
			ok = ok && m.Version == want && m.Healthy
		}
		if ok {
			return
		}
		last = out
	}
	for _, h := range hosts {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		j, _, _ := h.Exec(t, ctx, "journalctl", "--no-pager", "-n", "40", "-u", "etcd-version-switcher", "-u", "etcd")
		cancel()
		t.Logf("journal of %s:\n%s", h.Name(), j)
	}
	t.Fatalf("not rolled to %s after %v; last status:\n%s", want, timeout, last)
}

// TestRolloutSurvivesCrashes: during a 3.6 → 3.7 rollout the switcher of
// the member being switched is killed with SIGKILL, and later the host of
// another member loses power mid-switch; the rollout still converges by
// the units, nothing acknowledged is lost and the watch misses nothing.
// Then a release whose etcd does not start is rolled back on the first
// member, the rollout STOPS with a clear status while the cluster stays
// healthy and writable, and --abort ends it.
func TestRolloutSurvivesCrashes(t *testing.T) {
	vs := testenv.EtcdVersions()
	from, to := vs[1], vs[2]
	broken := to[:strings.LastIndex(to, ".")] + ".99"
	c := newClusterWith(t, clusterOptions{members: 3, version: from, versions: []string{to},
		env:   map[string]string{"ETCDADM_SWITCH_HEALTH_TIMEOUT": "40s"},
		binds: []harness.Bind{{Source: brokenRelease(t, broken), Target: "/opt/etcd/v" + broken, ReadOnly: true}}})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	hosts, eps := c.bootAll(t, names)
	waitHealthy(t, hosts[0], names, 3*time.Minute)
	load := startClientLoad(t, c, eps)
	if out, err := c.adm(t, "upgrade", "--to", to, "--store", c.storeURL); err != nil {
		t.Fatalf("upgrade: %v\n%s", err, out)
	}
	startSwitchers(t, hosts)

	killed := waitSwitching(t, hosts, nil, 4*time.Minute)
	killed.MustExec(t, "systemctl", "kill", "--signal=SIGKILL", "--kill-whom=main", "etcd-version-switcher.service")
	t.Logf("killed the switcher of %s with SIGKILL mid-switch", killed.Name())
	killed.MustExec(t, "systemctl", "start", "--no-block", "etcd-version-switcher.service")

	cut := waitSwitching(t, hosts, killed, 4*time.Minute)
	cut.Crash(t)
	t.Logf("power cut of %s mid-switch", cut.Name())
	cut.PowerOn(t, c.hostOptions())
	cut.MustExec(t, "systemctl", "start", "--no-block", "etcd-version-switcher.service")
	startSwitchers(t, hosts)
	waitRolled(t, hosts, to, 8*time.Minute)

	// A release that does not start: rolled back, the rollout stops.
	if out, err := c.adm(t, "upgrade", "--to", broken, "--store", c.storeURL); err != nil {
		t.Fatalf("upgrade to %s: %v\n%s", broken, err, out)
	}
	startSwitchers(t, hosts)
	status := waitStatus(t, hosts[0], "STOPPED", 5*time.Minute)
	for _, want := range []string{"FAILED", broken, "not ready"} {
		if !strings.Contains(status, want) {
			t.Errorf("etcdadm status does not say %q:\n%s", want, status)
		}
	}
	waitHealthy(t, hosts[0], names, time.Minute)
	stopped := false
	for _, h := range hosts {
		line := h.MustExec(t, "systemctl", "show", "-p", "StatusText", "--value", "etcd-version-switcher.service")
		stopped = stopped || strings.Contains(line, "STOPPED")
	}
	if !stopped {
		t.Error("no switcher's status line says the rollout STOPPED")
	}
	if out, err := c.adm(t, "upgrade", "--abort", "--store", c.storeURL); err != nil {
		t.Fatalf("upgrade --abort: %v\n%s", err, out)
	}
	startSwitchers(t, hosts)
	waitRolled(t, hosts, to, 4*time.Minute)

	r := load.finish(t)
	t.Logf("client load: %+v", r)
	if r.Acked == 0 || r.Lost != 0 || r.WatchMissed != 0 || len(r.WatchErrors) != 0 || r.OutOfOrder != 0 {
		t.Fatalf("client load: %+v", r)
	}
}

func startSwitchers(t *testing.T, hosts []*harness.Host) {
	t.Helper()
	for _, h := range hosts {
		h.MustExec(t, "systemctl", "start", "--no-block", "etcd-version-switcher.service")
	}
}

// waitSwitching returns the host whose switcher says it is switching its
// member (not skip).
func waitSwitching(t *testing.T, hosts []*harness.Host, skip *harness.Host, timeout time.Duration) *harness.Host {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, h := range hosts {
			if h == skip {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			line, _, _ := h.Exec(t, ctx, "systemctl", "show", "-p", "StatusText", "--value", "etcd-version-switcher.service")
			cancel()
			if strings.HasPrefix(line, "switching ") || strings.Contains(line, "takes a raft snapshot") {
				return h
			}
		}
	}
	t.Fatalf("no switcher started switching within %v", timeout)
	return nil
}

// waitStatus waits until etcdadm status on h shows want, and returns it.
func waitStatus(t *testing.T, h *harness.Host, want string, timeout time.Duration) string {
	t.Helper()
	var out string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, _, _ = storeStatus(t, ctx, h)
		cancel()
		if strings.Contains(out, want) {
			return out
		}
	}
	t.Fatalf("etcdadm status on %s did not show %q within %v:\n%s", h.Name(), want, timeout, out)
	return ""
}

// brokenRelease is a directory of programs that name the version but
// do not run: a bad build.
func brokenRelease(t *testing.T, v string) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	for _, p := range []string{"etcd", "etcdctl", "etcdutl"} {
		script := fmt.Sprintf("#!/bin/sh\ncase \"$1\" in --version|version) echo \"etcd Version: %s\"; exit 0;; esac\necho 'bad build: exiting' >&2\nexit 1\n", v)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
