// Package restore turns a backup from the store into an etcd data
// directory, offline, with etcdutl's snapshot library (revisions and
// leases are preserved). Used by etcdadm restore-local and backup verify.
package restore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/snapshotdb"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Config of a local restore.
type Config struct {
	Backup              string // name or "latest"
	DataDir             string
	Name                string
	InitialCluster      string // name=https://host:2380,...
	PeerURLs            []string
	InitialClusterToken string
	// RevisionBump raises the revision by this much and marks it
	// compacted, so watchers re-list instead of seeing revisions go back
	// (a cluster restore; etcd's docs use 1e9). 0: revisions as backed up.
	RevisionBump uint64
	// Snapshot, for Member: a snapshot file already downloaded and
	// verified (Stage), restored instead of downloading the backup again.
	Snapshot string
}

// ErrDataDirNotEmpty: we never overwrite or delete a data directory.
var ErrDataDirNotEmpty = errors.New("data directory is not empty")

// Validate checks the flags and that the restore has somewhere safe to go.
func (c *Config) Validate() error {
	if c.Backup == "" {
		return fmt.Errorf("restore: name a backup, or 'latest'")
	}
	if c.DataDir == "" || c.Name == "" || c.InitialCluster == "" {
		return fmt.Errorf("restore: --data-dir, --name and --initial-cluster are required")
	}
	if len(c.PeerURLs) == 0 {
		for _, m := range strings.Split(c.InitialCluster, ",") {
			if n, u, ok := strings.Cut(strings.TrimSpace(m), "="); ok && n == c.Name {
				c.PeerURLs = append(c.PeerURLs, u)
			}
		}
		if len(c.PeerURLs) == 0 {
			return fmt.Errorf("restore: member %q is not in --initial-cluster %q", c.Name, c.InitialCluster)
		}
	}
	if c.InitialClusterToken == "" {
		c.InitialClusterToken = "etcd-cluster"
	}
	return checkEmpty(c.DataDir)
}

func checkEmpty(dir string) error {
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if len(des) > 0 {
		return fmt.Errorf("restore: %s: %w; move it aside first (mv %s %s.before-restore) and run again", dir, ErrDataDirNotEmpty, dir, dir)
	}
	return nil
}

// Result of a restore.
type Result struct {
	Report backup.Report
	Stats  snapshotdb.Stats
}

// scratch makes dir/name empty: our own work directory, by a fixed name,
// so a run after a crash removes what the crashed one left (a whole
// backup's worth) instead of leaving it beside the data.
func scratch(dir, name string) (string, error) {
	work := filepath.Join(dir, name)
	if err := os.RemoveAll(work); err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	if err := os.Mkdir(work, 0o700); err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	return work, nil
}

// Local verifies the backup, then restores it into cfg.DataDir. The data
// directory appears whole or not at all: the restore is built in a
// sibling directory and renamed into place. Safe to re-run: a crashed
// run's work directory is removed and built again.
func Local(ctx context.Context, st store.Store, cfg Config, log *slog.Logger) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	parent := filepath.Dir(filepath.Clean(cfg.DataDir))
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return Result{}, fmt.Errorf("restore: %w", err)
	}
	work, err := scratch(parent, ".etcdadm-restore-"+filepath.Base(filepath.Clean(cfg.DataDir)))
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work) // our own scratch space, never a data dir
	log.Info("downloading and verifying backup", "backup", cfg.Backup, "store", st.String())
	rep, err := backup.Verify(ctx, st, cfg.Backup, work)
	if err != nil {
		return Result{}, err
	}
	staged := filepath.Join(work, "data")
	if err := restoreSnapshot(rep.SnapshotPath, staged, cfg); err != nil {
		return Result{}, err
	}
	stats, err := snapshotdb.Inspect(filepath.Join(staged, "member", "snap", "db"))
	if err != nil {
		return Result{}, err
	}
	crashpoint.Here(crashpoint.LocalStaged)
	if err := checkEmpty(cfg.DataDir); err != nil { // it may have changed meanwhile
		return Result{}, err
	}
	if err := os.Rename(staged, cfg.DataDir); err != nil {
		return Result{}, fmt.Errorf("restore: move restored data into %s: %w", cfg.DataDir, err)
	}
	log.Info("restored", "backup", rep.Backup.Name, "dataDir", cfg.DataDir, "revision", stats.Revision, "keys", stats.LiveKeys)
	return Result{Report: rep, Stats: stats}, nil
}

// Test restores a backup into a scratch directory and reports what it
// holds, leaving nothing behind: proof that the backup can be restored.
func Test(ctx context.Context, st store.Store, name, scratch string, log *slog.Logger) (Result, error) {
	work, err := os.MkdirTemp(scratch, "etcdadm-restore-test-")
	if err != nil {
		return Result{}, fmt.Errorf("restore test: %w", err)
	}
	defer os.RemoveAll(work)
	return Local(ctx, st, Config{
		Backup:         name,
		DataDir:        filepath.Join(work, "data"),
		Name:           "restore-test",
		InitialCluster: "restore-test=https://127.0.0.1:2380",
	}, log)
}

func restoreSnapshot(snapPath, dataDir string, cfg Config) error {
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        snapPath,
		Name:                cfg.Name,
		OutputDataDir:       dataDir,
		PeerURLs:            cfg.PeerURLs,
		InitialCluster:      cfg.InitialCluster,
		InitialClusterToken: cfg.InitialClusterToken,
		RevisionBump:        cfg.RevisionBump,
		MarkCompacted:       cfg.RevisionBump > 0,
		// backup.Verify checked the snapshot's embedded sha256 as it
		// wrote the file (every caller restores what Verify kept or
		// Stage checked): a second pass over the file would only cost.
		SkipHashCheck: true,
	})
	if err != nil {
		return fmt.Errorf("restore: etcdutl snapshot restore: %w", err)
	}
	return nil
}

// Stage downloads and verifies a backup into dir/file, whole or not at
// all (built in dir/file.partial, renamed when verified); an existing
// file is a verified one from an earlier run and is kept. A cluster
// restore checks its backup this way before anything stops, and each
// host then restores from its own checked copy: one download per host.
func Stage(ctx context.Context, st store.Store, name, dir, file string) (string, error) {
	dst := filepath.Join(dir, file)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	work, err := scratch(dir, file+".partial")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	rep, err := backup.Verify(ctx, st, name, work)
	if err != nil {
		return "", err
	}
	if err := os.Rename(rep.SnapshotPath, dst); err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	return dst, atomicfile.SyncDir(dir)
}

// Member restores a backup as this member's data in a cluster restore
// (Result.Stats is left empty):
// the data directory (often a volume's mount point) keeps its place and
// gets a new member/ subdirectory. The old one must have been moved aside
// (never deleted); the restore is staged beside it on the same
// filesystem and renamed in, so a crash leaves either no member/ or a
// complete one.
func Member(ctx context.Context, st store.Store, cfg Config, log *slog.Logger) (Result, error) {
	if cfg.Backup == "" || cfg.DataDir == "" || cfg.Name == "" || cfg.InitialCluster == "" {
		return Result{}, fmt.Errorf("restore: backup, data dir, name and initial cluster are required")
	}
	dst := filepath.Join(cfg.DataDir, "member")
	if _, err := os.Stat(dst); err == nil {
		return Result{}, fmt.Errorf("restore: %s: %w; move it aside first", dst, ErrDataDirNotEmpty)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return Result{}, fmt.Errorf("restore: %w", err)
	}
	work, err := scratch(cfg.DataDir, ".etcdadm-restore-work")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work) // our own scratch space, never a data dir
	sub := cfg
	sub.DataDir = filepath.Join(work, "data")
	if err := sub.Validate(); err != nil {
		return Result{}, err
	}
	rep := backup.Report{SnapshotPath: cfg.Snapshot}
	if cfg.Snapshot == "" {
		if rep, err = backup.Verify(ctx, st, cfg.Backup, work); err != nil {
			return Result{}, err
		}
	}
	if err := restoreSnapshot(rep.SnapshotPath, sub.DataDir, sub); err != nil {
		return Result{}, err
	}
	// No Inspect here: counting the keys reads the whole database again,
	// on every member of a cluster restore at once, for a log line.
	if err := os.Rename(filepath.Join(sub.DataDir, "member"), dst); err != nil {
		return Result{}, fmt.Errorf("restore: move restored data into %s: %w", dst, err)
	}
	log.Info("restored this member's data", "backup", cfg.Backup, "dataDir", cfg.DataDir, "revisionBump", cfg.RevisionBump)
	return Result{Report: rep}, nil
}
