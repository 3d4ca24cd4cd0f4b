//go:build linux

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// TestClusterWithDNSNames: with a DNS suffix, members advertise
// NAME.suffix and etcd-dns-registrar (hosts provider) makes every name
// resolve on every host; the cluster forms over those names.
func TestClusterWithDNSNames(t *testing.T) {
	const suffix = "etcd.e2e.internal"
	c := newClusterWith(t, clusterOptions{members: 3, dnsSuffix: suffix, enable: []string{"etcd-dns-registrar.service"}})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	hosts := map[string]*harness.Host{}
	for _, n := range names {
		hosts[n] = c.boot(t, n)
	}
	waitHealthy(t, hosts["etcd-a"], names, 3*time.Minute)
	s, err := status(t, hosts["etcd-a"])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Members {
		if want := "https://" + m.Name + "." + suffix + ":2380"; len(m.PeerURLs) != 1 || m.PeerURLs[0] != want {
			t.Errorf("%s advertises %v, want %s", m.Name, m.PeerURLs, want)
		}
	}
	// Every registrar learns the others within its polling interval.
	resolve := func(from, to string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, _, err := hosts[from].Exec(t, ctx, "getent", "hosts", to+"."+suffix)
		return out, err
	}
	for _, from := range names {
		for _, to := range names {
			var out string
			var err error
			for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
				if out, err = resolve(from, to); err == nil && strings.HasPrefix(out, hosts[to].IP().String()+" ") {
					break
				}
			}
			if err != nil || !strings.HasPrefix(out, hosts[to].IP().String()+" ") {
				t.Errorf("on %s, %s.%s resolves to %q (%v), want %s", from, to, suffix, strings.TrimSpace(out), err, hosts[to].IP())
			}
		}
		if got := strings.TrimSpace(hosts[from].MustExec(t, "systemctl", "is-active", "etcd-dns-registrar.service")); got != "active" {
			t.Errorf("%s: etcd-dns-registrar is %s", from, got)
		}
	}
}
