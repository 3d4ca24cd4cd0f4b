//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPauseHoldsTheAutomation: with 'etcdadm pause', a version change
// declared is not applied by the switchers, and a master that lost its
// disk is not replaced by its member join (its old member stays, nothing
// is moved); 'etcdadm status' shows who paused and why. After 'etcdadm
// resume' both happen by the units.
func TestPauseHoldsTheAutomation(t *testing.T) {
	const to = "3.7.3"
	c := newClusterWith(t, clusterOptions{members: 3, versions: []string{to}})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	hosts, _ := c.bootAll(t, names)
	a, dead := hosts[0], hosts[2]
	waitHealthy(t, a, names, 3*time.Minute)

	if out, err := c.adm(t, "pause", "--reason", "on-call is replacing a disk", "--store", c.storeURL); err != nil {
		t.Fatalf("etcdadm pause: %v\n%s", err, out)
	}
	if out, err := c.adm(t, "upgrade", "--to", to, "--store", c.storeURL); err != nil {
		t.Fatalf("etcdadm upgrade: %v\n%s", err, out)
	}
	for _, h := range hosts {
		h.MustExec(t, "systemctl", "start", "etcd-version-switcher.service")
		if j := unitLog(t, h, "etcd-version-switcher.service"); !strings.Contains(j, "on-call is replacing a disk") {
			t.Errorf("%s: the switcher does not say it is paused:\n%s", h.Name(), j)
		}
	}
	dead.Crash(t)
	if err := os.RemoveAll(filepath.Join(dead.Root(), "var/lib/etcd/member")); err != nil {
		t.Fatal(err)
	}
	dead.PowerOn(t, c.hostOptions())
	waitUnitState(t, dead, "etcd-member-join.service", "inactive", 2*time.Minute)
	if j := unitLog(t, dead, "etcd-member-join.service"); !strings.Contains(j, "paused") {
		t.Errorf("%s: member join does not say it is paused:\n%s", dead.Name(), j)
	}
	s, err := status(t, a)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Members {
		if m.Healthy && m.Version != e2eVersion {
			t.Errorf("member %s runs %s while paused, want %s", m.Name, m.Version, e2eVersion)
		}
		if m.Name == dead.Name() && m.Healthy {
			t.Errorf("%s was replaced while paused", m.Name)
		}
	}
	if len(s.Members) != 3 {
		t.Errorf("members while paused: %+v; want the 3 of before", s.Members)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	out, _, _ := storeStatus(t, ctx, a, "-o", "json")
	cancel()
	var js struct {
		Versions struct {
			Paused *struct{ By, Reason string } `json:"paused"`
		} `json:"versions"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || js.Versions.Paused == nil || js.Versions.Paused.Reason != "on-call is replacing a disk" {
		t.Errorf("etcdadm status does not show the pause (%v):\n%s", err, out)
	}

	if out, err := c.adm(t, "resume", "--store", c.storeURL); err != nil || !strings.Contains(out, "resumed") {
		t.Fatalf("etcdadm resume: %v\n%s", err, out)
	}
	dead.MustExec(t, "systemctl", "start", "etcd-member-join.service")
	waitHealthy(t, a, names, 3*time.Minute)
	if j := unitLog(t, dead, "etcd-member-join.service"); !strings.Contains(j, "replace") {
		t.Errorf("%s: not replaced after resume:\n%s", dead.Name(), j)
	}
	startSwitchers(t, hosts)
	waitRolled(t, hosts, to, 5*time.Minute)
}
