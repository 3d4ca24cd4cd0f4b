// Package status gathers what an operator checks first: members, leader,
// learners, versions, database size and use, alarms, certificate expiry
// and the age of the last backup. Used by etcdadm status and member list.
package status

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Member is one member as the operator sees it.
type Member struct {
	Name       string   `json:"name"`
	ID         string   `json:"id"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
	Learner    bool     `json:"learner"`
	Leader     bool     `json:"leader"`
	Healthy    bool     `json:"healthy"`
	Error      string   `json:"error,omitempty"`
	Version    string   `json:"version,omitempty"`
	DBSize     int64    `json:"dbSize,omitempty"`
	DBInUse    int64    `json:"dbSizeInUse,omitempty"`
	RaftIndex  uint64   `json:"raftIndex,omitempty"`
	// StorageVersion and Downgrade come from etcd 3.6+ only.
	StorageVersion string `json:"storageVersion,omitempty"`
	Downgrade      string `json:"downgrade,omitempty"`
}

// Report is the whole status.
type Report struct {
	ClusterID    string               `json:"clusterID"`
	Members      []Member             `json:"members"`
	Alarms       []string             `json:"alarms,omitempty"`
	LastBackup   string               `json:"lastBackup,omitempty"`
	BackupAge    time.Duration        `json:"lastBackupAgeNanos,omitempty"`
	Certificates map[string]time.Time `json:"certificates,omitempty"`
	Spec         *etcdmanager.ClusterSpec
	// EtcdError: etcd did not answer; the rest of the report still holds.
	EtcdError string `json:"etcdError,omitempty"`
	// AlarmsError: the alarms could not be listed; Alarms is then
	// unknown, not empty.
	AlarmsError string `json:"alarmsError,omitempty"`
	// LastBackupError: the store could not tell whether a backup is
	// complete; LastBackup is then unknown, not absent.
	LastBackupError string `json:"lastBackupError,omitempty"`
}

// Cluster is the part of *clientv3.Client status needs.
type Cluster interface {
	MemberList(ctx context.Context, opts ...clientv3.OpOption) (*clientv3.MemberListResponse, error)
	Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error)
	AlarmList(ctx context.Context) (*clientv3.AlarmResponse, error)
}

// Members lists the members and asks each for its status (2 s each, in
// parallel).
func Members(ctx context.Context, cli Cluster) (string, []Member, error) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("status: member list: %w", err)
	}
	out := make([]Member, len(ml.Members))
	var wg sync.WaitGroup
	for i, m := range ml.Members {
		out[i] = Member{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.IsLearner}
		if out[i].Name == "" {
			out[i].Name = "(not started)"
		}
		if len(m.ClientURLs) == 0 {
			out[i].Error = "not started"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			st, err := cli.Status(sctx, m.ClientURLs[0])
			if err != nil {
				out[i].Error = err.Error()
				return
			}
			out[i].Healthy = len(st.Errors) == 0
			if len(st.Errors) > 0 {
				out[i].Error = fmt.Sprint(st.Errors)
			}
			out[i].Leader = st.Leader == m.ID
			out[i].Version, out[i].DBSize, out[i].DBInUse, out[i].RaftIndex = st.Version, st.DbSize, st.DbSizeInUse, st.RaftIndex
			out[i].StorageVersion = st.StorageVersion
			if d := st.DowngradeInfo; d != nil && d.Enabled {
				out[i].Downgrade = "to " + d.TargetVersion
			}
		}()
	}
	wg.Wait()
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return fmt.Sprintf("%x", ml.Header.ClusterId), out, nil
}

// Collect builds the full report; st may be nil (no store configured).
// etcdTimeout bounds the questions Collect asks etcd.
const etcdTimeout = 10 * time.Second

func Collect(ctx context.Context, cli Cluster, st store.Store, now time.Time) (Report, error) {
	var r Report
	// etcd down is what status is often run for: answer within
	// etcdTimeout and report the rest (backups, units) all the same.
	ectx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	var err error
	if r.ClusterID, r.Members, err = Members(ectx, cli); err != nil {
		r.EtcdError = err.Error()
	} else if al, err := cli.AlarmList(ectx); err != nil {
		r.AlarmsError = fmt.Sprintf("status: alarm list: %v", err)
	} else {
		for _, a := range al.Alarms {
			r.Alarms = append(r.Alarms, fmt.Sprintf("%s on member %x", a.Alarm, a.MemberID))
		}
	}
	if st != nil {
		names, err := backup.Names(ctx, st)
		if err != nil {
			return r, err
		}
		for i := len(names) - 1; i >= 0 && r.LastBackup == ""; i-- { // newest complete one
			_, err := st.Stat(ctx, names[i]+"/"+etcdmanager.MetaFile)
			if errors.Is(err, store.ErrNotFound) {
				continue // incomplete
			}
			if err != nil {
				// Whether this one is complete is unknown, so which is
				// the last backup is too.
				r.LastBackupError = fmt.Sprintf("status: backup %s: %v", names[i], err)
				break
			}
			r.LastBackup = names[i]
			t, _, _ := etcdmanager.ParseBackupName(names[i])
			r.BackupAge = now.Sub(t)
		}
	}
	return r, nil
}
