package member

import (
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPickVictim(t *testing.T) {
	members := func(names ...string) []*etcdserverpb.Member {
		var ms []*etcdserverpb.Member
		for i, n := range names {
			ms = append(ms, &etcdserverpb.Member{ID: uint64(i + 1), Name: n})
		}
		return ms
	}
	for _, tc := range []struct {
		names     []string
		unhealthy string
		want      string
	}{
		{names: []string{"etcd-a", "etcd-b", "etcd-c", "etcd-d", "etcd-e"}, want: "etcd-e"},
		{names: []string{"etcd-e", "etcd-a", "etcd-d", "etcd-c", "etcd-b"}, want: "etcd-e"},
		{names: []string{"etcd-a", "etcd-b", "etcd-c", "etcd-d"}, want: "etcd-d"},
		{names: []string{"etcd-a", "etcd-b", "etcd-c", "etcd-d", "etcd-e"}, unhealthy: "etcd-b", want: "etcd-b"},
	} {
		ms := members(tc.names...)
		healthy := map[uint64]bool{}
		for _, m := range ms {
			healthy[m.ID] = m.Name != tc.unhealthy
		}
		if got := pickVictim(ms, healthy).Name; got != tc.want {
			t.Errorf("%v (unhealthy %q): removes %s first, want %s", tc.names, tc.unhealthy, got, tc.want)
		}
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "connection refused"), true},
		{status.Error(codes.Unknown, "raft: stopped"), true}, // a removed member shutting down
		{rpctypes.ErrStopped, true},
		{rpctypes.ErrMemberLearnerNotReady, true},
		{rpctypes.ErrUnhealthy, true},
		{fmt.Errorf("add: %w", rpctypes.ErrPeerURLExist), false},
		{rpctypes.ErrMemberNotFound, false},
		{errors.New("permission denied"), false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
