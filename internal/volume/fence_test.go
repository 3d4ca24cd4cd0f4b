package volume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

func TestMustFence(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{Root: t.TempDir(), Provider: ProviderPool, Lease: 30 * time.Second}
	storeDown := fmt.Errorf("renew etcd-b: %w: %w", ErrStore, store.ErrUnreachable)
	claimFile := filepath.Join(cfg.Root, ClaimFile)
	// Without a readable claim file nothing shows the lease is live.
	if fence, why := MustFence(cfg, storeDown, now); !fence || !strings.Contains(why, "expiry is unknown") {
		t.Errorf("no claim file, store down: fence %v (%s), want fenced", fence, why)
	}
	if err := os.MkdirAll(filepath.Dir(claimFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(claimFile, []byte(`{"volume": "etcd-b", "expi`), 0o644); err != nil {
		t.Fatal(err)
	}
	if fence, why := MustFence(cfg, storeDown, now); !fence || !strings.Contains(why, ClaimFile) {
		t.Errorf("corrupt claim file, store down: fence %v (%s), want fenced, naming the file", fence, why)
	}
	// A local volume has no lease to lose.
	local := cfg
	local.Provider = ProviderLocal
	if fence, why := MustFence(local, storeDown, now); fence {
		t.Errorf("local provider fenced: %s", why)
	}
	if fence, why := MustFence(cfg, fmt.Errorf("renew etcd-b: %w", ErrLost), now); !fence {
		t.Error("claim lost: not fenced")
	} else {
		t.Logf("lost: %s", why)
	}
	for _, tc := range []struct {
		left  time.Duration
		fence bool
	}{{25 * time.Second, false}, {11 * time.Second, false}, {9 * time.Second, true}, {-time.Second, true}} {
		if err := writeClaimFile(claimFile, Claim{Volume: "etcd-b", Expires: now.Add(tc.left)}); err != nil {
			t.Fatal(err)
		}
		if fence, why := MustFence(cfg, storeDown, now); fence != tc.fence {
			t.Errorf("store down, lease runs out in %s: fence %v (%s), want %v", tc.left, fence, why, tc.fence)
		}
	}
}

func TestFenceStopsInOrderPastFailures(t *testing.T) {
	var stopped []string
	err := Fence(context.Background(), func(_ context.Context, unit string) error {
		stopped = append(stopped, unit)
		if unit == "etcd.service" {
			return errors.New("job failed")
		}
		return nil
	}, "test", slog.New(slog.DiscardHandler))
	if !slices.Equal(stopped, FenceUnits()) {
		t.Errorf("stopped %v, want %v", stopped, FenceUnits())
	}
	if err == nil || !strings.Contains(err.Error(), "stop etcd.service: job failed") {
		t.Errorf("error %v, want the failed stop named", err)
	}
	// etcd stops before its volume is unmounted.
	if slices.Index(FenceUnits(), "etcd.service") > slices.Index(FenceUnits(), "var-lib-etcd.mount") {
		t.Error("the mount is stopped before etcd")
	}
}
