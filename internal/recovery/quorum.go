package recovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/member"
)

// Answer is one voting member as seen from outside, without quorum.
type Answer struct {
	Name      string `json:"name"`
	ClientURL string `json:"clientURL"`
	Answering bool   `json:"answering"`
	RaftIndex uint64 `json:"raftIndex,omitempty"`
}

// Quorum is whether the cluster still has a majority.
type Quorum struct {
	Members   []Answer `json:"members"`
	Need      int      `json:"need"`
	Answering int      `json:"answering"`
	Lost      bool     `json:"lost"`
	// Best is the answering member with the most of the log: the one to
	// recover from (it loses the least).
	Best string `json:"best,omitempty"`
	// Leader is the member an answering member reports as its leader:
	// then the majority is not lost, whatever else does not answer.
	Leader string `json:"leader,omitempty"`
}

// ProbeQuorum asks each endpoint for its status (which needs no quorum)
// and reads the membership, also without quorum, from the member that
// has the most of the log. dial opens a client to one endpoint.
func ProbeQuorum(ctx context.Context, endpoints []string, dial func(ep string) (*clientv3.Client, error)) (Quorum, error) {
	var q Quorum
	if len(endpoints) == 0 {
		return q, errors.New("the store's peer registry lists no member: no host ran etcd-member-join against this store (check --store)")
	}
	answers := map[string]uint64{}
	leaders := map[uint64]bool{}
	var best *clientv3.Client
	var bestIdx uint64
	var lastErr error
	defer func() {
		if best != nil {
			best.Close()
		}
	}()
	for _, ep := range endpoints {
		c, err := dial(ep)
		if err != nil {
			lastErr = err
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Status(sctx, ep)
		cancel()
		if err != nil {
			lastErr = fmt.Errorf("%s: %w", ep, err)
		} else if st.Leader != 0 {
			leaders[st.Leader] = true
		}
		if err != nil || (best != nil && st.RaftIndex <= bestIdx) {
			c.Close()
			if err == nil {
				answers[ep] = st.RaftIndex
			}
			continue
		}
		answers[ep] = st.RaftIndex
		if best != nil {
			best.Close()
		}
		best, bestIdx = c, st.RaftIndex
	}
	if best == nil {
		return q, fmt.Errorf("no member answers at %s (last: %w): is any member's host up, and is the client certificate the cluster's?", strings.Join(endpoints, ", "), lastErr)
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ml, err := best.MemberList(mctx, clientv3.WithSerializable())
	if err != nil {
		return q, fmt.Errorf("member list without quorum: %w", err)
	}
	bestAt := uint64(0)
	for _, m := range ml.Members {
		if m.IsLearner {
			continue
		}
		a := Answer{Name: m.Name}
		if leaders[m.ID] {
			q.Leader = m.Name
		}
		if len(m.ClientURLs) > 0 {
			a.ClientURL = m.ClientURLs[0]
			a.RaftIndex, a.Answering = answers[a.ClientURL]
		}
		if a.Answering {
			q.Answering++
			if q.Best == "" || a.RaftIndex > bestAt {
				q.Best, bestAt = a.Name, a.RaftIndex
			}
		}
		q.Members = append(q.Members, a)
	}
	slices.SortFunc(q.Members, func(a, b Answer) int { return strings.Compare(a.Name, b.Name) })
	q.Need = member.Quorum(len(q.Members))
	q.Lost = q.Answering < q.Need
	return q, nil
}
