// Package status gathers what an operator checks first: members, leader,
// learners, versions, database size and use, alarms, certificate expiry,
// and, from the store whether or not etcd answers, the spec, the pause,
// pending restores, recoveries and teardowns, the rollout and the last
// backup. Used by etcdadm status and member list.
package status

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/member"
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
	// Unreachable: a standby host watches this member, which does not
	// answer it, and replaces it at Unreachable.Eligible if it still
	// does not.
	Unreachable *member.Unreachable `json:"unreachable,omitempty"`
}

// Report is the whole status: what etcd says and what the store holds.
type Report struct {
	ClusterID    string               `json:"clusterID"`
	Members      []Member             `json:"members"`
	Alarms       []string             `json:"alarms,omitempty"`
	Certificates map[string]time.Time `json:"certificates,omitempty"`
	// EtcdError: etcd was not reached, for EtcdNotReached; the rest of
	// the report still holds.
	EtcdError      string `json:"etcdError,omitempty"`
	EtcdNotReached string `json:"etcdNotReached,omitempty"`
	// AlarmsError: the alarms could not be listed; Alarms is then
	// unknown, not empty.
	AlarmsError string `json:"alarmsError,omitempty"`
	// Control is the store's part; empty without a store.
	Control
}

// Why etcd was not reached.
const (
	// NoClient: no client could be made here (its TLS files missing,
	// unreadable or expired, or not given).
	NoClient = "no client"
	// TLSRefused: the TLS handshake failed (another CA, a client
	// certificate etcd refuses).
	TLSRefused = "tls"
	// NoAnswer: nothing answered in time.
	NoAnswer = "no answer"
	// NoQuorum: a member answers its status, but has no leader: the
	// cluster's questions (linearizable) find no quorum to answer them.
	NoQuorum = "no quorum"
)

// Cluster is the part of *clientv3.Client status needs.
type Cluster interface {
	MemberList(ctx context.Context, opts ...clientv3.OpOption) (*clientv3.MemberListResponse, error)
	Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error)
	AlarmList(ctx context.Context) (*clientv3.AlarmResponse, error)
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
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

// Etcd is how Collect reaches etcd.
type Etcd struct {
	// Cluster answers; nil when no client could be made (ClientErr
	// says why).
	Cluster   Cluster
	ClientErr error
	// Why explains a failed call (etcdclient.Config.Why); nil: as is.
	Why func(error) error
	// Timeout bounds every question to etcd; 0 means DefaultTimeout.
	Timeout time.Duration
	// Endpoints are asked for their own status when the cluster does not
	// answer, to tell a cluster without quorum from no etcd at all.
	Endpoints []string
}

// DefaultTimeout bounds the questions Collect asks etcd.
const DefaultTimeout = 10 * time.Second

// Collect builds the full report; st may be nil (no store configured).
// etcd not answering is what status is often run for: the store is read
// meanwhile, and the report holds it whatever etcd did.
func Collect(ctx context.Context, e Etcd, st store.Store, now time.Time) Report {
	var r Report
	done := make(chan Control, 1)
	go func() {
		var c Control
		if st != nil {
			c = LoadControl(ctx, st, now)
		}
		done <- c
	}()
	r.askEtcd(ctx, e)
	r.Control = <-done
	return r
}

// watched adds what standby hosts record of the members they watch
// (member.UnreachablePrefix); a record that cannot be read adds nothing.
func (r *Report) watched(ctx context.Context, cli Cluster) {
	watched, err := member.Watched(ctx, cli)
	if err != nil {
		return
	}
	for i := range r.Members {
		if u, ok := watched[r.Members[i].ID]; ok && !r.Members[i].Healthy {
			r.Members[i].Unreachable = &u
		}
	}
}

// leaderless asks each endpoint for its own status (no quorum needed): a
// member that answers without a leader means the cluster has no quorum,
// not that etcd is not there.
func (r *Report) leaderless(ctx context.Context, e Etcd, timeout time.Duration) {
	var answering []string
	for _, ep := range e.Endpoints {
		sctx, cancel := context.WithTimeout(ctx, timeout/2)
		s, err := e.Cluster.Status(sctx, ep)
		cancel()
		if err != nil {
			continue
		}
		if s.Leader != 0 {
			return // a leader: the question failed for another reason
		}
		answering = append(answering, ep)
	}
	if len(answering) > 0 {
		r.EtcdNotReached = NoQuorum
		r.EtcdError = fmt.Sprintf("etcd answers at %s but has no leader: the cluster has no quorum (fewer than a majority of its voting members are up)", strings.Join(answering, ", "))
	}
}

func (r *Report) askEtcd(ctx context.Context, e Etcd) {
	if e.Cluster == nil {
		r.EtcdNotReached = NoClient
		r.EtcdError = "no etcd client"
		if e.ClientErr != nil {
			r.EtcdError = e.ClientErr.Error()
		}
		return
	}
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ectx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	if r.ClusterID, r.Members, err = Members(ectx, e.Cluster); err != nil {
		r.EtcdNotReached = NoAnswer
		if e.Why != nil {
			if why := e.Why(err); why.Error() != err.Error() {
				err, r.EtcdNotReached = why, TLSRefused
			}
		}
		r.EtcdError = err.Error()
		if r.EtcdNotReached == NoAnswer {
			r.leaderless(ctx, e, timeout)
		}
		return
	}
	r.watched(ectx, e.Cluster)
	al, err := e.Cluster.AlarmList(ectx)
	if err != nil {
		r.AlarmsError = fmt.Sprintf("status: alarm list: %v", err)
		return
	}
	for _, a := range al.Alarms {
		r.Alarms = append(r.Alarms, fmt.Sprintf("%s on member %x", a.Alarm, a.MemberID))
	}
}
