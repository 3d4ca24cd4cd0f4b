package etcdclient

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// What a bounded call that did not answer meant (Reach).
var (
	// ErrUnreachable: no member answered at the endpoints.
	ErrUnreachable = errors.New("etcd did not answer")
	// ErrNoQuorum: members answer, but none has a leader.
	ErrNoQuorum = errors.New("the cluster has no quorum")
)

// Statuser asks one member for its status, which needs no quorum.
type Statuser interface {
	Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error)
}

// Leaderless reports whether a member's status says it has no leader.
func Leaderless(s *clientv3.StatusResponse) bool { return s != nil && s.Leader == 0 }

// NoAnswer reports whether err is a request that found no answer in
// time (no connection, or no quorum to answer a linearizable request).
func NoAnswer(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "deadline exceeded") || strings.Contains(msg, "Unavailable") ||
		strings.Contains(msg, "no leader") || strings.Contains(msg, "request timed out")
}

// Reach explains err, the error of op (e.g. "member list"), to the
// operator: when the request found no answer it asks each endpoint for
// its status (needs no quorum, bounded by the dial timeout) and says
// whether no member answered (ErrUnreachable: is etcd running there?) or
// members answer without a leader (ErrNoQuorum: start the others, or
// recover from a survivor), and what to do. Other errors get Why's TLS
// explanation.
func (c Config) Reach(ctx context.Context, cli Statuser, op string, err error) error {
	if !NoAnswer(err) {
		return c.Why(err)
	}
	dial := c.DialTimeout
	if dial <= 0 {
		dial = CallTimeout(0) / 2
	}
	var answering []string
	leader := false
	for _, ep := range c.Endpoints {
		sctx, cancel := context.WithTimeout(ctx, dial)
		s, serr := cli.Status(sctx, ep)
		cancel()
		if serr != nil {
			continue
		}
		answering = append(answering, ep)
		leader = leader || !Leaderless(s)
	}
	eps := strings.Join(c.Endpoints, ", ")
	switch {
	case len(answering) == 0:
		return fmt.Errorf("%s: %w at %s within %s: is etcd running there (on a master: systemctl status etcd)? Check --endpoints and the network; 'etcdadm status --store URL' asks every registered member: %w",
			op, ErrUnreachable, eps, CallTimeout(c.DialTimeout), c.Why(err))
	case !leader:
		return fmt.Errorf("%s: %w: etcd answers at %s but has no leader (fewer than a majority of the voting members are up). Bring the stopped members back, or rebuild from a survivor with 'etcdadm recover --from-member NAME' ('etcdadm status --store URL' shows which members answer; docs/operations.md, \"A lost majority\"): %w",
			op, ErrNoQuorum, strings.Join(answering, ", "), err)
	}
	return fmt.Errorf("%s: etcd answered at %s but not this request within %s: %w", op, strings.Join(answering, ", "), CallTimeout(c.DialTimeout), c.Why(err))
}
