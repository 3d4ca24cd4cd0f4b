package chaos_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdadm/etcdadm-immutable/test/chaos"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestWorkloadThroughAKilledMember: the workload on a real three-member
// cluster, one member killed and started again in the middle, is judged
// linearizable with nothing lost and every watch event delivered once,
// in order; each kind of operation ran, some with an unknown outcome.
func TestWorkloadThroughAKilledMember(t *testing.T) {
	pki := testenv.NewPKI(t)
	ms := testenv.StartEtcdCluster(t, testenv.EtcdVersions()[1], 3, pki)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.Endpoint())
	}
	tlsc := pki.ClientTLS(t)
	dial := func() (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: eps, TLS: tlsc, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	w, err := chaos.Start(ctx, dial, chaos.Config{Seed: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	ms[0].Kill()
	time.Sleep(2 * time.Second)
	testenv.StartEtcdMember(t, ms[0].Version, ms[0].Config, pki)
	time.Sleep(2 * time.Second)
	r, err := w.Stop(ctx, time.Minute, filepath.Join(t.TempDir(), "history.html"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", r)
	if why := r.Failed(); why != "" {
		t.Fatalf("the workload's verdict: %s", why)
	}
	for _, k := range []string{chaos.Get, chaos.Put, chaos.CAS} {
		if r.ByKind[k] == 0 {
			t.Errorf("no %s ran: %v", k, r.ByKind)
		}
	}
	if r.Acked == 0 || r.WatchEvents < r.Acked {
		t.Errorf("%d acknowledged writes, %d watch events", r.Acked, r.WatchEvents)
	}
}
