package backup

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/klauspost/pgzip"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Snapshot is what Write needs to know about the snapshot it uploads.
type Snapshot struct {
	Data        io.Reader // the v3 snapshot stream, with etcd's trailing sha256
	EtcdVersion string
	MinRevision int64
	Member      string
	ClusterSpec *etcdmanager.ClusterSpec
	// GzipLevel: 1 (fastest) to 9 (smallest); 0 means DefaultGzipLevel.
	GzipLevel int
	// NoQuorum: taken from Member alone while the cluster had no leader.
	NoQuorum bool
}

// DefaultGzipLevel favours speed: etcd snapshots of Kubernetes objects
// compress well at level 1 too, and the masters' CPU belongs to etcd and
// the API server. See docs/benchmarks.md.
const DefaultGzipLevel = 1

// Result describes a completed backup.
type Result struct {
	Name      string
	Integrity Integrity
}

// Two gzip blocks of 512 KiB: two cores compress, the rest stay with etcd
// and the API server, and memory stays small (docs/benchmarks.md).
const (
	gzipBlock  = 512 << 10
	gzipBlocks = 2
)

// Write streams a snapshot into the store as a new backup in one pass:
// snapshot -> parallel gzip -> upload, hashing on the way. Data first, then
// the integrity record, then the meta file, so the backup is listed only
// once it is complete. A snapshot whose embedded hash does not match is
// not published.
func Write(ctx context.Context, st store.Store, snap Snapshot, now time.Time) (Result, error) {
	start := time.Now()
	name, err := freeName(ctx, st, now)
	if err != nil {
		return Result{}, err
	}
	check := newSnapshotCheck()
	gzHash := sha256.New()
	var gzSize countWriter
	pr, pw := io.Pipe()
	go func() {
		level := snap.GzipLevel
		if level == 0 {
			level = DefaultGzipLevel
		}
		zw, err := pgzip.NewWriterLevel(io.MultiWriter(pw, gzHash, &gzSize), level)
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		if err := zw.SetConcurrency(gzipBlock, gzipBlocks); err != nil {
			pw.CloseWithError(err)
			return
		}
		if _, err := io.Copy(zw, io.TeeReader(snap.Data, check)); err != nil {
			zw.Close()
			pw.CloseWithError(fmt.Errorf("read snapshot: %w", err))
			return
		}
		if !check.ok() {
			zw.Close()
			pw.CloseWithError(fmt.Errorf("%w: the snapshot's embedded sha256 does not match its content (%d bytes)", ErrCorrupt, check.n))
			return
		}
		pw.CloseWithError(zw.Close())
	}()
	dataKey := name + "/" + etcdmanager.DataFile
	_, err = st.Put(ctx, dataKey, pr, store.PutOptions{})
	pr.CloseWithError(errors.New("upload ended"))
	if err != nil {
		return Result{}, fmt.Errorf("backup %s: upload: %w", name, err)
	}
	crashpoint.Here(crashpoint.BackupData)
	in := Integrity{
		Format:          1,
		GzipSHA256:      fmt.Sprintf("%x", gzHash.Sum(nil)),
		GzipSize:        int64(gzSize),
		SnapshotSHA256:  check.sum(),
		SnapshotSize:    check.n,
		SnapshotHashOK:  true,
		MinRevision:     snap.MinRevision,
		EtcdVersion:     snap.EtcdVersion,
		Member:          snap.Member,
		WithoutQuorum:   snap.NoQuorum,
		DurationSeconds: time.Since(start).Seconds(),
	}
	ib, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return Result{}, err
	}
	if _, err := store.PutBytes(ctx, st, integrityKey(name), ib, store.PutOptions{}); err != nil {
		return Result{}, fmt.Errorf("backup %s: write integrity record: %w", name, err)
	}
	crashpoint.Here(crashpoint.BackupRecord)
	meta, err := etcdmanager.MarshalMeta(etcdmanager.BackupInfo{
		EtcdVersion: snap.EtcdVersion,
		Timestamp:   now.Unix(),
		ClusterSpec: snap.ClusterSpec,
	})
	if err != nil {
		return Result{}, err
	}
	if _, err := store.PutBytes(ctx, st, name+"/"+etcdmanager.MetaFile, meta, store.PutOptions{IfNoneMatch: true}); err != nil {
		return Result{}, fmt.Errorf("backup %s: write meta (last step): %w", name, err)
	}
	crashpoint.Here(crashpoint.BackupMeta)
	return Result{Name: name, Integrity: in}, nil
}

// freeName picks the next sequence number for this second, so two backups
// in one second get distinct names that still sort by time.
func freeName(ctx context.Context, st store.Store, now time.Time) (string, error) {
	entries, err := st.List(ctx, "")
	if err != nil {
		return "", fmt.Errorf("backup: list store: %w", err)
	}
	stamp := strings.TrimSuffix(etcdmanager.BackupName(now, 0), "-000000")
	seq := 1
	for _, e := range entries {
		if _, s, ok := etcdmanager.ParseBackupName(e.Name); ok && strings.HasPrefix(e.Name, stamp+"-") && s >= seq {
			seq = s + 1
		}
	}
	return etcdmanager.BackupName(now, seq), nil
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }
