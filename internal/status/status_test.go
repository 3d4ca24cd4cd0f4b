package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// fakeCluster is one healthy member; alarmErr fails AlarmList.
type fakeCluster struct {
	alarms   []*etcdserverpb.AlarmMember
	alarmErr error
}

func (f fakeCluster) MemberList(context.Context, ...clientv3.OpOption) (*clientv3.MemberListResponse, error) {
	return &clientv3.MemberListResponse{
		Header:  &etcdserverpb.ResponseHeader{ClusterId: 0xc1},
		Members: []*etcdserverpb.Member{{ID: 1, Name: "etcd-a", ClientURLs: []string{"https://10.0.0.1:2379"}}},
	}, nil
}

func (f fakeCluster) Status(context.Context, string) (*clientv3.StatusResponse, error) {
	return &clientv3.StatusResponse{Leader: 1, Version: "3.6.16"}, nil
}

func (f fakeCluster) Get(context.Context, string, ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return &clientv3.GetResponse{}, nil
}

func (f fakeCluster) AlarmList(context.Context) (*clientv3.AlarmResponse, error) {
	if f.alarmErr != nil {
		return nil, f.alarmErr
	}
	return &clientv3.AlarmResponse{Alarms: f.alarms}, nil
}

func TestCollectAlarms(t *testing.T) {
	r := Collect(t.Context(), Etcd{Cluster: fakeCluster{alarms: []*etcdserverpb.AlarmMember{{MemberID: 1, Alarm: etcdserverpb.AlarmType_NOSPACE}}}}, nil, time.Now())
	if len(r.Alarms) != 1 || !strings.Contains(r.Alarms[0], "NOSPACE") || r.AlarmsError != "" {
		t.Errorf("one alarm: %+v", r)
	}
	r = Collect(t.Context(), Etcd{Cluster: fakeCluster{alarmErr: errors.New("etcdserver: request timed out")}}, nil, time.Now())
	if len(r.Alarms) != 0 || !strings.Contains(r.AlarmsError, "request timed out") {
		t.Errorf("alarm list failed: alarms %q, error %q; want the error shown, not 'no alarms'", r.Alarms, r.AlarmsError)
	}
	if len(r.Members) != 1 || r.EtcdError != "" {
		t.Errorf("alarm list failed: the members were lost: %+v", r)
	}
}

// statFails is a store whose Stat of one key fails.
type statFails struct {
	store.Store
	key string
}

func (s statFails) Stat(ctx context.Context, key string) (store.Info, error) {
	if key == s.key {
		return store.Info{}, fmt.Errorf("stat %s: %w", key, store.ErrUnreachable)
	}
	return s.Store.Stat(ctx, key)
}

func TestCollectLastBackup(t *testing.T) {
	fs, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	older := etcdmanager.BackupName(now.Add(-2*time.Hour), 1)
	newer := etcdmanager.BackupName(now.Add(-time.Hour), 1)
	incomplete := etcdmanager.BackupName(now.Add(-time.Minute), 1)
	for _, k := range []string{older + "/" + etcdmanager.MetaFile, newer + "/" + etcdmanager.MetaFile, incomplete + "/" + etcdmanager.DataFile} {
		if _, err := store.PutBytes(t.Context(), fs, k, []byte("{}"), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := Collect(t.Context(), Etcd{Cluster: fakeCluster{}}, fs, now)
	if r.LastBackup != newer || r.BackupAge != time.Hour || r.LastBackupError != "" {
		t.Errorf("last backup %q (%s ago, error %q); want %s an hour ago", r.LastBackup, r.BackupAge, r.LastBackupError, newer)
	}
	// The store cannot say whether the newest backup is complete: the last
	// backup is unknown, neither "none" nor the older one.
	r = Collect(t.Context(), Etcd{Cluster: fakeCluster{}}, statFails{fs, newer + "/" + etcdmanager.MetaFile}, now)
	if r.LastBackup != "" || !strings.Contains(r.LastBackupError, "store unreachable") || !strings.Contains(r.LastBackupError, newer) {
		t.Errorf("meta read failed: last backup %q, error %q; want the error naming %s", r.LastBackup, r.LastBackupError, newer)
	}
}

// blockingCluster answers nothing until the caller gives up.
type blockingCluster struct{ fakeCluster }

func (blockingCluster) MemberList(ctx context.Context, _ ...clientv3.OpOption) (*clientv3.MemberListResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// leaderlessCluster: a member that answers for itself but has no leader
// (2 of 3 down), so the cluster's questions find no quorum.
type leaderlessCluster struct{ blockingCluster }

func (leaderlessCluster) Status(context.Context, string) (*clientv3.StatusResponse, error) {
	return &clientv3.StatusResponse{Leader: 0, Version: "3.6.16"}, nil
}

// seeded is a store an operator has worked on: a spec, a backup, a
// restore command as etcd-manager-ctl writes it, a recovery request, a
// teardown and a pause.
func seeded(t *testing.T, now time.Time) (store.Store, string) {
	t.Helper()
	fs, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cl := clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}}
	if err := cl.Defaults(); err != nil {
		t.Fatal(err)
	}
	if err := clusterspec.Seed(ctx, fs, cl, false); err != nil {
		t.Fatal(err)
	}
	name := etcdmanager.BackupName(now.Add(-time.Hour), 1)
	if _, err := store.PutBytes(ctx, fs, name+"/"+etcdmanager.MetaFile, []byte("{}"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cmd, err := etcdmanager.MarshalRestoreCommand(etcdmanager.RestoreCommand{Timestamp: now.Add(-time.Minute).UnixNano(), ClusterSpec: cl.Spec, Backup: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutBytes(ctx, fs, etcdmanager.CommandKey(now.Add(-time.Minute)), cmd, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every control object at once, as no request would leave them (a
	// recovery is refused while a restore waits): written directly.
	rec, _ := json.Marshal(recovery.Recover{ID: now.UTC().Format("20060102T150405Z"), Member: "etcd-a", At: now.UTC(), State: recovery.Running})
	if _, err := store.PutBytes(ctx, fs, recovery.RecoverKey, rec, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := recovery.RequestTeardown(ctx, fs, now); err != nil {
		t.Fatal(err)
	}
	if _, err := pause.Set(ctx, fs, "replacing a disk", now); err != nil {
		t.Fatal(err)
	}
	return fs, name
}

// TestCollectStoreWithoutEtcd: whatever became of etcd — no client could
// be made, nothing answers, the TLS handshake fails — the report holds
// the store's state, and says why etcd was not reached.
func TestCollectStoreWithoutEtcd(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	fs, backupName := seeded(t, now)
	tlsWhy := func(err error) error {
		return fmt.Errorf("%w (127.0.0.1:2379: tls: unknown certificate authority)", err)
	}
	cases := []struct {
		name string
		etcd Etcd
		want string
		msg  string
	}{
		{"no client", Etcd{ClientErr: errors.New("etcd: TLS files: open client.crt: no such file or directory")}, NoClient, "client.crt"},
		{"no answer", Etcd{Cluster: blockingCluster{}, Timeout: 100 * time.Millisecond, Why: func(err error) error { return err }}, NoAnswer, "deadline exceeded"},
		{"tls refused", Etcd{Cluster: blockingCluster{}, Timeout: 100 * time.Millisecond, Why: tlsWhy}, TLSRefused, "unknown certificate authority"},
		// Issue 26 finding 6: a member that answers is not "not reached".
		{"no quorum", Etcd{Cluster: leaderlessCluster{}, Timeout: 100 * time.Millisecond, Why: func(err error) error { return err }, Endpoints: []string{"https://10.0.0.1:2379"}}, NoQuorum, "etcd answers at https://10.0.0.1:2379 but has no leader"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := Collect(t.Context(), tc.etcd, fs, now)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v", took)
			}
			if r.EtcdNotReached != tc.want || !strings.Contains(r.EtcdError, tc.msg) || len(r.Members) != 0 {
				t.Errorf("etcd: not reached %q (%q), %d members; want %q saying %q", r.EtcdNotReached, r.EtcdError, len(r.Members), tc.want, tc.msg)
			}
			c := r.Control
			if c.Spec == nil || c.Spec.MemberCount != 3 || c.Spec.EtcdVersion != "3.6.16" {
				t.Errorf("spec %+v", c.Spec)
			}
			if c.Paused == nil || c.Paused.Reason != "replacing a disk" {
				t.Errorf("pause %+v", c.Paused)
			}
			if p := c.PendingRestore; p == nil || p.Backup != backupName || !p.Requested.Equal(now.Add(-time.Minute)) {
				t.Errorf("pending restore %+v, want backup %s requested a minute ago", p, backupName)
			}
			if c.Recover == nil || c.Recover.Member != "etcd-a" || c.Recover.State != recovery.Running {
				t.Errorf("recovery %+v", c.Recover)
			}
			if c.Teardown == nil || !c.Teardown.At.Equal(now) {
				t.Errorf("teardown %+v", c.Teardown)
			}
			if c.LastBackup != backupName || len(c.StoreErrors) != 0 {
				t.Errorf("last backup %q, store errors %q", c.LastBackup, c.StoreErrors)
			}
		})
	}
}

// TestLoadControlStoreGone: a store that cannot be reached is named once,
// not once for every part.
func TestLoadControlStoreGone(t *testing.T) {
	fs, _ := seeded(t, time.Now())
	c := LoadControl(t.Context(), unreachable{fs}, time.Now())
	if len(c.StoreErrors) != 1 || !strings.Contains(c.StoreErrors[0], "store unreachable") || c.Spec != nil {
		t.Errorf("store errors %q, spec %+v; want one error and nothing read", c.StoreErrors, c.Spec)
	}
	c = LoadControl(t.Context(), emptyStore(t), time.Now())
	if len(c.StoreErrors) != 0 || c.Spec != nil || c.Paused != nil || c.PendingRestore != nil || c.LastBackup != "" {
		t.Errorf("an empty store: %+v", c)
	}
}

type unreachable struct{ store.Store }

func (unreachable) Get(context.Context, string) (io.ReadCloser, store.Info, error) {
	return nil, store.Info{}, fmt.Errorf("get: %w", store.ErrUnreachable)
}

func emptyStore(t *testing.T) store.Store {
	fs, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return fs
}
