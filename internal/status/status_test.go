package status

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
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

func (f fakeCluster) AlarmList(context.Context) (*clientv3.AlarmResponse, error) {
	if f.alarmErr != nil {
		return nil, f.alarmErr
	}
	return &clientv3.AlarmResponse{Alarms: f.alarms}, nil
}

func TestCollectAlarms(t *testing.T) {
	r, err := Collect(t.Context(), fakeCluster{alarms: []*etcdserverpb.AlarmMember{{MemberID: 1, Alarm: etcdserverpb.AlarmType_NOSPACE}}}, nil, time.Now())
	if err != nil || len(r.Alarms) != 1 || !strings.Contains(r.Alarms[0], "NOSPACE") || r.AlarmsError != "" {
		t.Errorf("one alarm: %+v, %v", r, err)
	}
	r, err = Collect(t.Context(), fakeCluster{alarmErr: errors.New("etcdserver: request timed out")}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
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
	r, err := Collect(t.Context(), fakeCluster{}, fs, now)
	if err != nil || r.LastBackup != newer || r.BackupAge != time.Hour || r.LastBackupError != "" {
		t.Errorf("last backup %q (%s ago, error %q), %v; want %s an hour ago", r.LastBackup, r.BackupAge, r.LastBackupError, err, newer)
	}
	// The store cannot say whether the newest backup is complete: the last
	// backup is unknown, neither "none" nor the older one.
	r, err = Collect(t.Context(), fakeCluster{}, statFails{fs, newer + "/" + etcdmanager.MetaFile}, now)
	if err != nil {
		t.Fatal(err)
	}
	if r.LastBackup != "" || !strings.Contains(r.LastBackupError, "store unreachable") || !strings.Contains(r.LastBackupError, newer) {
		t.Errorf("meta read failed: last backup %q, error %q; want the error naming %s", r.LastBackup, r.LastBackupError, newer)
	}
}
