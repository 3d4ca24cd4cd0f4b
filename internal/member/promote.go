package member

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
)

// promoteIfLearner promotes this member once it has caught up. etcd
// answers ErrMemberLearnerNotReady while the learner lags, and for a few
// seconds after a promote ErrUnhealthy: both are retried with backoff,
// within the configured timeout.
func (j *joiner) promoteIfLearner(ctx context.Context, cli *clientv3.Client) error {
	return j.retry(ctx, "promote", func() error {
		ml, err := cli.MemberList(ctx)
		if err != nil {
			return fmt.Errorf("member list: %w", err)
		}
		m := j.find(ml.Members)
		if m == nil {
			return fmt.Errorf("%s is not a member any more", j.me.Name)
		}
		if !m.IsLearner {
			return nil
		}
		if _, err := cli.MemberPromote(ctx, m.ID); err != nil {
			return err
		}
		crashpoint.Here(crashpoint.Promoted)
		j.log.Info("promoted from learner to voting member")
		return nil
	})
}

// memberList lists the members, retrying while the answering member is
// shutting down or the leader is changing.
func (j *joiner) memberList(ctx context.Context, cli *clientv3.Client) (*clientv3.MemberListResponse, error) {
	var ml *clientv3.MemberListResponse
	err := j.retry(ctx, "member list", func() (err error) {
		ml, err = cli.MemberList(ctx)
		return err
	})
	return ml, err
}

// retry runs op until it succeeds, fails with an error that is not
// retryable, or the timeout passes.
func (j *joiner) retry(ctx context.Context, what string, op func() error) error {
	deadline := time.Now().Add(j.cfg.Timeout)
	backoff := 100 * time.Millisecond
	for {
		err := op()
		if err == nil || !retryable(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still failing after %v: %w", what, j.cfg.Timeout, err)
		}
		j.log.Debug("retrying", "what", what, "err", err, "backoff", backoff)
		if err := sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// removeMember removes id, retrying through leader changes and the
// connection resets of a member shutting down; a member already gone
// counts as removed.
func (j *joiner) removeMember(ctx context.Context, cli *clientv3.Client, id uint64) error {
	return j.retry(ctx, "remove member", func() error {
		ml, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		for _, m := range ml.Members {
			if m.ID == id {
				_, err := cli.MemberRemove(ctx, id)
				if errors.Is(err, rpctypes.ErrMemberNotFound) || errors.Is(err, rpctypes.ErrGRPCMemberNotFound) {
					// An earlier attempt went through; the list we read
					// was served by a member that had not applied it yet.
					return nil
				}
				return err
			}
		}
		return nil
	})
}

func retryable(err error) bool {
	if status.Code(err) == codes.Unavailable {
		return true
	}
	// A member shutting down (just removed, or stopping) answers these.
	if errors.Is(err, rpctypes.ErrStopped) || errors.Is(err, rpctypes.ErrGRPCStopped) || strings.Contains(err.Error(), "raft: stopped") {
		return true
	}
	return errors.Is(err, rpctypes.ErrMemberLearnerNotReady) || errors.Is(err, rpctypes.ErrGRPCLearnerNotReady) ||
		errors.Is(err, rpctypes.ErrUnhealthy) || errors.Is(err, rpctypes.ErrGRPCUnhealthy) ||
		strings.Contains(err.Error(), "learner") || strings.Contains(err.Error(), "unhealthy")
}
