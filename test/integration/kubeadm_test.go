package integration

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestKubeadmExternalEtcd: 'pki issue-client kube-apiserver --kubeadm'
// prints the etcd.external section of a kubeadm ClusterConfiguration;
// the endpoints and files it names are enough to read and write, as
// kube-apiserver would.
func TestKubeadmExternalEtcd(t *testing.T) {
	v := testenv.EtcdVersions()[1]
	st, _, url := seededByCLI(t, v)
	hosts := foundAt(t, st, v)
	dir := filepath.Join(t.TempDir(), "etcd")
	r := runBin(t, nil, "etcdadm", "pki", "issue-client", "kube-apiserver-etcd-client", "--kubeadm", "--store", url, "--out-dir", dir)
	if r.code != 0 {
		t.Fatalf("issue-client --kubeadm: exit %d\n%s", r.code, r.stderr)
	}
	_, section, ok := strings.Cut(r.stdout, "etcd:\n  external:\n")
	if !ok {
		t.Fatalf("no etcd.external section:\n%s", r.stdout)
	}
	var eps []string
	files := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		line = strings.TrimSpace(line)
		if ep, ok := strings.CutPrefix(line, "- "); ok {
			eps = append(eps, ep)
		} else if k, v, ok := strings.Cut(line, ": "); ok {
			files[k] = v
		}
	}
	if len(eps) != len(hosts) {
		t.Fatalf("endpoints %v, want one per member (%d)\n%s", eps, len(hosts), r.stdout)
	}
	for _, h := range hosts {
		if !strings.Contains(section, h.ClientURL()) {
			t.Errorf("endpoints do not name %s (%s)", h.Name, h.ClientURL())
		}
	}
	cert, err := tls.LoadX509KeyPair(files["certFile"], files["keyFile"])
	if err != nil {
		t.Fatalf("certFile/keyFile from the section: %v", err)
	}
	caPEM, err := os.ReadFile(files["caFile"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, TLS: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctxT(t), "/registry/namespaces/default", "ns"); err != nil {
		t.Fatalf("write as kube-apiserver: %v", err)
	}
	if gr, err := cli.Get(ctxT(t), "/registry/namespaces/default"); err != nil || len(gr.Kvs) != 1 {
		t.Fatalf("read as kube-apiserver: %v %v", gr, err)
	}
}
