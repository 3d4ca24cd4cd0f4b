// Package integration tests the backup path end to end against real etcd
// processes (3.5, 3.6, 3.7) and real S3 servers (MinIO, versitygw).
package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
	"github.com/etcdadm/etcdadm-immutable/internal/uploader"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

func quiet() *slog.Logger {
	if os.Getenv("TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// stores returns the backends a test runs against: a directory, MinIO and
// versitygw (each server started once per call).
func stores(t *testing.T) map[string]func(t *testing.T) (store.Store, string, func(string) string) {
	return map[string]func(t *testing.T) (store.Store, string, func(string) string){
		"file": func(t *testing.T) (store.Store, string, func(string) string) {
			dir := t.TempDir()
			st, err := filestore.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			return st, "file://" + dir, func(string) string { return "" }
		},
		"minio": func(t *testing.T) (store.Store, string, func(string) string) {
			return s3Store(t, testenv.StartMinIO(t))
		},
		"versitygw": func(t *testing.T) (store.Store, string, func(string) string) {
			return s3Store(t, testenv.StartVersityGW(t))
		},
	}
}

func s3Store(t *testing.T, srv *testenv.S3Server) (store.Store, string, func(string) string) {
	u := srv.URL("backups/main")
	return openURL(t, u, srv), u, srv.Env()
}

// openURL opens a store URL with srv's credentials.
func openURL(t *testing.T, u string, srv *testenv.S3Server) store.Store {
	t.Helper()
	st, err := storeurl.Open(context.Background(), u, srv.Env())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// dataset is what a test wrote, to compare after a restore.
type dataset struct {
	kv       map[string]string
	leased   map[string]int64 // key -> granted TTL
	revision int64
}

// fill writes n keys with Kubernetes-like names, every tenth bound to a
// lease, plus some overwrites and deletes so revisions differ from keys.
func fill(t *testing.T, cli *clientv3.Client, n int) dataset {
	t.Helper()
	ctx := ctxT(t)
	ds := dataset{kv: map[string]string{}, leased: map[string]int64{}}
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		k := fmt.Sprintf("/registry/pods/ns-%d/pod-%d", i%7, i)
		v := fmt.Sprintf(`{"kind":"Pod","metadata":{"name":"pod-%d","resourceVersion":"%d"}}`, i, i)
		var opts []clientv3.OpOption
		if i%10 == 0 {
			opts = append(opts, clientv3.WithLease(lease.ID))
			ds.leased[k] = 3600
		}
		if _, err := cli.Put(ctx, k, v, opts...); err != nil {
			t.Fatal(err)
		}
		ds.kv[k] = v
	}
	for i := 1; i < n; i += 9 {
		k := fmt.Sprintf("/registry/pods/ns-%d/pod-%d", i%7, i)
		if i%2 == 0 {
			if _, err := cli.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			delete(ds.kv, k)
			delete(ds.leased, k)
		} else {
			v := ds.kv[k] + " (updated)"
			if _, err := cli.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
			ds.kv[k] = v
		}
	}
	gr, err := cli.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	ds.revision = gr.Header.Revision
	return ds
}

// fillBig writes size bytes of incompressible values, 512 KiB at a time.
func fillBig(t *testing.T, cli *clientv3.Client, size int) {
	t.Helper()
	ctx := ctxT(t)
	val := make([]byte, 512<<10)
	for i := 0; i*len(val) < size; i++ {
		rand.Read(val)
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/secrets/big-%04d", i), string(val)); err != nil {
			t.Fatal(err)
		}
	}
}

// check compares a (restored) cluster with what was written.
func check(t *testing.T, cli *clientv3.Client, want dataset) {
	t.Helper()
	ctx := ctxT(t)
	gr, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if gr.Header.Revision != want.revision {
		t.Errorf("restored revision %d, want %d", gr.Header.Revision, want.revision)
	}
	got := map[string]string{}
	for _, kv := range gr.Kvs {
		got[string(kv.Key)] = string(kv.Value)
		if ttl, ok := want.leased[string(kv.Key)]; ok {
			if kv.Lease == 0 {
				t.Errorf("%s lost its lease", kv.Key)
				continue
			}
			tr, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil || tr.GrantedTTL != ttl || tr.TTL <= 0 {
				t.Errorf("%s: lease %x after restore: %+v %v", kv.Key, kv.Lease, tr, err)
			}
		}
	}
	if len(got) != len(want.kv) {
		t.Errorf("restored %d keys, want %d", len(got), len(want.kv))
	}
	for k, v := range want.kv {
		if got[k] != v {
			t.Errorf("%s = %q after restore, want %q", k, got[k], v)
		}
	}
}

func upload(t *testing.T, m *testenv.EtcdMember, st store.Store) uploader.Outcome {
	t.Helper()
	cli := m.Client(t)
	out, err := uploader.Run(ctxT(t), uploader.Config{Endpoint: m.Endpoint(), Retention: backup.DefaultPolicy(), StaleAfter: time.Hour}, cli, st, quiet(), time.Now)
	if err != nil {
		t.Fatalf("upload from %s: %v", m.Name, err)
	}
	return out
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binary builds the project's commands once per test process.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "etcdadm-bin-")
		if buildErr != nil {
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		cmd := exec.Command("go", "build", "-o", binDir+"/", "./cmd/...")
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/...: %w\n%s", err, stderr.String())
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

// result of running one of our binaries.
type result struct {
	code           int
	stdout, stderr string
}

func runBin(t *testing.T, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t, name), args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}, env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return result{code, so.String(), se.String()}
}

func tlsArgs(m *testenv.EtcdMember, pki *testenv.PKI) []string {
	return []string{"--endpoints", m.Endpoint(), "--cacert", pki.CACert, "--cert", pki.ClientCert, "--key", pki.ClientKey}
}

func s3Env(srv *testenv.S3Server, secret string) []string {
	return []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + secret}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
