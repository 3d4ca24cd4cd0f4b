package rollout

import (
	"context"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// TestRetentionReadsTheRecord: backup.Pinned, which keeps a rollout's
// backups from retention, reads the record as this package writes it.
func TestRetentionReadsTheRecord(t *testing.T) {
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec := Record{Target: "3.6.16", State: Running, Backups: map[string]string{"3.6.16": "2026-11-26T10:00:00Z-000001"}}
	etag, err := Save(ctx, st, rec, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pins, err := backup.Pinned(ctx, st)
	if err != nil || pins["2026-11-26T10:00:00Z-000001"] == "" {
		t.Fatalf("a running rollout's backup is not pinned: %v %v", pins, err)
	}
	rec.State = Done
	if _, err := Save(ctx, st, rec, etag, time.Now()); err != nil {
		t.Fatal(err)
	}
	if pins, err := backup.Pinned(ctx, st); err != nil || len(pins) != 0 {
		t.Fatalf("a done rollout's backup is still pinned: %v %v", pins, err)
	}
}
