package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// TeardownKey marks a store whose cluster was torn down: no host runs or
// founds etcd on it until 'etcdadm seed --force' declares a new cluster.
const TeardownKey = "etcdadm/teardown.json"

// Teardown is the mark.
type Teardown struct {
	At time.Time `json:"at"`
}

// TeardownUnits are what a torn-down host stops: everything that could
// start etcd again or act on the cluster, then etcd. The volume stays
// mounted (the data on it is kept, moved aside).
func TeardownUnits() []string {
	return []string{
		"etcd-member-join.timer", "etcd-reconcile.timer", "etcd-version-switcher.timer", "etcd-version-switcher.service",
		"etcd-snapshot-uploader.timer", "etcd-pki-renew.timer", "etcd-wait-healthy.service", "etcd-dns-registrar.service", "etcd.service",
	}
}

// RequestTeardown marks the store torn down. Backups, the PKI, the spec
// and the peer registry stay.
func RequestTeardown(ctx context.Context, st store.Store, now time.Time) error {
	if err := checkRequest(ctx, st, kindTeardown, now); err != nil {
		return err
	}
	b, err := json.Marshal(Teardown{At: now.UTC()})
	if err != nil {
		return err
	}
	if _, err := store.PutBytes(ctx, st, TeardownKey, b, store.PutOptions{}); err != nil {
		return fmt.Errorf("teardown: %w", err)
	}
	return nil
}

// TornDown returns the mark, nil when the store is not torn down.
func TornDown(ctx context.Context, st store.Store) (*Teardown, error) {
	b, _, err := store.GetBytes(ctx, st, TeardownKey, 1<<16)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("teardown: %w", err)
	}
	var t Teardown
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("teardown: %s: %w", TeardownKey, err)
	}
	return &t, nil
}

// ClearForNewCluster removes what tied the store to its torn-down
// cluster (the mark, the created marker, the founding plan), so the next
// boot founds a new cluster: for 'etcdadm seed --force' after a teardown.
func ClearForNewCluster(ctx context.Context, st store.Store) error {
	for _, k := range []string{etcdmanager.ClusterCreatedKey, member.PlanKey, TeardownKey} {
		if err := st.Delete(ctx, k); err != nil {
			return fmt.Errorf("seed: clear %s: %w", k, err)
		}
	}
	return nil
}

// ActTeardown is a host's part of a teardown: stop the units, move the
// data aside. torn is true when the store is torn down (member join then
// does nothing else).
func ActTeardown(ctx context.Context, cfg member.Config, d member.Deps, stop StopFunc) (torn bool, err error) {
	t, err := TornDown(ctx, d.Store)
	if err != nil || t == nil {
		return false, err
	}
	return true, actTeardown(ctx, cfg, d, stop, *t)
}

// StopFunc stops a systemd unit (a teardown stops etcd and the timers).
type StopFunc func(ctx context.Context, unit string) error

func actTeardown(ctx context.Context, cfg member.Config, d member.Deps, stop StopFunc, t Teardown) error {
	log := d.Log.With("component", "teardown")
	var errs []error
	for _, u := range TeardownUnits() {
		if err := stop(ctx, u); err != nil && !NotLoaded(err) {
			errs = append(errs, fmt.Errorf("stop %s: %w", u, err))
		}
	}
	if len(errs) > 0 {
		// etcd (or a unit that starts it) may still run on the data: never
		// move a live member's data away under it. The next run tries again.
		log.Error("the cluster was torn down, but stopping this host's units failed: its data stays in place until they stop", "err", errors.Join(errs...))
		return fmt.Errorf("teardown: %w; the data is left in place: stop them by hand (systemctl stop %s) or let the next etcd-member-join run try again", errors.Join(errs...), strings.Join(TeardownUnits(), " "))
	}
	dataDir := member.DataDir(cfg)
	if dst, err := localetcd.MoveAside(dataDir, "torn-down-"+t.At.Format("20060102T150405Z")); err != nil {
		errs = append(errs, err)
	} else if dst != "" {
		log.Warn("the cluster was torn down: etcd stopped, its data moved aside (kept)", "to", dst)
	}
	log.Info("this store's cluster was torn down at " + t.At.Format(time.RFC3339) + ": nothing runs here until 'etcdadm seed --force' declares a new cluster")
	return errors.Join(errs...)
}

// NotLoaded: a unit this host does not have (an older image) is stopped
// already.
func NotLoaded(err error) bool {
	s := err.Error()
	return strings.Contains(s, "not loaded") || strings.Contains(s, "NoSuchUnit")
}
