//go:build linux

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// TestAdoptPlainEtcd: three masters run etcd from plain systemd units with
// a CA of their own (no etcdadm anywhere). 'etcdadm adopt' takes the
// cluster over; then each master in turn stops its old unit and boots our
// Ignition config on the same disk: member join rejoins it with its data
// under its name. At the end every member runs under our units, the data
// is all there, a client certificate of the old CA still works, a
// version upgrade goes through the version switcher, and so does a CA
// rotation that replaces the adopted CA.
func TestAdoptPlainEtcd(t *testing.T) {
	const from, to = e2eVersion, "3.7.3"
	c := newClusterWith(t, clusterOptions{members: 3, unseeded: true, versions: []string{to}})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	plain := harness.HostOptions{Binds: c.binds}
	var hosts []*harness.Host
	for _, n := range names {
		hosts = append(hosts, c.n.Boot(t, n, plain))
	}
	var initial, eps []string
	for i, h := range hosts {
		initial = append(initial, fmt.Sprintf("%s=https://%s:2380", names[i], h.IP()))
		eps = append(eps, fmt.Sprintf("https://%s:2379", h.IP()))
	}
	ca := newLegacyCA(t)
	for i, h := range hosts {
		dir := filepath.Join(h.Root(), "etc/legacy-etcd")
		ca.write(t, dir)
		ca.issue(t, dir, "member", names[i], []net.IP{h.IP().AsSlice(), net.IPv4(127, 0, 0, 1)}, true)
		ca.issue(t, dir, "admin", "admin", nil, false)
		unit := fmt.Sprintf(`[Unit]
Description=etcd, set up by hand (to be adopted)
[Service]
ExecStart=/opt/etcd/v%[1]s/etcd --name %[2]s --data-dir /var/lib/etcd \
  --listen-peer-urls https://%[3]s:2380 --initial-advertise-peer-urls https://%[3]s:2380 \
  --listen-client-urls https://%[3]s:2379,https://127.0.0.1:2379 --advertise-client-urls https://%[3]s:2379 \
  --initial-cluster %[4]s --initial-cluster-token legacy --initial-cluster-state new \
  --client-cert-auth --trusted-ca-file /etc/legacy-etcd/ca.crt --cert-file /etc/legacy-etcd/member.crt --key-file /etc/legacy-etcd/member.key \
  --peer-client-cert-auth --peer-trusted-ca-file /etc/legacy-etcd/ca.crt --peer-cert-file /etc/legacy-etcd/member.crt --peer-key-file /etc/legacy-etcd/member.key
Restart=always
`, from, names[i], h.IP(), strings.Join(initial, ","))
		if err := os.WriteFile(filepath.Join(h.Root(), "etc/systemd/system/legacy-etcd.service"), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		h.MustExec(t, "systemctl", "daemon-reload")
		h.MustExec(t, "systemctl", "start", "--no-block", "legacy-etcd.service")
	}
	a := hosts[0]
	oldCtl := func(h *harness.Host, args ...string) string {
		t.Helper()
		base := []string{"/opt/etcd/v" + from + "/etcdctl", "--endpoints", strings.Join(eps, ","), "--cacert", "/etc/legacy-etcd/ca.crt", "--cert", "/etc/legacy-etcd/admin.crt", "--key", "/etc/legacy-etcd/admin.key", "--command-timeout", "20s"}
		return h.MustExec(t, append(base, args...)...)
	}
	waitFor(t, time.Minute, "the hand-made cluster to be healthy", func() (bool, string) {
		out, _, err := a.Exec(t, t.Context(), "/opt/etcd/v"+from+"/etcdctl", "--endpoints", strings.Join(eps, ","), "--cacert", "/etc/legacy-etcd/ca.crt", "--cert", "/etc/legacy-etcd/admin.crt", "--key", "/etc/legacy-etcd/admin.key", "endpoint", "health")
		return err == nil, out
	})
	oldCtl(a, "put", "/registry/pods/default/web", "running")
	oldCtl(a, "put", "/registry/configmaps/kube-system/cfg", "v1")

	pkiDir := filepath.Join(a.Root(), "etc/legacy-etcd")
	out, err := c.adm(t, "adopt", "--store", c.storeURL, "--endpoints", strings.Join(eps, ","),
		"--cacert", pkiDir+"/ca.crt", "--cert", pkiDir+"/admin.crt", "--key", pkiDir+"/admin.key",
		"--ca-cert", pkiDir+"/ca.crt", "--ca-key", pkiDir+"/ca.key", "--cluster-name", "e2e")
	if err != nil {
		t.Fatalf("etcdadm adopt: %v\n%s", err, out)
	}
	t.Logf("etcdadm adopt:\n%s", out)

	// One master at a time: the old unit goes, our config comes, the
	// member rejoins with its data.
	for _, h := range hosts {
		h.MustExec(t, "systemctl", "disable", "--now", "legacy-etcd.service")
		h.PowerOff(t)
		h.Reprovision(t, c.hostOptions())
		waitHealthy(t, a, names, 3*time.Minute)
		if j := unitLog(t, h, "etcd-member-join.service"); !strings.Contains(j, "rejoin") {
			t.Errorf("%s: member join did not rejoin with the data:\n%s", h.Name(), j)
		}
	}
	for _, h := range hosts {
		assertUnitsWork(t, h)
		if aside := h.MustExec(t, "sh", "-c", "ls -d /var/lib/etcd/member* | wc -l"); strings.TrimSpace(aside) != "1" {
			t.Errorf("%s: data directories %q: the adopted data must be used in place", h.Name(), aside)
		}
	}
	if got := strings.TrimSpace(oldCtl(a, "get", "--print-value-only", "/registry/pods/default/web")); got != "running" {
		t.Errorf("/registry/pods/default/web = %q after the adoption, read with the old client certificate", got)
	}
	oldCtl(a, "put", "/after-adoption", "ok")

	// Our switcher upgrades the adopted cluster.
	if out, err := c.adm(t, "upgrade", "--to", to, "--store", c.storeURL); err != nil {
		t.Fatalf("etcdadm upgrade: %v\n%s", err, out)
	}
	startSwitchers(t, hosts)
	waitRolled(t, hosts, to, 5*time.Minute)
	if got := strings.TrimSpace(oldCtl(a, "get", "--print-value-only", "/registry/configmaps/kube-system/cfg")); got != "v1" {
		t.Errorf("/registry/configmaps/kube-system/cfg = %q after the upgrade", got)
	}

	// The adopted CA is rotated away by the switchers: after the first
	// phase the old client certificate still works; after --finish a
	// reissued one does and etcd refuses the old one.
	rotate := func(args ...string) {
		t.Helper()
		if out, err := c.adm(t, append([]string{"pki", "rotate-ca", "--yes", "--store", c.storeURL}, args...)...); err != nil {
			t.Fatalf("etcdadm pki rotate-ca %v: %v\n%s", args, err, out)
		}
		startSwitchers(t, hosts)
	}
	rotate()
	waitRotation(t, c, "every member trusts the new CA", 5*time.Minute)
	oldCtl(a, "put", "/after-rotation-phase-1", "ok")
	if out, err := c.adm(t, "pki", "issue-client", "admin", "--out-dir", filepath.Join(a.Root(), "etc/new-admin"), "--store", c.storeURL); err != nil {
		t.Fatalf("etcdadm pki issue-client: %v\n%s", err, out)
	}
	rotate("--finish")
	waitRotation(t, c, " done ", 5*time.Minute)
	ctl := func(cert string, args ...string) (string, error) {
		base := []string{"/opt/etcd/current/etcdctl", "--endpoints", strings.Join(eps, ","), "--cacert", "/etc/new-admin/ca.crt", "--cert", cert + ".crt", "--key", cert + ".key", "--command-timeout", "10s"}
		out, _, err := a.Exec(t, t.Context(), append(base, args...)...)
		return out, err
	}
	if got, err := ctl("/etc/new-admin/admin", "get", "--print-value-only", "/after-rotation-phase-1"); err != nil || strings.TrimSpace(got) != "ok" {
		t.Errorf("reissued client certificate after the rotation: %q %v", got, err)
	}
	if out, err := ctl("/etc/legacy-etcd/admin", "put", "/old-cert", "x"); err == nil {
		t.Errorf("etcd accepts the old CA's client certificate after the rotation finished:\n%s", out)
	}
	for _, h := range hosts {
		assertUnitsWork(t, h)
	}
}

// waitRotation waits until 'etcdadm pki show' reports the CA rotation
// with want in its line.
func waitRotation(t *testing.T, c *cluster, want string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "the CA rotation: "+want, func() (bool, string) {
		out, err := c.adm(t, "pki", "show", "--store", c.storeURL)
		return err == nil && strings.Contains(out, want), out
	})
}

// waitFor polls cond every second until it holds, bounded by timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Second) {
		ok, out := cond()
		if ok {
			return
		}
		last = out
	}
	t.Fatalf("waited %v for %s; last: %s", timeout, what, last)
}

// legacyCA is a CA made the way an operator would by hand, independent of
// our pki package.
type legacyCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newLegacyCA(t *testing.T) *legacyCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hand-made etcd CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &legacyCA{cert, key}
}

// write stores the CA's certificate and key as ca.crt and ca.key in dir.
func (ca *legacyCA) write(t *testing.T, dir string) {
	writePEMFile(t, filepath.Join(dir, "ca.crt"), "CERTIFICATE", ca.cert.Raw)
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEMFile(t, filepath.Join(dir, "ca.key"), "EC PRIVATE KEY", der)
}

// issue signs base.crt/base.key in dir for cn; server adds server auth and
// the IPs as names.
func (ca *legacyCA) issue(t *testing.T, dir, base, cn string, ips []net.IP, server bool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if server {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEMFile(t, filepath.Join(dir, base+".crt"), "CERTIFICATE", der)
	writePEMFile(t, filepath.Join(dir, base+".key"), "EC PRIVATE KEY", kder)
}

func writePEMFile(t *testing.T, path, typ string, der []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
