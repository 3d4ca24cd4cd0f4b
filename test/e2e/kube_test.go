//go:build linux

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// kubeVersion is the kube-apiserver the masters run on top of our etcd
// (images/kube/build.sh builds it into the component cache).
const kubeVersion = "1.37.2"

// kubeBinDir is where images/kube/build.sh put kube-apiserver and kubectl;
// the hosts get it read-only at /opt/kubernetes/bin.
func kubeBinDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(testenv.CacheDir(), "kube", "v"+kubeVersion)
	for _, b := range []string{"kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("%s missing: run make components (images/kube/build.sh)", filepath.Join(dir, b))
		}
	}
	return dir
}

// kubectlOn is kubectl on a master with the administrator's kubeconfig:
// that master's apiserver, trusting the serving certificate it made
// itself, and the administrator's client certificate (kubectl without
// credentials asks for a user name on its standard input).
const kubectlOn = "/opt/kubernetes/bin/kubectl --kubeconfig /etc/kubernetes/admin.conf"

const adminKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://localhost:%d
    certificate-authority: %s/apiserver.crt
users:
- name: admin
  user:
    client-certificate: /etc/kubernetes/pki/admin.crt
    client-key: /etc/kubernetes/pki/admin.key
contexts:
- name: admin@local
  context:
    cluster: local
    user: admin
current-context: admin@local
`

// apiserverUnit is kube-apiserver as a master runs it: ordered after
// etcd-wait-healthy.service (what we promise it can order after), on the
// client certificate 'etcdadm pki issue-client' gave it, with every
// member's client URL. It ends open watches within 5 s of a stop (by
// default it waits for them until its 60 s shutdown timeout).
const apiserverUnit = `[Unit]
Description=Kubernetes API server on the local etcd
Wants=etcd-wait-healthy.service
After=etcd-wait-healthy.service

[Service]
ExecStart=/opt/kubernetes/bin/kube-apiserver \
  --etcd-servers=%s \
  --etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt \
  --etcd-certfile=/etc/kubernetes/pki/etcd/kube-apiserver.crt \
  --etcd-keyfile=/etc/kubernetes/pki/etcd/kube-apiserver.key \
  --client-ca-file=/etc/kubernetes/pki/client-ca.crt \
  --advertise-address=%s --secure-port=%d --cert-dir=%s \
  --service-cluster-ip-range=10.96.0.0/16 --authorization-mode=AlwaysAllow \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file=/etc/kubernetes/pki/sa.pub \
  --service-account-signing-key-file=/etc/kubernetes/pki/sa.key \
  --shutdown-watch-termination-grace-period=5s --profiling=false --v=1
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
`

// kubePlane is a kube-apiserver on each master of a cluster. Its files
// (dir) are what every apiserver shares: the service-account key pair
// and a client CA with an administrator's certificate (admin.crt).
type kubePlane struct {
	c      *cluster
	dir    string
	caFile string // the apiservers' serving CAs, for clients in the test network
}

func newKubePlane(t *testing.T, c *cluster) *kubePlane {
	t.Helper()
	k := &kubePlane{c: c, dir: t.TempDir()}
	k.caFile = filepath.Join(k.dir, "apiservers.crt")
	ca := newLegacyCA(t)
	ca.write(t, k.dir)
	ca.issue(t, k.dir, "admin", "e2e-admin", nil, false)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEMFile(t, filepath.Join(k.dir, "sa.key"), "PRIVATE KEY", priv)
	writePEMFile(t, filepath.Join(k.dir, "sa.pub"), "PUBLIC KEY", pub)
	return k
}

// apiserver is one kube-apiserver instance on a host.
type apiserver struct {
	unit      string // systemd unit name
	advertise string // the address it publishes in /registry/masterleases
	port      int
}

// kubeconfig is the administrator's kubeconfig for a, in /etc/kubernetes.
func (a apiserver) kubeconfig() string {
	if a.port == 6443 {
		return "admin.conf"
	}
	return fmt.Sprintf("admin-%d.conf", a.port)
}

// certDir is where a keeps the serving certificate it makes itself.
func (a apiserver) certDir() string {
	if a.port == 6443 {
		return "/var/lib/kubernetes/pki"
	}
	return fmt.Sprintf("/var/lib/kubernetes/pki-%d", a.port)
}

// mainAPIServer is the host's own apiserver.
func mainAPIServer(h *harness.Host) apiserver {
	return apiserver{unit: "kube-apiserver.service", advertise: h.IP().String(), port: 6443}
}

// startAll starts the main apiserver on every host (all at once) and
// waits until each is ready; etcdServers are the etcd client URLs.
func (k *kubePlane) startAll(t *testing.T, hosts []*harness.Host, etcdServers []string) {
	t.Helper()
	for _, h := range hosts {
		k.install(t, h, mainAPIServer(h), etcdServers)
	}
	for _, h := range hosts {
		k.waitReady(t, h, mainAPIServer(h), 3*time.Minute)
		b, err := os.ReadFile(filepath.Join(h.Root(), mainAPIServer(h).certDir(), "apiserver.crt"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(k.caFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.Write(b)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// install installs apiserver a on h and starts it (without waiting), the
// way an operator would: a client certificate from 'etcdadm pki
// issue-client', the shared service-account keys, and a unit ordered
// after etcd-wait-healthy.
func (k *kubePlane) install(t testing.TB, h *harness.Host, a apiserver, etcdServers []string) {
	t.Helper()
	root := h.Root()
	pkiDir := filepath.Join(root, "etc/kubernetes/pki")
	if _, err := os.Stat(filepath.Join(pkiDir, "etcd/kube-apiserver.crt")); err != nil {
		if out, err := k.c.adm(t, "pki", "issue-client", "kube-apiserver", "--store", k.c.storeURL, "--out-dir", filepath.Join(pkiDir, "etcd")); err != nil {
			t.Fatalf("etcdadm pki issue-client kube-apiserver: %v\n%s", err, out)
		}
	}
	certDir := a.certDir()
	files := map[string][]byte{
		"etc/systemd/system/" + a.unit:     []byte(fmt.Sprintf(apiserverUnit, strings.Join(etcdServers, ","), a.advertise, a.port, certDir)),
		"etc/kubernetes/" + a.kubeconfig(): []byte(fmt.Sprintf(adminKubeconfig, a.port, certDir)),
	}
	for from, to := range map[string]string{ // k.dir's files and where a master has them
		"sa.key": "etc/kubernetes/pki/sa.key", "sa.pub": "etc/kubernetes/pki/sa.pub",
		"ca.crt": "etc/kubernetes/pki/client-ca.crt", "admin.crt": "etc/kubernetes/pki/admin.crt", "admin.key": "etc/kubernetes/pki/admin.key",
	} {
		b, err := os.ReadFile(filepath.Join(k.dir, from))
		if err != nil {
			t.Fatal(err)
		}
		files[to] = b
	}
	for rel, b := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, rel), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h.MustExec(t, "systemctl", "daemon-reload")
	h.MustExec(t, "systemctl", "enable", "--now", "--no-block", a.unit)
}

// waitReady waits until apiserver a on h answers /readyz with ok.
func (k *kubePlane) waitReady(t testing.TB, h *harness.Host, a apiserver, timeout time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		// (The serving certificate it trusts is written as it starts.)
		out, errOut, err := h.Exec(t, ctx, "/opt/kubernetes/bin/kubectl", "--kubeconfig", "/etc/kubernetes/"+a.kubeconfig(), "--request-timeout", "5s", "get", "--raw", "/readyz")
		cancel()
		if err == nil && strings.TrimSpace(out) == "ok" {
			return
		}
		last = out + errOut
	}
	st, _, _ := h.Exec(t, context.Background(), "systemctl", "status", "--no-pager", "-n", "30", a.unit)
	t.Fatalf("%s on %s not ready after %v; last: %s\n%s", a.unit, h.Name(), timeout, last, st)
}

// kubectl runs kubectl on h against h's apiserver.
func kubectl(t testing.TB, h *harness.Host, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, errOut, err := h.Exec(t, ctx, append(strings.Fields(kubectlOn+" --request-timeout 10s"), args...)...)
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, errOut)
	}
	return out, nil
}

// hostURLs are https://ADDRESS:port of hosts: their etcd client URLs
// (2379) or apiservers (6443), as the test network reaches them.
func hostURLs(hosts []*harness.Host, port int) []string {
	var urls []string
	for _, h := range hosts {
		urls = append(urls, fmt.Sprintf("https://%s:%d", h.IP(), port))
	}
	return urls
}

// memberURLs are the etcd client URLs of members by DNS name: they follow
// a member to its new host.
func memberURLs(members []string, dnsSuffix string) []string {
	var urls []string
	for _, m := range members {
		urls = append(urls, "https://"+m+"."+dnsSuffix+":2379")
	}
	return urls
}

// masterLeases are the addresses under /registry/masterleases/, read from
// etcd on h: the apiservers that count as alive.
func masterLeases(t testing.TB, h *harness.Host) []string {
	t.Helper()
	out := h.MustExec(t, append(strings.Fields(etcdctl), "get", "--prefix", "--keys-only", "/registry/masterleases/")...)
	var ips []string
	for _, l := range strings.Fields(out) {
		ips = append(ips, strings.TrimPrefix(l, "/registry/masterleases/"))
	}
	return ips
}

// waitLeaseGone waits until ip's masterlease expired; it returns how long
// that took.
func waitLeaseGone(t *testing.T, h *harness.Host, ip string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	waitFor(t, timeout, "/registry/masterleases/"+ip+" to expire", func() (bool, string) {
		have := masterLeases(t, h)
		return !slices.Contains(have, ip), fmt.Sprint(have)
	})
	return time.Since(start)
}

// checkKubeLoad fails t unless the Kubernetes clients lost nothing: every
// acknowledged object is there, the informer saw every configmap in
// order, never went back in time and re-listed at most maxRelists times,
// and every apiserver but those on the hosts in gone ended ready. It logs
// the figures docs/benchmarks.md records.
func checkKubeLoad(t *testing.T, scenario string, r kubeReport, gone []string, maxRelists int) {
	t.Helper()
	t.Logf("FIGURE kube %s: created %d, failed requests %d, longest stall %s, lost %d, informer events %d, missed %d, re-lists %d (410 Gone %d), re-watches %d; apiserver unready %v, longest %v",
		scenario, r.Created, r.FailedTries, r.LongestStall, len(r.Lost), r.Events, r.Missed, r.Relists, r.TooOld, r.Rewatches, r.Unready, r.Longest)
	if r.Created == 0 || len(r.Lost) != 0 || r.Missed != 0 || r.OutOfOrder != 0 || r.WentBack != 0 || r.Relists > maxRelists {
		t.Errorf("%s: Kubernetes' clients saw a loss: %+v", scenario, r)
	}
	for _, ip := range r.NotReady {
		if !slices.Contains(gone, ip) {
			t.Errorf("%s: the apiserver at %s is not ready at the end (%+v)", scenario, ip, r)
		}
	}
}
