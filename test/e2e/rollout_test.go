//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
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
// missed, reordered or failed.
func TestRollingVersions(t *testing.T) {
	vs := testenv.EtcdVersions()
	c := newClusterWith(t, clusterOptions{members: 3, version: vs[0], versions: vs})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	var hosts []*harness.Host
	var eps []string
	for _, n := range names {
		h := c.boot(t, n)
		hosts = append(hosts, h)
		eps = append(eps, "https://"+h.IP().String()+":2379")
	}
	waitHealthy(t, hosts[0], names, 3*time.Minute)
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
	line := hosts[0].MustExec(t, "systemctl", "show", "-p", "StatusText", "--value", "etcd-version-switcher.service")
	if !strings.Contains(line, "done") {
		t.Errorf("etcd-version-switcher status line %q does not say the rollout is done", line)
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

// waitRolled waits until every member runs want, the cluster version
// moved, and the rollout says done, as etcdadm status on a host shows it.
func waitRolled(t *testing.T, hosts []*harness.Host, want string, timeout time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, errOut, _ := hosts[0].Exec(t, ctx, "sh", "-c", `. /etc/etcdadm/etcdadm.env && AWS_SHARED_CREDENTIALS_FILE=/etc/etcdadm/s3-credentials exec /opt/etcdadm/bin/etcdadm status -o json --units=false --dial-timeout 2s --store "$ETCDADM_STORE"`)
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
