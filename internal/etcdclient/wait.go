package etcdclient

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// WaitLinearizable waits until cli serves a linearizable read (the
// cluster has a leader and this member applied up to it), asking every
// poll for up to within; waiting, when set, hears each failure. The one
// rule for "etcd is up" after a start, a restore or a recovery.
func WaitLinearizable(ctx context.Context, cli *clientv3.Client, within, poll time.Duration, waiting func(error)) error {
	deadline := time.Now().Add(within)
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(rctx, "health")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd serves no linearizable read after %v: %w (see journalctl -u etcd)", within, err)
		}
		if waiting != nil {
			waiting(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}
