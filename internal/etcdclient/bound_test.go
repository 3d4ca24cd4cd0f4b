package etcdclient

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// waitCluster answers nothing until its caller's context ends.
type waitCluster struct{ clientv3.Cluster }

func (waitCluster) MemberList(ctx context.Context, _ ...clientv3.OpOption) (*clientv3.MemberListResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

type waitKV struct{ clientv3.KV }

func (waitKV) Get(ctx context.Context, _ string, _ ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// Issue 26 finding 1: a request on a bound client ends within the bound
// whatever context it is given (a command's has no deadline), and a
// shorter deadline of the caller's stays.
func TestBound(t *testing.T) {
	cli := &clientv3.Client{Cluster: waitCluster{}, KV: waitKV{}}
	Bound(cli, 200*time.Millisecond)
	for name, call := range map[string]func(context.Context) error{
		"member list": func(ctx context.Context) error { _, err := cli.MemberList(ctx); return err },
		"get":         func(ctx context.Context) error { _, err := cli.Get(ctx, "k"); return err },
	} {
		start := time.Now()
		err := call(context.Background())
		if took := time.Since(start); err == nil || took > 2*time.Second || !NoAnswer(err) {
			t.Errorf("%s: %v after %s, want a deadline within the bound", name, err, took)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		start = time.Now()
		call(ctx)
		cancel()
		if took := time.Since(start); took > 150*time.Millisecond {
			t.Errorf("%s: the caller's 20ms deadline gave way to the bound (%s)", name, took)
		}
	}
}

// Reach tells a member without a leader from no member at all.
type statusFunc func(string) (*clientv3.StatusResponse, error)

func (f statusFunc) Status(_ context.Context, ep string) (*clientv3.StatusResponse, error) {
	return f(ep)
}

func TestReach(t *testing.T) {
	cfg := Config{Endpoints: []string{"https://10.0.0.1:2379"}, DialTimeout: time.Second, Insecure: true}
	noLeader := statusFunc(func(string) (*clientv3.StatusResponse, error) { return &clientv3.StatusResponse{}, nil })
	down := statusFunc(func(string) (*clientv3.StatusResponse, error) { return nil, context.DeadlineExceeded })
	err := cfg.Reach(context.Background(), noLeader, "member list", context.DeadlineExceeded)
	if !errors.Is(err, ErrNoQuorum) {
		t.Errorf("leaderless: %v", err)
	}
	err = cfg.Reach(context.Background(), down, "member list", context.DeadlineExceeded)
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("down: %v", err)
	}
}
