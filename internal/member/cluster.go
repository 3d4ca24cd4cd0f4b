package member

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// clusterEndpoints are the client URLs of the other registered members.
func (j *joiner) clusterEndpoints(ctx context.Context) ([]string, error) {
	peers, err := Peers(ctx, j.d.Store)
	if err != nil {
		return nil, err
	}
	var eps []string
	for _, p := range peers {
		if p.Name != j.me.Name {
			eps = append(eps, p.ClientURL)
		}
	}
	if len(eps) == 0 {
		eps = []string{j.me.ClientURL}
	}
	return eps, nil
}

func (j *joiner) client(eps []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: j.tls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("member join: etcd client: %w", err)
	}
	return cli, nil
}

// lock takes the membership lock. Taking it is retried: the client's
// endpoints come from the peer registry and may include a member that
// was just removed and is shutting down ("raft: stopped").
func (j *joiner) lock(ctx context.Context, cli *clientv3.Client) (context.Context, func(), error) {
	return j.lockKey(ctx, cli, lockKey, "membership lock")
}

// lockKey takes one of the cluster-wide locks in etcd (its session ends
// with this process, so a crashed holder frees it within 30 s). The
// session has a client of its own, dialled to cli's endpoints: a holder
// that replaces its client (a certificate reload during a CA rotation's
// restart) keeps the lock. The context returned ends when the session
// does (its lease lost): the holder's work under the lock stops then
// rather than going on unprotected.
func (j *joiner) lockKey(ctx context.Context, cli *clientv3.Client, key, what string) (context.Context, func(), error) {
	lctx, cancel := context.WithTimeout(ctx, j.cfg.Timeout)
	defer cancel()
	own, err := j.client(cli.Endpoints())
	if err != nil {
		return nil, nil, err
	}
	var sess *concurrency.Session
	var mu *concurrency.Mutex
	err = j.retry(lctx, what, func() error {
		var err error
		if sess, err = concurrency.NewSession(own, concurrency.WithTTL(30), concurrency.WithContext(ctx)); err != nil {
			return err
		}
		mu = concurrency.NewMutex(sess, key)
		if err = mu.Lock(lctx); err != nil {
			sess.Close()
		}
		return err
	})
	if err != nil {
		own.Close()
		return nil, nil, fmt.Errorf("member join: %s: %w", what, err)
	}
	held, lost := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-sess.Done():
			lost(fmt.Errorf("member join: %s lost: its session's lease ended", what))
		case <-held.Done():
		}
	}()
	return held, func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		mu.Unlock(uctx)
		sess.Close()
		lost(nil)
		own.Close()
	}, nil
}

func exists(ctx context.Context, st store.Store, key string) (bool, error) {
	_, err := st.Stat(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("member join: %w", err)
	}
	return true, nil
}

func names(ps []Peer) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return strings.Join(out, ", ")
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
