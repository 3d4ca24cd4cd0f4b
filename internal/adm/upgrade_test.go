package adm

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// Issue 26 finding 4: 'upgrade' while the automation is paused records
// the plan but does not say the switchers will act: they move no member
// until 'etcdadm resume'.
func TestUpgradeWhilePaused(t *testing.T) {
	dir := t.TempDir()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := clusterspec.Seed(ctx, st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}}, false); err != nil {
		t.Fatal(err)
	}
	// 3.6.15 is available to the hosts: its release is in the store.
	if _, err := store.PutBytes(ctx, st, "etcdadm/releases/3.6.15/manifest.json", []byte("{}"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pause.Set(ctx, st, "replacing a disk", time.Now()); err != nil {
		t.Fatal(err)
	}
	var out, errw bytes.Buffer
	app := App(&out)
	app.ErrWriter = &errw
	app.ExitErrHandler = func(*cli.Context, error) {}
	if err := app.Run([]string{"etcdadm", "upgrade", "--to", "3.6.15", "--store", "file://" + dir}); err != nil {
		t.Fatalf("upgrade: %v\n%s%s", err, out.String(), errw.String())
	}
	if s := out.String(); !strings.Contains(s, "the automation is paused") || !strings.Contains(s, "etcdadm resume") || strings.Contains(s, "units move the members") {
		t.Errorf("upgrade while paused says:\n%s", s)
	}
}
