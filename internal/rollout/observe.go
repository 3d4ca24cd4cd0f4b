package rollout

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
)

// MemberState is one member as the switcher sees it.
type MemberState struct {
	ID             uint64 `json:"-"`
	Name           string `json:"name"`
	ClientURL      string `json:"clientURL"`
	Learner        bool   `json:"learner,omitempty"`
	Healthy        bool   `json:"healthy"`
	Leader         bool   `json:"leader,omitempty"`
	Version        string `json:"version,omitempty"`
	StorageVersion string `json:"storageVersion,omitempty"`
	Applied        uint64 `json:"-"`
	raw            *etcdserverpb.Member
}

// ClusterState is the whole cluster at one moment.
type ClusterState struct {
	Members []MemberState `json:"members"`
	// ClusterVersion is etcd's ("3.6.0"), from GET /version.
	ClusterVersion   string `json:"clusterVersion,omitempty"`
	DowngradeEnabled bool   `json:"downgradeEnabled,omitempty"`
	DowngradeTarget  string `json:"downgradeTarget,omitempty"`
}

// Minor of the cluster version ("3.6"), "" when unknown.
func (c ClusterState) ClusterMinor() string {
	v, err := etcdversion.Parse(c.ClusterVersion)
	if err != nil {
		return ""
	}
	return v.MinorString()
}

func (c ClusterState) member(name string) *MemberState {
	for i := range c.Members {
		if c.Members[i].Name == name {
			return &c.Members[i]
		}
	}
	return nil
}

func (c ClusterState) leader() *MemberState {
	for i := range c.Members {
		if c.Members[i].Leader {
			return &c.Members[i]
		}
	}
	return nil
}

// observe reads every member's status, the cluster version and the
// downgrade state.
func observe(ctx context.Context, s *member.Session) (ClusterState, error) {
	ms, err := s.MemberList(ctx)
	if err != nil {
		return ClusterState{}, fmt.Errorf("rollout: member list: %w", err)
	}
	var cs ClusterState
	var leaderID uint64
	for _, m := range ms {
		st := MemberState{ID: m.ID, Name: m.Name, Learner: m.IsLearner, raw: m}
		if len(m.ClientURLs) > 0 {
			st.ClientURL = m.ClientURLs[0]
			if resp, err := member.MemberStatus(ctx, s.Cli, m); err == nil {
				st.Healthy = true
				st.Version = resp.Version
				st.StorageVersion = resp.StorageVersion
				st.Applied = resp.RaftAppliedIndex
				leaderID = resp.Leader
				if resp.DowngradeInfo != nil && resp.DowngradeInfo.Enabled {
					cs.DowngradeEnabled, cs.DowngradeTarget = true, resp.DowngradeInfo.TargetVersion
				}
			}
		}
		cs.Members = append(cs.Members, st)
	}
	for i := range cs.Members {
		cs.Members[i].Leader = cs.Members[i].ID == leaderID && leaderID != 0
	}
	slices.SortFunc(cs.Members, func(a, b MemberState) int { return strings.Compare(a.Name, b.Name) })
	for _, m := range cs.Members {
		if m.Healthy {
			if v, err := ClusterVersion(ctx, s.TLS(), m.ClientURL); err == nil {
				cs.ClusterVersion = v
				break
			}
		}
	}
	return cs, nil
}

// ClusterVersion asks one member's /version: the cluster version is not
// in the gRPC status.
func ClusterVersion(ctx context.Context, tc *tls.Config, clientURL string) (string, error) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(clientURL, "/")+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		Cluster string `json:"etcdcluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", err
	}
	return v.Cluster, nil
}
