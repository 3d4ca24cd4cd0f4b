package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Limits of one fill transaction, well below etcd's 1.5 MiB request limit.
const (
	txnOps   = 128
	txnBytes = 1 << 20
	// fillWorkers transactions in flight keep etcd's batching busy.
	fillWorkers = 4
	// statusEvery batches the filler asks etcd how big the database is.
	statusEvery = 8
)

// dbInfo is the database a size's methods all back up.
type dbInfo struct {
	Size, InUse int64 // Status DbSize and DbSizeInUse
	Revision    int64
	Keys        int64 // objects written so far
	Fill        time.Duration
}

// filler writes generated objects into etcd.
type filler struct {
	cli      *clientv3.Client
	endpoint string
	g        *objectGen
	// next is an object made but not yet written (it did not fit the last
	// transaction).
	next struct {
		k string
		v []byte
	}
	written atomic.Int64
}

// fill writes objects in batched transactions until etcd reports a
// database of at least target bytes. Called again with a larger target it
// adds to what is there.
func (f *filler) fill(ctx context.Context, target int64) (dbInfo, error) {
	cli, g, pending := f.cli, f.g, &f.next
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []clientv3.Op, fillWorkers)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range fillWorkers {
		wg.Go(func() {
			for ops := range batches {
				_, err := cli.Txn(ctx).Then(ops...).Commit()
				if err == nil {
					f.written.Add(int64(len(ops)))
					continue
				}
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("fill: txn: %w", err)
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	status := func() (*clientv3.StatusResponse, error) {
		st, err := cli.Status(ctx, f.endpoint)
		if err != nil {
			return nil, fmt.Errorf("fill: status: %w", err)
		}
		return st, nil
	}
	var err error
produce:
	for n := 0; ; n++ {
		if n%statusEvery == 0 {
			st, serr := status()
			if serr != nil {
				err = serr
				break
			}
			if st.DbSize >= target {
				break
			}
		}
		ops := make([]clientv3.Op, 0, txnOps)
		size := 0
		for len(ops) < txnOps {
			if pending.k == "" {
				pending.k, pending.v = g.next()
			}
			if size+len(pending.k)+len(pending.v) > txnBytes {
				break
			}
			size += len(pending.k) + len(pending.v)
			ops = append(ops, clientv3.OpPut(pending.k, string(pending.v)))
			pending.k, pending.v = "", nil
		}
		select {
		case batches <- ops:
		case <-ctx.Done():
			break produce
		}
	}
	close(batches)
	wg.Wait()
	if err == nil {
		err = firstErr
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("fill: %w", ctx.Err())
	}
	if err != nil {
		return dbInfo{}, err
	}
	st, err := status()
	if err != nil {
		return dbInfo{}, err
	}
	if st.DbSize < target {
		return dbInfo{}, errors.New("fill: database smaller than the target after filling")
	}
	return dbInfo{Size: st.DbSize, InUse: st.DbSizeInUse, Revision: st.Header.Revision, Keys: f.written.Load(), Fill: time.Since(start)}, nil
}
