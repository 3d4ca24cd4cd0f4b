package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config of a workload.
type Config struct {
	Clients int           // concurrent clients, each on its own connection (default 4)
	Keys    int           // registers the clients share (default 16)
	Prefix  string        // of every key the workload writes (default "/chaos/")
	Pause   time.Duration // between one client's operations (default 20ms)
	Timeout time.Duration // of one request (default 3s)
	Seed    uint64
	// LeaseTTL of the lease some puts attach, kept alive throughout
	// (default 10m: longer than any fault lasts).
	LeaseTTL time.Duration
}

func (c *Config) defaults() {
	if c.Clients == 0 {
		c.Clients = 4
	}
	if c.Keys == 0 {
		c.Keys = 16
	}
	if c.Prefix == "" {
		c.Prefix = "/chaos/"
	}
	if c.Pause == 0 {
		c.Pause = 20 * time.Millisecond
	}
	if c.Timeout == 0 {
		c.Timeout = 3 * time.Second
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 10 * time.Minute
	}
}

// Write is a write etcd acknowledged, at its revision.
type Write struct {
	Key, Value string
	Rev        int64
}

// Workload runs clients doing gets, puts (some with a lease) and txns on
// shared keys, and a watch on them all, recording every operation.
type Workload struct {
	cfg   Config
	admin *clientv3.Client
	clis  []*clientv3.Client
	start time.Time
	rev0  int64
	lease clientv3.LeaseID

	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	history []porcupine.Operation
	acked   []Write
	counts  map[string]int
	watch   *watchLog
	cancel  context.CancelFunc
}

// Start opens cfg.Clients+1 clients with dial (the extra one watches and
// keeps the lease alive) and starts the workload.
func Start(ctx context.Context, dial func() (*clientv3.Client, error), cfg Config) (*Workload, error) {
	cfg.defaults()
	w := &Workload{cfg: cfg, stop: make(chan struct{}), counts: map[string]int{}}
	for i := 0; i <= cfg.Clients; i++ {
		cli, err := dial()
		if err != nil {
			w.close()
			return nil, err
		}
		w.clis = append(w.clis, cli)
	}
	w.admin, w.clis = w.clis[0], w.clis[1:]
	err := retry(ctx, time.Minute, func(ctx context.Context) error {
		gr, err := w.admin.Get(ctx, cfg.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil {
			w.rev0 = gr.Header.Revision
		}
		return err
	})
	if err == nil {
		err = retry(ctx, time.Minute, func(ctx context.Context) error {
			lr, err := w.admin.Grant(ctx, int64(cfg.LeaseTTL/time.Second))
			if err == nil {
				w.lease = lr.ID
			}
			return err
		})
	}
	if err != nil {
		w.close()
		return nil, fmt.Errorf("chaos: start: %w", err)
	}
	bg, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.start = time.Now()
	w.watch = startWatch(bg, w.admin, cfg.Prefix, w.rev0)
	ka, err := w.admin.KeepAlive(bg, w.lease)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("chaos: lease keepalive: %w", err)
	}
	go func() {
		for range ka {
		}
	}()
	for i, cli := range w.clis {
		w.wg.Add(1)
		go w.client(i, cli, rand.New(rand.NewPCG(cfg.Seed, uint64(i))))
	}
	return w, nil
}

func (w *Workload) close() {
	if w.cancel != nil {
		w.cancel()
	}
	if w.admin != nil {
		w.admin.Close()
	}
	for _, c := range w.clis {
		c.Close()
	}
}

func (w *Workload) now() int64 { return time.Since(w.start).Nanoseconds() }

// client is one client's loop: a random operation on a random key, its
// call and return times and its answer recorded.
func (w *Workload) client(id int, cli *clientv3.Client, r *rand.Rand) {
	defer w.wg.Done()
	last := map[string]string{} // the value this client last saw per key
	for seq := 0; ; seq++ {
		select {
		case <-w.stop:
			return
		case <-time.After(w.cfg.Pause):
		}
		key := fmt.Sprintf("%sk%02d", w.cfg.Prefix, r.IntN(w.cfg.Keys))
		in := Input{Key: key, Value: fmt.Sprintf("c%d-%d", id, seq)}
		switch n := r.IntN(10); {
		case n < 4:
			in.Kind = Get
		case n < 6:
			in.Kind = Put
		case n < 7:
			in.Kind, in.Lease = Put, true
		default:
			in.Kind, in.Expect = CAS, last[key]
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
		call := w.now()
		out, rev, err := w.do(ctx, cli, in)
		ret := w.now()
		cancel()
		kind := in.Kind
		if in.Lease {
			kind = "put with lease"
		}
		switch {
		case err != nil && (in.Kind == Get || errors.Is(err, rpctypes.ErrLeaseNotFound)):
			w.count("failed " + kind) // no effect: not part of the history
			continue
		case err != nil:
			out, ret = Output{Unknown: true}, Never
			w.count("unknown " + kind)
		default:
			w.count(kind)
		}
		wrote := err == nil && (in.Kind == Put || out.OK)
		switch {
		case in.Kind == Get && err == nil:
			last[key] = out.Value
		case wrote:
			last[key] = in.Value
		}
		w.mu.Lock()
		w.history = append(w.history, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
		if wrote {
			w.acked = append(w.acked, Write{Key: key, Value: in.Value, Rev: rev})
		}
		w.mu.Unlock()
	}
}

func (w *Workload) count(what string) {
	w.mu.Lock()
	w.counts[what]++
	w.mu.Unlock()
}

// do runs one operation; rev is the revision of a write it made.
func (w *Workload) do(ctx context.Context, cli *clientv3.Client, in Input) (Output, int64, error) {
	switch in.Kind {
	case Get:
		gr, err := cli.Get(ctx, in.Key)
		if err != nil {
			return Output{}, 0, err
		}
		if len(gr.Kvs) == 0 {
			return Output{}, 0, nil
		}
		return Output{Value: string(gr.Kvs[0].Value)}, 0, nil
	case Put:
		var opts []clientv3.OpOption
		if in.Lease {
			opts = append(opts, clientv3.WithLease(w.lease))
		}
		pr, err := cli.Put(ctx, in.Key, in.Value, opts...)
		if err != nil {
			return Output{}, 0, err
		}
		return Output{}, pr.Header.Revision, nil
	}
	cmp := clientv3.Compare(clientv3.Value(in.Key), "=", in.Expect)
	if in.Expect == "" {
		cmp = clientv3.Compare(clientv3.CreateRevision(in.Key), "=", 0)
	}
	tr, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(in.Key, in.Value)).Commit()
	if err != nil {
		return Output{}, 0, err
	}
	return Output{OK: tr.Succeeded}, tr.Header.Revision, nil
}

// retry runs op with a bounded context until it succeeds or total passes.
func retry(ctx context.Context, total time.Duration, op func(context.Context) error) error {
	deadline := time.Now().Add(total)
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(octx)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}
