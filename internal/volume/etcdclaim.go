package volume

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdClaimPrefix is where claims are also held in etcd once it runs
// (the design's "pivot to etcd"): <prefix><volume> holds the Claim as
// JSON, with the same expiry rule as the store's (Claim.Live). The
// holder renews it through its own member on every renewal, so a store
// outage does not make the claim lapse; a host taking a volume over
// whose store claim expired first asks etcd (Pool.Etcd).
const EtcdClaimPrefix = "/etcdadm/volumes/"

// EtcdClaims reads and writes claims in etcd. Reads are linearizable:
// they fail without a quorum, so an answer is the cluster's. Writes are
// conditional on the key's mod revision, like the store's on its ETag.
type EtcdClaims interface {
	// Read returns volume's claim and its key's mod revision; found is
	// false when there is none.
	Read(ctx context.Context, volume string) (c Claim, rev int64, found bool, err error)
	// Write puts c when the key's mod revision is still rev (0: only
	// when there is no key); ok is false when it was not.
	Write(ctx context.Context, c Claim, rev int64) (newRev int64, ok bool, err error)
	Close() error
}

// EtcdDialer opens EtcdClaims on endpoints (etcd client URLs).
type EtcdDialer func(ctx context.Context, endpoints []string) (EtcdClaims, error)

var _ EtcdClaims = (*EtcdKV)(nil)

// EtcdKV is EtcdClaims over an etcd client, which it closes.
type EtcdKV struct{ Cli *clientv3.Client }

// Read implements EtcdClaims.
func (e *EtcdKV) Read(ctx context.Context, volume string) (Claim, int64, bool, error) {
	resp, err := e.Cli.Get(ctx, EtcdClaimPrefix+volume)
	if err != nil {
		return Claim{}, 0, false, fmt.Errorf("etcd claim %s: %w", volume, err)
	}
	if len(resp.Kvs) == 0 {
		return Claim{}, 0, false, nil
	}
	var c Claim
	if err := json.Unmarshal(resp.Kvs[0].Value, &c); err != nil {
		return Claim{}, 0, false, fmt.Errorf("etcd claim %s: %s: %w", volume, EtcdClaimPrefix+volume, err)
	}
	return c, resp.Kvs[0].ModRevision, true, nil
}

// Write implements EtcdClaims.
func (e *EtcdKV) Write(ctx context.Context, c Claim, rev int64) (int64, bool, error) {
	c.ETag = ""
	b, err := json.Marshal(c)
	if err != nil {
		return 0, false, err
	}
	key := EtcdClaimPrefix + c.Volume
	resp, err := e.Cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return 0, false, fmt.Errorf("etcd claim %s: write: %w", c.Volume, err)
	}
	if !resp.Succeeded {
		return 0, false, nil
	}
	return resp.Header.Revision, true, nil
}

// Close implements EtcdClaims.
func (e *EtcdKV) Close() error { return e.Cli.Close() }
