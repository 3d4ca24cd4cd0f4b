package rollout

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// Issue 26 finding 6: declaring the version the cluster is at is
// nothing to do (it was refused as "not available" where no release is
// in the store); after 'upgrade --abort' a new target is refused saying
// the abort is under way, not "run 'etcdadm upgrade --abort' first".
func TestDeclareCurrentAndAfterAbort(t *testing.T) {
	ctx := t.Context()
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterspec.Seed(ctx, st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}}, false); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	d, err := Declare(ctx, st, etcdversion.MustParse("3.6.16"), false, now)
	if err != nil || !d.Unchanged || len(d.Plan.Steps) != 0 {
		t.Fatalf("declare the current version: %+v %v, want nothing to do", d, err)
	}
	p := etcdversion.Plan{From: etcdversion.MustParse("3.6.16"), To: etcdversion.MustParse("3.7.3"),
		Steps: []etcdversion.Step{{From: etcdversion.MustParse("3.6.16"), To: etcdversion.MustParse("3.7.3"), Kind: etcdversion.MinorUp}}}
	if _, err := Save(ctx, st, NewRecord(p, now), "", now); err != nil {
		t.Fatal(err)
	}
	if _, err := RequestAbort(ctx, st, now); err != nil {
		t.Fatal(err)
	}
	_, err = Declare(ctx, st, etcdversion.MustParse("3.6.15"), false, now)
	if !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "abort is under way") || strings.Contains(err.Error(), "run 'etcdadm upgrade --abort' first") {
		t.Errorf("a new target while aborting: %v", err)
	}
}
