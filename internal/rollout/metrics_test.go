package rollout

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// A stopped rollout shows on a dashboard and fires an alert.
func TestWriteMetrics(t *testing.T) {
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Unix(1_763_924_017, 0)
	p, _ := etcdversion.NewPlan(etcdversion.MustParse("3.5.35"), etcdversion.MustParse("3.6.16"), []etcdversion.Version{etcdversion.MustParse("3.6.16")})
	r := NewRecord(p, now)
	r.State, r.Failed = Failed, &Failure{Member: "etcd-b", Version: "3.6.16", Reason: "not ready"}
	if _, err := Save(ctx, st, r, "", now); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "etcd_rollout.prom")
	if err := WriteMetrics(ctx, f, st, Outcome{}, errors.New("stopped"), now); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(f)
	for _, want := range []string{
		`etcdadm_rollout_info{target="3.6.16",state="failed"} 1`,
		"etcdadm_rollout_failed 1",
		"etcdadm_switcher_last_run_success 0",
		"etcdadm_rollout_started_timestamp_seconds 1763924017",
	} {
		if !strings.Contains(string(b), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, b)
		}
	}
}
