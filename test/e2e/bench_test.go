//go:build linux

package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// BenchmarkBootToHealthy: three masters boot from one Ignition config;
// time from the first boot to a healthy 3-member cluster, median of 5, for
// each way the hosts get their programs, in turns: baked (bound into the
// image), sysext (the images of make images merged by systemd-sysext, as
// directories: see TestSysextHosts) and url (downloaded by Ignition from a
// server on loopback).
func BenchmarkBootToHealthy(b *testing.B) {
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	exts := sysextExtensions(b)
	modes := []string{"baked", "sysext", "url"}
	ds := map[string][]time.Duration{}
	for range 5 {
		for _, mode := range modes {
			b.Run(mode, func(b *testing.B) { // each run's hosts go at its end
				o := clusterOptions{members: 3}
				if mode == "sysext" {
					o.sysext = exts
				}
				c := newClusterWith(b, o)
				opts := c.hostOptions()
				if mode == "url" {
					opts = harness.HostOptions{Ignition: c.urlConfig(b), FetchRemote: true}
				}
				start := time.Now()
				first := c.n.Boot(b, names[0], opts)
				for _, n := range names[1:] {
					c.n.Boot(b, n, opts)
				}
				waitHealthy(b, first, names, 3*time.Minute)
				ds[mode] = append(ds[mode], time.Since(start))
			})
		}
	}
	for _, mode := range modes {
		report(b, "boot 3 hosts ("+mode+") -> healthy cluster", ds[mode])
	}
}

// BenchmarkReplaceDeadHost: a master is powered off for good and a blank
// one boots from the same config under its name; time to 3/3 healthy,
// median of 5 (the same cluster, one host replaced five times).
func BenchmarkReplaceDeadHost(b *testing.B) {
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	c := newCluster(b, 3)
	a := c.boot(b, names[0])
	victim := c.boot(b, names[1])
	c.boot(b, names[2])
	waitHealthy(b, a, names, 3*time.Minute)
	var ds []time.Duration
	for i := range 5 {
		victim.PowerOff(b)
		start := time.Now()
		victim = c.boot(b, fmt.Sprintf("etcd-b-%d", i), "--hostname=etcd-b")
		waitHealthy(b, a, names, 3*time.Minute)
		ds = append(ds, time.Since(start))
	}
	report(b, "replace a dead host -> 3/3 healthy", ds)
}

// BenchmarkPoolTakeover: pool + loopfile volumes with a 30s lease; the
// host holding etcd-b crashes and a fresh host boots from the same config;
// time from the crash until the fresh host runs etcd-b on its volume and
// the cluster is 3/3 healthy, median of 5 (target: lease + 15s).
func BenchmarkPoolTakeover(b *testing.B) {
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	c, _, hosts := newPoolCluster(b, names)
	var ds []time.Duration
	for i := range 5 {
		hosts["etcd-b"].Crash(b)
		start := time.Now()
		fresh := c.boot(b, fmt.Sprintf("fresh-%d", i))
		if got := identity(b, fresh); got != "etcd-b" {
			b.Fatalf("the fresh host took %s, want etcd-b", got)
		}
		waitHealthy(b, hosts["etcd-a"], names, 3*time.Minute)
		ds = append(ds, time.Since(start))
		hosts["etcd-b"] = fresh
	}
	report(b, fmt.Sprintf("pool volume takeover, lease %v: crash of etcd-b's host -> 3/3 healthy", volumeLease), ds)
}

// report prints the figures on stdout: a benchmark with sub-benchmarks
// has no result line of its own.
func report(b *testing.B, what string, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(ds[len(ds)/2].Seconds(), "median-s")
	fmt.Printf("FIGURE %s, %d runs: median %v, min %v, max %v\n", what, len(ds),
		ds[len(ds)/2].Round(100*time.Millisecond), ds[0].Round(100*time.Millisecond), ds[len(ds)-1].Round(100*time.Millisecond))
}
