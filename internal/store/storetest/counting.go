package storetest

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Counting is a store that counts the reads and writes passed to the
// store it wraps: a test of what a request costs.
type Counting struct {
	store.Store
	Gets, Puts atomic.Int64
}

// Get implements store.Store.
func (c *Counting) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	c.Gets.Add(1)
	return c.Store.Get(ctx, key)
}

// Put implements store.Store.
func (c *Counting) Put(ctx context.Context, key string, r io.Reader, opts store.PutOptions) (store.Info, error) {
	c.Puts.Add(1)
	return c.Store.Put(ctx, key, r, opts)
}
