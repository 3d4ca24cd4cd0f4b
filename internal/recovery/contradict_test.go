package recovery

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

func seededStore(t *testing.T) store.Store {
	t.Helper()
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterspec.Seed(t.Context(), st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}}, false); err != nil {
		t.Fatal(err)
	}
	return st
}

func pendingRestore(t *testing.T, st store.Store, now time.Time) string {
	t.Helper()
	b, err := etcdmanager.MarshalRestoreCommand(etcdmanager.RestoreCommand{Timestamp: now.UnixNano(), ClusterSpec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}, Backup: "2026-11-23T22:00:00Z-000001"})
	if err != nil {
		t.Fatal(err)
	}
	key := etcdmanager.CommandKey(now)
	if _, err := store.PutBytes(t.Context(), st, key, b, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return key
}

// Issue 26 finding 4: a request the hosts would not carry out, or would
// carry out against one pending, is refused before anything is written,
// saying why and which command clears it.
func TestRequestsThatContradict(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 11, 23, 22, 0, 0, 0, time.UTC)
	lost := Quorum{Members: []Answer{{Name: "etcd-a", Answering: true}, {Name: "etcd-b"}, {Name: "etcd-c"}}, Answering: 1, Need: 2, Lost: true, Best: "etcd-a"}

	st := seededStore(t)
	if _, err := pause.Set(ctx, st, "replacing a disk", now); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"restore":  func() error { _, _, err := Request(ctx, st, "latest", now); return err }(),
		"recover":  func() error { _, err := RequestRecover(ctx, st, lost, "etcd-a", now, DefaultRecoverWithin); return err }(),
		"teardown": RequestTeardown(ctx, st, now),
	} {
		if !errors.Is(err, ErrContradicts) || !strings.Contains(err.Error(), "replacing a disk") || !strings.Contains(err.Error(), "'etcdadm resume' first") {
			t.Errorf("%s while paused: %v, want refused naming the pause and 'etcdadm resume'", name, err)
		}
	}

	st = seededStore(t)
	if err := RequestTeardown(ctx, st, now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Request(ctx, st, "latest", now); !errors.Is(err, ErrContradicts) || !strings.Contains(err.Error(), "torn down at 2026-11-23T22:00:00Z") || !strings.Contains(err.Error(), "seed --force") {
		t.Errorf("restore after a teardown: %v", err)
	}
	if err := RequestTeardown(ctx, st, now); err != nil {
		t.Errorf("a second teardown: %v", err)
	}

	st = seededStore(t)
	if _, err := RequestRecover(ctx, st, lost, "etcd-a", now, DefaultRecoverWithin); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Request(ctx, st, "latest", now); !errors.Is(err, ErrContradicts) || !strings.Contains(err.Error(), "recovery from member etcd-a is in progress") {
		t.Errorf("restore during a recovery: %v", err)
	}

	st = seededStore(t)
	pendingRestore(t, st, now)
	if _, err := RequestRecover(ctx, st, lost, "etcd-a", now, DefaultRecoverWithin); !errors.Is(err, ErrContradicts) || !strings.Contains(err.Error(), "etcdadm restore --cancel") {
		t.Errorf("recover while a restore is pending: %v", err)
	}
	if _, err := LoadRecover(ctx, st); err != nil {
		t.Fatal(err)
	}
}

// 'etcdadm restore --cancel' withdraws a restore no host has begun, and
// refuses one a host has (the members would hold different data).
func TestCancel(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 11, 23, 22, 0, 0, 0, time.UTC)
	st := seededStore(t)
	if p, err := Cancel(ctx, st); p != nil || err != nil {
		t.Fatalf("nothing pending: %v %v", p, err)
	}
	key := pendingRestore(t, st, now)
	p, err := Cancel(ctx, st)
	if err != nil || p == nil || p.Key != key {
		t.Fatalf("cancel: %+v %v", p, err)
	}
	if left, err := FindPending(ctx, st); left != nil || err != nil {
		t.Fatalf("still pending after cancel: %+v %v", left, err)
	}

	key = pendingRestore(t, st, now.Add(time.Minute))
	id := etcdmanager.CommandID(key)
	if _, err := save(ctx, st, Record{Command: id, Backup: "b", State: Running, Started: now}, "", now); err != nil {
		t.Fatal(err)
	}
	if _, err := Cancel(ctx, st); !errors.Is(err, ErrBegun) {
		t.Fatalf("cancel of a begun restore: %v, want ErrBegun", err)
	}
	if left, err := FindPending(ctx, st); left == nil || err != nil {
		t.Fatalf("a begun restore was withdrawn: %v", err)
	}
	_, etag, err := Load(ctx, st, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := save(ctx, st, Record{Command: id, Backup: "b", State: Refused, Started: now}, etag, now); err != nil {
		t.Fatal(err)
	}
	if p, err := Cancel(ctx, st); err != nil || p == nil {
		t.Fatalf("cancel of a refused restore: %v", err)
	}
}

// Issue 26 finding 6: a member that is not one is refused naming the
// members, not with a dump of Go structs.
func TestRecoverUnknownMember(t *testing.T) {
	lost := Quorum{Members: []Answer{{Name: "etcd-a", Answering: true}, {Name: "etcd-b"}, {Name: "etcd-c"}}, Answering: 1, Need: 2, Lost: true, Best: "etcd-a"}
	_, err := RequestRecover(t.Context(), seededStore(t), lost, "zz", time.Now(), DefaultRecoverWithin)
	if err == nil || !strings.Contains(err.Error(), "the members are etcd-a, etcd-b, etcd-c (etcd-a has the most of the log)") || strings.Contains(err.Error(), "{") {
		t.Errorf("recover --from-member zz: %v", err)
	}
}

// Adopting into a torn-down store does not advise the teardown done.
func TestAdoptIntoTornDownStore(t *testing.T) {
	st := seededStore(t)
	if err := RequestTeardown(t.Context(), st, time.Date(2026, 11, 23, 22, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	err := emptyForAdoption(t.Context(), st)
	if !errors.Is(err, ErrNotAdoptable) || !strings.Contains(err.Error(), "torn down at 2026-11-23T22:00:00Z") || strings.Contains(err.Error(), "'etcdadm teardown'") {
		t.Errorf("adopt into a torn-down store: %v", err)
	}
}
