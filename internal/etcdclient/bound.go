package etcdclient

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Bound makes every request cli sends end within d, whatever context the
// caller passes: without it a request to an endpoint that does not answer,
// or a linearizable one to a cluster without quorum, retries until its
// context ends, which for a command's context is never. A shorter deadline
// of the caller's stays. The streams (Snapshot, Watch, KeepAlive) are
// left to the caller's context: they last as long as the data.
func Bound(cli *clientv3.Client, d time.Duration) *clientv3.Client {
	if d <= 0 {
		return cli
	}
	cli.KV = boundKV{cli.KV, d}
	cli.Cluster = boundCluster{cli.Cluster, d}
	cli.Maintenance = boundMaintenance{cli.Maintenance, d}
	cli.Lease = boundLease{cli.Lease, d}
	return cli
}

// CallTimeout is the bound on one request of a command with dial timeout
// dial: the connection, then the answer.
func CallTimeout(dial time.Duration) time.Duration {
	if dial <= 0 {
		dial = 5 * time.Second
	}
	return 2 * dial
}

// within is ctx bounded by d from now, unless it ends sooner already.
func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

type boundKV struct {
	clientv3.KV
	d time.Duration
}

func (b boundKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.KV.Put(ctx, key, val, opts...)
}

func (b boundKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.KV.Get(ctx, key, opts...)
}

func (b boundKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.KV.Delete(ctx, key, opts...)
}

func (b boundKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.KV.Compact(ctx, rev, opts...)
}

func (b boundKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.KV.Do(ctx, op)
}

// Txn: the transaction commits with the context it was built with, so
// its bound starts when it is built; the timer releases it.
func (b boundKV) Txn(ctx context.Context) clientv3.Txn {
	ctx, cancel := within(ctx, b.d)
	time.AfterFunc(b.d, cancel)
	return b.KV.Txn(ctx)
}

type boundCluster struct {
	clientv3.Cluster
	d time.Duration
}

func (b boundCluster) MemberList(ctx context.Context, opts ...clientv3.OpOption) (*clientv3.MemberListResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Cluster.MemberList(ctx, opts...)
}

func (b boundCluster) MemberAdd(ctx context.Context, peerAddrs []string) (*clientv3.MemberAddResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Cluster.MemberAdd(ctx, peerAddrs)
}

func (b boundCluster) MemberAddAsLearner(ctx context.Context, peerAddrs []string) (*clientv3.MemberAddResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Cluster.MemberAddAsLearner(ctx, peerAddrs)
}

func (b boundCluster) MemberRemove(ctx context.Context, id uint64) (*clientv3.MemberRemoveResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Cluster.MemberRemove(ctx, id)
}

func (b boundCluster) MemberUpdate(ctx context.Context, id uint64, peerAddrs []string) (*clientv3.MemberUpdateResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Cluster.MemberUpdate(ctx, id, peerAddrs)
}

func (b boundCluster) MemberPromote(ctx context.Context, id uint64) (*clientv3.MemberPromoteResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Cluster.MemberPromote(ctx, id)
}

type boundMaintenance struct {
	clientv3.Maintenance
	d time.Duration
}

func (b boundMaintenance) AlarmList(ctx context.Context) (*clientv3.AlarmResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Maintenance.AlarmList(ctx)
}

func (b boundMaintenance) AlarmDisarm(ctx context.Context, m *clientv3.AlarmMember) (*clientv3.AlarmResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Maintenance.AlarmDisarm(ctx, m)
}

func (b boundMaintenance) Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Maintenance.Status(ctx, endpoint)
}

func (b boundMaintenance) HashKV(ctx context.Context, endpoint string, rev int64) (*clientv3.HashKVResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Maintenance.HashKV(ctx, endpoint, rev)
}

func (b boundMaintenance) MoveLeader(ctx context.Context, transfereeID uint64) (*clientv3.MoveLeaderResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Maintenance.MoveLeader(ctx, transfereeID)
}

func (b boundMaintenance) Downgrade(ctx context.Context, action clientv3.DowngradeAction, version string) (*clientv3.DowngradeResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Maintenance.Downgrade(ctx, action, version)
}

// Defragment blocks every request of the member while it runs and takes
// seconds a GiB: it gets its caller's context, not the bound.

type boundLease struct {
	clientv3.Lease
	d time.Duration
}

func (b boundLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Lease.Grant(ctx, ttl)
}

func (b boundLease) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Lease.Revoke(ctx, id)
}

func (b boundLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Lease.TimeToLive(ctx, id, opts...)
}

func (b boundLease) Leases(ctx context.Context) (*clientv3.LeaseLeasesResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Lease.Leases(ctx)
}

func (b boundLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	ctx, cancel := within(ctx, b.d)
	defer cancel()
	return b.Lease.KeepAliveOnce(ctx, id)
}
