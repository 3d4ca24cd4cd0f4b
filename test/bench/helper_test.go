package bench

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/pgzip"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
)

// The benchmark re-executes its own test binary to run the methods that
// are not a binary of their own, so each runs in a process whose peak RSS
// the kernel reports. envHelper carries the helperConfig as JSON; S3
// credentials travel in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY.
const (
	envHelper    = "ETCDADM_BENCH_HELPER"
	resultMarker = "ETCDADM_BENCH_RESULT "
)

// Helper modes.
const (
	// modeSequential: snapshot to a file, gzip it into a second file,
	// upload that: three steps, one after the other.
	modeSequential = "sequential"
	// modeEtcdManager is what etcd-manager's DoBackupV3 does:
	// V3Client.SnapshotSave streams the snapshot through compress/gzip into
	// a local file, then backupStore.AddBackup uploads the file.
	modeEtcdManager = "etcd-manager"
	// modePipeline is backup.Write's pipeline (snapshot -> pgzip -> store,
	// hashing as it goes) with its settings as knobs.
	modePipeline = "pipeline"
)

type helperConfig struct {
	Mode string
	Etcd etcdclient.Config
	Dir  string // for temporary files
	// Sequential and etcd-manager modes upload with minio-go's FPutObject.
	S3Host, Bucket, Key string
	// Pipeline mode writes Key into the store at StoreURL, through pgzip
	// at Level with Blocks blocks of BlockSize bytes.
	StoreURL                 string
	Level, Blocks, BlockSize int
}

type helperResult struct {
	SnapshotBytes int64
	GzipBytes     int64
	Phases        []phase
}

type phase struct {
	Name    string
	Seconds float64
}

// TestHelperProcess is not a test: it is one backup method run in a child
// process by BenchmarkBackup. Without envHelper it returns at once.
func TestHelperProcess(t *testing.T) {
	raw := os.Getenv(envHelper)
	if raw == "" {
		return
	}
	var cfg helperConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%s: %v", envHelper, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cli, err := etcdclient.New(cfg.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var res helperResult
	switch cfg.Mode {
	case modeSequential:
		res, err = sequential(ctx, cfg, cli)
	case modeEtcdManager:
		res, err = etcdManager(ctx, cfg, cli)
	case modePipeline:
		res, err = pipeline(ctx, cfg, cli)
	default:
		err = fmt.Errorf("unknown mode %q", cfg.Mode)
	}
	if err != nil {
		t.Fatalf("%s: %v", cfg.Mode, err)
	}
	out, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(resultMarker + string(out))
}

// timer records the phases of a helper run.
type timer struct {
	last   time.Time
	phases []phase
}

func newTimer() *timer { return &timer{last: time.Now()} }

func (t *timer) done(name string) {
	now := time.Now()
	t.phases = append(t.phases, phase{name, now.Sub(t.last).Seconds()})
	t.last = now
}

func sequential(ctx context.Context, cfg helperConfig, cli *clientv3.Client) (helperResult, error) {
	tm := newTimer()
	dir, err := os.MkdirTemp(cfg.Dir, "sequential-")
	if err != nil {
		return helperResult{}, err
	}
	defer os.RemoveAll(dir)
	snapFile := filepath.Join(dir, "snapshot.db")
	snapN, err := snapshotTo(ctx, cli, snapFile, nil)
	if err != nil {
		return helperResult{}, err
	}
	tm.done("snapshot")
	gzFile := snapFile + ".gz"
	gzN, err := gzipFile(snapFile, gzFile)
	if err != nil {
		return helperResult{}, err
	}
	tm.done("gzip")
	if err := fputObject(ctx, cfg, gzFile); err != nil {
		return helperResult{}, err
	}
	tm.done("upload")
	if err := os.RemoveAll(dir); err != nil {
		return helperResult{}, err
	}
	tm.done("cleanup")
	return helperResult{SnapshotBytes: snapN, GzipBytes: gzN, Phases: tm.phases}, nil
}

func etcdManager(ctx context.Context, cfg helperConfig, cli *clientv3.Client) (helperResult, error) {
	tm := newTimer()
	dir, err := os.MkdirTemp(cfg.Dir, "etcd-manager-")
	if err != nil {
		return helperResult{}, err
	}
	defer os.RemoveAll(dir)
	gzFile := filepath.Join(dir, "snapshot.db.gz")
	var snapN countWriter
	gzN, err := snapshotTo(ctx, cli, gzFile, &snapN)
	if err != nil {
		return helperResult{}, err
	}
	tm.done("snapshot+gzip")
	if err := fputObject(ctx, cfg, gzFile); err != nil {
		return helperResult{}, err
	}
	tm.done("upload")
	if err := os.RemoveAll(dir); err != nil {
		return helperResult{}, err
	}
	tm.done("cleanup")
	return helperResult{SnapshotBytes: int64(snapN), GzipBytes: gzN, Phases: tm.phases}, nil
}

// snapshotTo streams a snapshot into path, through compress/gzip at the
// default level when counted is not nil (etcd-manager's SnapshotSave;
// counted gets the snapshot's size). Like etcd-manager it does not fsync.
// It returns the size of the file.
func snapshotTo(ctx context.Context, cli *clientv3.Client, path string, counted *countWriter) (int64, error) {
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var w io.Writer = f
	var zw *gzip.Writer
	if counted != nil {
		zw = gzip.NewWriter(f)
		w = io.MultiWriter(zw, counted)
	}
	if _, err := io.Copy(w, rc); err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return 0, err
		}
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func gzipFile(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return 0, fmt.Errorf("gzip %s: %w", src, err)
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	if err := out.Close(); err != nil {
		return 0, err
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// fputObject uploads a file with minio-go's defaults, as a tool that
// uploads a finished file would.
func fputObject(ctx context.Context, cfg helperConfig, path string) error {
	mc, err := minio.New(cfg.S3Host, &minio.Options{
		Creds:        credentials.NewEnvAWS(),
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return err
	}
	if _, err := mc.FPutObject(ctx, cfg.Bucket, cfg.Key, path, minio.PutObjectOptions{ContentType: "application/gzip"}); err != nil {
		return fmt.Errorf("upload %s: %w", cfg.Key, err)
	}
	return nil
}

// pipeline is backup.Write's data path with its settings as knobs:
// snapshot -> pgzip -> store.Put, with the same sha256 hashes (one over
// the snapshot, one over the gzip).
func pipeline(ctx context.Context, cfg helperConfig, cli *clientv3.Client) (helperResult, error) {
	tm := newTimer()
	st, err := storeurl.Open(ctx, cfg.StoreURL, os.Getenv)
	if err != nil {
		return helperResult{}, err
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return helperResult{}, fmt.Errorf("snapshot: %w", err)
	}
	defer rc.Close()
	var snapN, gzN countWriter
	pr, pw := io.Pipe()
	go func() {
		zw, err := pgzip.NewWriterLevel(io.MultiWriter(pw, sha256.New(), &gzN), cfg.Level)
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		if err := zw.SetConcurrency(cfg.BlockSize, cfg.Blocks); err != nil {
			pw.CloseWithError(err)
			return
		}
		if _, err := io.Copy(zw, io.TeeReader(rc, io.MultiWriter(sha256.New(), &snapN))); err != nil {
			zw.Close()
			pw.CloseWithError(fmt.Errorf("snapshot: %w", err))
			return
		}
		pw.CloseWithError(zw.Close())
	}()
	_, err = st.Put(ctx, cfg.Key, pr, store.PutOptions{})
	pr.CloseWithError(errors.New("upload ended"))
	if err != nil {
		return helperResult{}, err
	}
	tm.done("stream")
	return helperResult{SnapshotBytes: int64(snapN), GzipBytes: int64(gzN), Phases: tm.phases}, nil
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }
