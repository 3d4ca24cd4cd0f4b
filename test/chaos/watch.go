package chaos

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Event is one change a watch delivered.
type Event struct {
	Rev   int64
	Key   string
	Value string
}

func eventOf(ev *clientv3.Event) Event {
	return Event{Rev: ev.Kv.ModRevision, Key: string(ev.Kv.Key), Value: string(ev.Kv.Value)}
}

// watchLog is a watch on the workload's prefix from before its first
// write. A watch etcd ends (its member lost the leader, the member went
// away) is opened again from the revision after the last event seen, as
// kube-apiserver's watch cache does; every event must still arrive once,
// in order.
type watchLog struct {
	mu      sync.Mutex
	events  []Event
	resumes int
	errors  []string
	done    chan struct{}
}

func startWatch(ctx context.Context, cli *clientv3.Client, prefix string, rev0 int64) *watchLog {
	l := &watchLog{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		next := rev0 + 1
		for ctx.Err() == nil {
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for resp := range cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(next)) {
				l.mu.Lock()
				if err := resp.Err(); err != nil && !errors.Is(err, rpctypes.ErrNoLeader) {
					l.errors = append(l.errors, err.Error())
				}
				for _, ev := range resp.Events {
					l.events = append(l.events, eventOf(ev))
					next = ev.Kv.ModRevision + 1
				}
				l.mu.Unlock()
			}
			cancel()
			if ctx.Err() != nil {
				return
			}
			l.mu.Lock()
			l.resumes++
			l.mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return l
}

// snapshot returns the events so far and the number of resumes.
func (l *watchLog) snapshot() ([]Event, int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...), l.resumes, append([]string(nil), l.errors...)
}
