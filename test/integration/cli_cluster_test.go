package integration

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// TestEtcdadmClusterCommands: seed, spec show/set, status and member
// list/remove as an operator runs them.
func TestEtcdadmClusterCommands(t *testing.T) {
	dir := t.TempDir()
	url := "file://" + dir
	etcdadm := func(args ...string) result { return runBin(t, nil, "etcdadm", args...) }

	if r := etcdadm("seed", "--store", url, "--members", "0", "--version", "3.6.16"); r.code != 2 || !strings.Contains(r.stderr, "memberCount 0") || !strings.Contains(r.stderr, "Nothing was written") {
		t.Fatalf("seed with 0 members: %+v", r)
	}
	if r := etcdadm("seed", "--store", url, "--members", "3", "--version", "3.9.0"); r.code != 2 || !strings.Contains(r.stderr, "not supported") {
		t.Fatalf("seed with an unknown version: %+v", r)
	}
	if r := etcdadm("spec", "show", "--store", url); r.code == 0 || !strings.Contains(r.stderr, "etcdadm seed") {
		t.Fatalf("spec show before seeding: %+v", r)
	}
	if r := etcdadm("seed", "--store", url, "--members", "2", "--version", "3.6.16", "--cluster-name", "prod"); r.code != 0 || !strings.Contains(r.stderr, "even") {
		t.Fatalf("seed 2 members: %+v", r)
	}
	if r := etcdadm("seed", "--store", url, "--members", "3", "--version", "3.6.16", "--cluster-name", "prod"); r.code == 0 || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("re-seed with a different spec: %+v", r)
	}
	if r := etcdadm("spec", "set", "--store", url, "--members", "3"); r.code != 0 || !strings.Contains(r.stdout, "3 members") {
		t.Fatalf("spec set: %+v", r)
	}
	r := etcdadm("spec", "show", "--store", url, "-o", "json")
	var cl clusterspec.Cluster
	if err := json.Unmarshal([]byte(r.stdout), &cl); err != nil || cl.Spec.MemberCount != 3 || cl.Settings.ClusterName != "prod" {
		t.Fatalf("spec show: %v %+v", err, r)
	}
	if r := etcdadm("pki", "init", "--store", url); r.code != 0 {
		t.Fatalf("pki init: %+v", r)
	}

	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	hosts := foundThree(t, st)
	pkiDir := filepath.Join(hosts[0].Cfg.Root, "etc/etcd/pki")
	tls := []string{"--endpoints", hosts[0].ClientURL(), "--cacert", filepath.Join(pkiDir, "ca.crt"), "--cert", filepath.Join(pkiDir, "client.crt"), "--key", filepath.Join(pkiDir, "client.key")}

	r = etcdadm(append([]string{"status", "--store", url, "--pki-dir", pkiDir}, tls...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "3/3 voting members healthy") || !strings.Contains(r.stdout, "LEADER") || !strings.Contains(r.stdout, "last backup: none") || !strings.Contains(r.stdout, "server.crt") {
		t.Fatalf("status: %+v", r)
	}
	r = etcdadm(append([]string{"member", "list", "-o", "json"}, tls...)...)
	var ms []struct {
		Name    string
		Healthy bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &ms); err != nil || len(ms) != 3 || !ms[2].Healthy {
		t.Fatalf("member list: %v %+v", err, r)
	}
	// With one member down, removing another would lose quorum: refused.
	hosts[2].Runner.Kill(ctxT(t))
	r = etcdadm(append([]string{"member", "remove", "etcd-b"}, tls...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "quorum") {
		t.Fatalf("unsafe member remove: %+v", r)
	}
	r = etcdadm(append([]string{"status"}, tls...)...)
	if !strings.Contains(r.stdout, "2/3 voting members healthy") || !strings.Contains(r.stdout, "UNHEALTHY") {
		t.Fatalf("status with a member down: %+v", r)
	}
	// Removing the dead one is safe; its host then stands by.
	if r := etcdadm(append([]string{"member", "remove", "etcd-c"}, tls...)...); r.code != 0 {
		t.Fatalf("member remove etcd-c: %+v", r)
	}
	if _, _, err := clusterspec.SetSpec(ctxT(t), st, 2, ""); err != nil {
		t.Fatal(err)
	}
	hosts[2].mustJoin(t, member.Standby)
}
