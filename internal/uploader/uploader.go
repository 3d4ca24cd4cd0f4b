// Package uploader is one run of etcd-snapshot-uploader: on the leader
// only, stream a snapshot of the local member into the store as an
// etcd-manager-compatible backup, then apply retention. Imported by
// cmd/etcd-snapshot-uploader and by etcdadm's "backup now".
package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Etcd is what a run needs from the etcd client (*clientv3.Client).
type Etcd interface {
	Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error)
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
	Snapshot(ctx context.Context) (io.ReadCloser, error)
	MemberList(ctx context.Context, opts ...clientv3.OpOption) (*clientv3.MemberListResponse, error)
}

// Config of one run.
type Config struct {
	// Endpoint is the local member, the one asked for the snapshot.
	Endpoint string
	// AnyMember uploads even when the local member is not the leader
	// (etcdadm backup now).
	AnyMember bool
	// Retention is applied after a successful upload unless SkipPrune.
	Retention  backup.Policy
	SkipPrune  bool
	StaleAfter time.Duration
	// GzipLevel is passed to backup.Write (0: its default).
	GzipLevel int
	// AnswerTimeout bounds the first status call: an etcd that does not
	// answer (down, or a TLS handshake that fails: the client waits for
	// a connection that never comes) is ErrEtcd, not a hang. 0: 20 s.
	AnswerTimeout time.Duration
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return fmt.Errorf("uploader: no local etcd endpoint")
	}
	if c.StaleAfter <= 0 {
		return fmt.Errorf("uploader: --stale-after must be positive (how old an unfinished upload must be before it is removed)")
	}
	if c.GzipLevel < 0 || c.GzipLevel > 9 {
		return fmt.Errorf("uploader: --gzip-level %d: use 1 (fastest) to 9 (smallest)", c.GzipLevel)
	}
	return c.Retention.Validate()
}

// Outcome of a run, for the journal line and the metrics.
type Outcome struct {
	Skipped     bool   // not the leader: nothing to do
	Reason      string // why skipped
	Backup      string
	Integrity   backup.Integrity
	Prune       backup.CleanResult
	Duration    time.Duration
	LeaderID    uint64
	LocalMember string
	// WithoutQuorum: the member had no leader; the backup is its data
	// alone (AnyMember only), marked so in its integrity record.
	WithoutQuorum bool
}

// Failure classes, for exit codes.
var (
	ErrEtcd  = errors.New("etcd")
	ErrStore = errors.New("store")
)

// Run performs one upload.
func Run(ctx context.Context, cfg Config, cli Etcd, st store.Store, log *slog.Logger, now func() time.Time) (Outcome, error) {
	start := now()
	var out Outcome
	answer := cfg.AnswerTimeout
	if answer <= 0 {
		answer = 20 * time.Second
	}
	sctx, cancel := context.WithTimeout(ctx, answer)
	status, err := cli.Status(sctx, cfg.Endpoint)
	cancel()
	if err != nil {
		return out, fmt.Errorf("%w: status of %s: %w", ErrEtcd, cfg.Endpoint, err)
	}
	self, leader := status.Header.MemberId, status.Leader
	out.LeaderID = leader
	// A member without a leader answers for itself: its own view of the
	// membership and of its revision (serializable) needs no quorum, and
	// neither does its snapshot.
	noQuorum := leader == 0
	members, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return out, fmt.Errorf("%w: member list: %w", ErrEtcd, err)
	}
	voters := int32(0)
	for _, m := range members.Members {
		if m.ID == self {
			out.LocalMember = m.Name
		}
		if !m.IsLearner {
			voters++
		}
	}
	if self != leader && !cfg.AnyMember {
		out.Skipped = true
		out.Reason = fmt.Sprintf("member %s (%x) is not the leader (%x); the leader uploads", out.LocalMember, self, leader)
		if noQuorum {
			out.Reason = fmt.Sprintf("member %s (%x) has no leader: the cluster has no quorum, and the timer backs up from the leader only; 'etcdadm backup now' takes a backup from this member alone", out.LocalMember, self)
		}
		out.Duration = now().Sub(start)
		return out, nil
	}
	out.WithoutQuorum = noQuorum
	spec, err := clusterSpec(ctx, st, status.Version, voters)
	if err != nil {
		return out, err
	}
	// The snapshot taken next holds at least this revision: read through
	// the quorum (linearizable), or without one this member's own.
	var readOpts []clientv3.OpOption
	if noQuorum {
		readOpts = append(readOpts, clientv3.WithSerializable())
		log.Warn("the cluster has no quorum: backing up this member's data alone; it may lack the last writes the cluster acknowledged", "member", out.LocalMember)
	}
	gr, err := cli.Get(ctx, "\x00", append(readOpts, clientv3.WithCountOnly())...)
	if err != nil {
		return out, fmt.Errorf("%w: read revision: %w", ErrEtcd, err)
	}
	snap, err := cli.Snapshot(ctx)
	if err != nil {
		return out, fmt.Errorf("%w: start snapshot: %w", ErrEtcd, err)
	}
	defer snap.Close()
	log.Info("streaming snapshot", "member", out.LocalMember, "store", st.String(), "minRevision", gr.Header.Revision, "dbSizeMiB", status.DbSize>>20)
	res, err := backup.Write(ctx, st, backup.Snapshot{
		Data:        newProgress(snap, status.DbSize, log),
		GzipLevel:   cfg.GzipLevel,
		EtcdVersion: status.Version,
		MinRevision: gr.Header.Revision,
		Member:      out.LocalMember,
		ClusterSpec: &spec,
		NoQuorum:    noQuorum,
	}, now())
	if err != nil {
		if errors.Is(err, backup.ErrCorrupt) {
			return out, err
		}
		return out, fmt.Errorf("%w: %w", ErrStore, err)
	}
	out.Backup, out.Integrity = res.Name, res.Integrity
	if !cfg.SkipPrune {
		out.Prune, err = backup.Prune(ctx, st, cfg.Retention, now(), cfg.StaleAfter, log)
		if err != nil {
			out.Duration = now().Sub(start)
			return out, fmt.Errorf("%w: backup %s written, but retention failed: %w", ErrStore, res.Name, err)
		}
	}
	out.Duration = now().Sub(start)
	return out, nil
}

// clusterSpec is the spec recorded in the backup: the store's
// control/etcd-cluster-spec when there is one, else what the cluster is.
func clusterSpec(ctx context.Context, st store.Store, version string, voters int32) (etcdmanager.ClusterSpec, error) {
	b, _, err := store.GetBytes(ctx, st, etcdmanager.ClusterSpecKey, 1<<16)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return etcdmanager.ClusterSpec{MemberCount: voters, EtcdVersion: version}, nil
	case err != nil:
		return etcdmanager.ClusterSpec{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	spec, err := etcdmanager.ParseClusterSpec(b)
	if err != nil {
		return etcdmanager.ClusterSpec{}, fmt.Errorf("%w: %w (%s)", ErrStore, err, clusterspec.RepairAdvice)
	}
	return spec, nil
}
