package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storetest"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

func openURL(t *testing.T, url string, getenv func(string) string) store.Store {
	t.Helper()
	s, err := storeurl.Open(t.Context(), url, getenv)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return s
}

func TestConformance(t *testing.T) {
	for _, srv := range testenv.S3Servers(t) {
		t.Run(srv.Kind, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			storetest.Run(t, func(t *testing.T) store.Store {
				// A fresh prefix per subtest keeps them apart in one bucket.
				return openURL(t, srv.URL(fmt.Sprintf("conformance/%d/", n.Add(1))), srv.Env())
			})
		})
	}
}

func TestErrors(t *testing.T) {
	for _, srv := range testenv.S3Servers(t) {
		t.Run(srv.Kind, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			ops := func(s store.Store) map[string]error {
				_, putErr := store.PutBytes(ctx, s, "k", []byte("x"), store.PutOptions{})
				_, casErr := store.PutBytes(ctx, s, "k", []byte("x"), store.PutOptions{IfNoneMatch: true})
				rc, _, getErr := s.Get(ctx, "k")
				if rc != nil {
					rc.Close()
				}
				_, statErr := s.Stat(ctx, "k")
				_, listErr := s.List(ctx, "")
				_, cleanErr := s.CleanIncomplete(ctx, "", 0)
				return map[string]error{
					"Put": putErr, "Put create-only": casErr, "Get": getErr, "Stat": statErr,
					"Delete": s.Delete(ctx, "k"), "List": listErr, "CleanIncomplete": cleanErr,
				}
			}
			check := func(what string, s store.Store, want error) {
				t.Helper()
				for op, err := range ops(s) {
					if !errors.Is(err, want) {
						t.Errorf("%s: %s: %v, want %v", what, op, err, want)
					}
				}
			}

			wrong := openURL(t, srv.URL("errors/"), srv.EnvWithSecret("not-the-secret"))
			check("wrong secret", wrong, store.ErrAccessDenied)
			if strings.Contains(wrong.String(), "not-the-secret") || strings.Contains(wrong.String(), srv.AccessKey) {
				t.Errorf("String() = %q shows credentials", wrong.String())
			}

			noBucket := openURL(t, strings.Replace(srv.URL("errors/"), "s3://"+srv.Bucket, "s3://no-such-bucket", 1), srv.Env())
			check("missing bucket", noBucket, store.ErrNoBucket)
		})
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("s3://etcd-backups/x/?endpoint=http://127.0.0.1:%d&region=us-east-1", testenv.FreePort(t))
	s := openURL(t, url, func(string) string { return "anything" })
	// Each call retries for seconds before giving up: run them side by side.
	calls := map[string]func(ctx context.Context) error{
		"Stat": func(ctx context.Context) error { _, err := s.Stat(ctx, "k"); return err },
		"Put": func(ctx context.Context) error {
			_, err := store.PutBytes(ctx, s, "k", []byte("x"), store.PutOptions{})
			return err
		},
		"List": func(ctx context.Context) error { _, err := s.List(ctx, ""); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if err := call(ctx); !errors.Is(err, store.ErrUnreachable) {
				t.Errorf("%s: %v, want ErrUnreachable", name, err)
			}
		})
	}
}

// failingReader yields n bytes, then fails.
type failingReader struct{ n int64 }

var errSource = errors.New("source failed")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errSource
	}
	k := min(int64(len(p)), r.n)
	clear(p[:k])
	r.n -= k
	return int(k), nil
}

// A Put that fails after several parts, and a writer that died with its
// multipart upload open, leave no incomplete upload behind CleanIncomplete.
func TestMinIONoIncompleteUploads(t *testing.T) {
	t.Parallel()
	srv := testenv.StartMinIO(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := openURL(t, srv.URL("incomplete/"), srv.Env())
	cli := srv.Client(t)

	if _, err := s.Put(ctx, "snap/failed.db", &failingReader{n: 20 << 20}, store.PutOptions{}); !errors.Is(err, errSource) {
		t.Fatalf("Put: %v, want the reader's error", err)
	}
	// A crashed writer: an upload with a part, never completed or aborted.
	core := minio.Core{Client: cli}
	id, err := core.NewMultipartUpload(ctx, srv.Bucket, "incomplete/snap/crashed.db", minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.PutObjectPart(ctx, srv.Bucket, "incomplete/snap/crashed.db", id, 1, strings.NewReader("part"), 4, minio.PutObjectPartOptions{}); err != nil {
		t.Fatal(err)
	}
	// Outside the store's prefix: not the store's to clean.
	otherID, err := core.NewMultipartUpload(ctx, srv.Bucket, "elsewhere/obj", minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.AbortMultipartUpload(context.Background(), srv.Bucket, "elsewhere/obj", otherID) })

	if n, err := s.CleanIncomplete(ctx, "snap/", time.Hour); err != nil || n != 0 {
		t.Errorf("CleanIncomplete older than an hour = %d, %v; want 0, nil", n, err)
	}
	waitPast(t, ctx, cli, srv.Bucket, "incomplete/")
	n, err := s.CleanIncomplete(ctx, "", 0)
	if err != nil || n != 1 {
		t.Errorf("CleanIncomplete = %d, %v; want 1 (the crashed upload), nil", n, err)
	}
	if left := incomplete(t, ctx, cli, srv.Bucket, "incomplete/"); len(left) != 0 {
		t.Errorf("incomplete uploads left: %v", left)
	}
	if left := incomplete(t, ctx, cli, srv.Bucket, "elsewhere/"); len(left) != 1 {
		t.Errorf("uploads outside the prefix = %v, want the one left alone", left)
	}
	if _, err := s.Stat(ctx, "snap/failed.db"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat failed object: %v, want ErrNotFound", err)
	}
}

// waitPast waits until the server's initiation times of uploads under
// prefix are in the past by the local clock, so olderThan 0 covers them.
func waitPast(t *testing.T, ctx context.Context, cli *minio.Client, bucket, prefix string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, u := range incomplete(t, ctx, cli, bucket, prefix) {
		for !u.Initiated.Before(time.Now()) {
			if time.Now().After(deadline) {
				t.Fatalf("upload %s initiated at %s, in the future", u.Key, u.Initiated)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func incomplete(t *testing.T, ctx context.Context, cli *minio.Client, bucket, prefix string) []minio.ObjectMultipartInfo {
	t.Helper()
	var out []minio.ObjectMultipartInfo
	// MinIO lists uploads below a prefix only with no prefix given.
	for u := range cli.ListIncompleteUploads(ctx, bucket, "", true) {
		if u.Err != nil {
			t.Fatalf("list incomplete uploads: %v", u.Err)
		}
		if strings.HasPrefix(u.Key, prefix) {
			out = append(out, u)
		}
	}
	return out
}

// TestVersionedBucketDeleteRemovesData: on a versioned bucket a delete
// must remove the data, not just add a delete marker.
func TestVersionedBucketDeleteRemovesData(t *testing.T) {
	srv := testenv.StartMinIO(t)
	mc := srv.Client(t)
	ctx := t.Context()
	if err := mc.EnableVersioning(ctx, srv.Bucket); err != nil {
		t.Fatalf("enable versioning: %v", err)
	}
	st := openURL(t, srv.URL("v"), srv.Env())
	for i := range 3 { // three versions of one key, and a neighbour
		if _, err := store.PutBytes(ctx, st, "b/etcd.backup.gz", []byte(fmt.Sprint(i)), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.PutBytes(ctx, st, "b/etcd.backup.gz.keep", []byte("x"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "b/etcd.backup.gz"); err != nil {
		t.Fatal(err)
	}
	versions := map[string]int{}
	for v := range mc.ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Prefix: "v/", WithVersions: true, Recursive: true}) {
		if v.Err != nil {
			t.Fatal(v.Err)
		}
		versions[v.Key]++
	}
	if versions["v/b/etcd.backup.gz"] != 0 || versions["v/b/etcd.backup.gz.keep"] != 1 {
		t.Fatalf("versions left after delete: %v", versions)
	}
}
