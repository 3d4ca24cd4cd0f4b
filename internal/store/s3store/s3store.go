// Package s3store is the store.Store over an S3 bucket (AWS S3, MinIO,
// versitygw, Ceph RGW, ...) through minio-go. Large objects are streamed as
// multipart uploads with a fixed number of part buffers, so memory use does
// not depend on the object's size.
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

var _ store.Store = (*Store)(nil)

// Default streaming parameters: 5 MiB parts (S3's minimum), one in flight
// while the next fills: 10 MiB of buffers whatever the object size, up to
// 50 GiB objects (10,000 parts). More in flight bought no speed on a
// 2-core master (docs/benchmarks.md).
const (
	DefaultPartSize    = 5 << 20
	DefaultConcurrency = 1
)

// Store keeps objects in Bucket below Prefix.
type Store struct {
	Client      *minio.Client
	Bucket      string
	Prefix      string // "" or ends in "/"
	PartSize    int
	Concurrency int
	url         string

	versioningOnce sync.Once
	versioned      bool
}

// New wraps a configured minio client. url is used for String and must not
// hold secrets.
func New(client *minio.Client, bucket, prefix, url string) *Store {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Store{Client: client, Bucket: bucket, Prefix: prefix, PartSize: DefaultPartSize, Concurrency: DefaultConcurrency, url: url}
}

func (s *Store) String() string { return s.url }

func (s *Store) core() minio.Core { return minio.Core{Client: s.Client} }

// mapErr turns minio's errors into the store's sentinel errors, keeping
// the original for detail.
func mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	var sentinel error
	switch {
	case resp.Code == "NoSuchKey" || resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket":
		sentinel = store.ErrNotFound
	case resp.Code == "NoSuchBucket":
		sentinel = store.ErrNoBucket
	case resp.Code == "PreconditionFailed" || resp.StatusCode == http.StatusPreconditionFailed:
		sentinel = store.ErrPrecondition
	case resp.Code == "AccessDenied" || resp.Code == "SignatureDoesNotMatch" ||
		resp.Code == "InvalidAccessKeyId" || resp.StatusCode == http.StatusForbidden:
		sentinel = store.ErrAccessDenied
	default:
		var nerr net.Error
		var oerr *net.OpError
		if errors.As(err, &oerr) || errors.As(err, &nerr) {
			sentinel = store.ErrUnreachable
		}
	}
	if sentinel != nil {
		return fmt.Errorf("s3store: %s %s: %w (%s)", op, key, sentinel, err.Error())
	}
	return fmt.Errorf("s3store: %s %s: %w", op, key, err)
}

func (s *Store) Stat(ctx context.Context, key string) (store.Info, error) {
	if err := store.CheckKey(key); err != nil {
		return store.Info{}, err
	}
	oi, err := s.Client.StatObject(ctx, s.Bucket, s.Prefix+key, minio.StatObjectOptions{})
	if err != nil {
		err = mapErr("stat", key, err)
		// A HEAD answer has no body to tell a missing bucket from a
		// missing key (MinIO adds a header, others do not): ask.
		if errors.Is(err, store.ErrNotFound) {
			if ok, berr := s.Client.BucketExists(ctx, s.Bucket); berr == nil && !ok {
				return store.Info{}, mapErr("stat", key, minio.ErrorResponse{Code: "NoSuchBucket", StatusCode: http.StatusNotFound, BucketName: s.Bucket, Message: "The specified bucket does not exist"})
			}
		}
		return store.Info{}, err
	}
	return store.Info{Key: key, Size: oi.Size, ETag: oi.ETag, Modified: oi.LastModified}, nil
}

func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	if err := store.CheckKey(key); err != nil {
		return nil, store.Info{}, err
	}
	rc, oi, _, err := s.core().GetObject(ctx, s.Bucket, s.Prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, store.Info{}, mapErr("get", key, err)
	}
	return rc, store.Info{Key: key, Size: oi.Size, ETag: oi.ETag, Modified: oi.LastModified}, nil
}

func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts store.PutOptions) (store.Info, error) {
	if err := store.CheckKey(key); err != nil {
		return store.Info{}, err
	}
	partSize := s.PartSize
	if partSize < 5<<20 {
		partSize = 5 << 20 // S3's minimum part size
	}
	first := make([]byte, partSize)
	n, err := io.ReadFull(r, first)
	single := errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
	if err != nil && !single {
		return store.Info{}, fmt.Errorf("s3store: put %s: read: %w", key, err)
	}
	if !single { // exactly one part, or more? Peek a byte to know.
		var one [1]byte
		m, err := io.ReadFull(r, one[:])
		switch {
		case m == 0 && errors.Is(err, io.EOF):
			single = true
		case err != nil:
			return store.Info{}, fmt.Errorf("s3store: put %s: read: %w", key, err)
		default:
			r = io.MultiReader(bytes.NewReader(one[:]), r)
		}
	}
	conditional := opts.IfNoneMatch || opts.IfMatch != ""
	if !single || n > store.SmallObjectLimit {
		if conditional {
			return store.Info{}, fmt.Errorf("s3store: put %s: %w", key, store.ErrTooLarge)
		}
		return s.putMultipart(ctx, key, first[:n], r, partSize)
	}
	po := minio.PutObjectOptions{ContentType: "application/octet-stream"}
	if opts.IfNoneMatch {
		po.SetMatchETagExcept("*")
	}
	if opts.IfMatch != "" {
		po.SetMatchETag(opts.IfMatch)
	}
	ui, err := s.core().PutObject(ctx, s.Bucket, s.Prefix+key, bytes.NewReader(first[:n]), int64(n), "", "", po)
	if err != nil {
		err = mapErr("put", key, err)
		// S3 answers If-Match on a missing object with 404 NoSuchKey; to
		// the caller the object is not the version it expected.
		if opts.IfMatch != "" && errors.Is(err, store.ErrNotFound) {
			return store.Info{}, fmt.Errorf("s3store: put %s: %w (the object does not exist)", key, store.ErrPrecondition)
		}
		return store.Info{}, err
	}
	return store.Info{Key: key, Size: int64(n), ETag: ui.ETag, Modified: ui.LastModified}, nil
}

// putMultipart uploads first and the rest of r as parts, with at most
// Concurrency parts in flight and one more filling. On any failure the
// upload is aborted, so nothing becomes visible.
func (s *Store) putMultipart(ctx context.Context, key string, first []byte, r io.Reader, partSize int) (store.Info, error) {
	core := s.core()
	obj := s.Prefix + key
	uploadID, err := core.NewMultipartUpload(ctx, s.Bucket, obj, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return store.Info{}, mapErr("put", key, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	conc := max(s.Concurrency, 1)
	free := make(chan []byte, conc+1)
	for range conc {
		free <- make([]byte, partSize)
	}
	var (
		mu       sync.Mutex
		parts    []minio.CompletePart
		firstErr error
		wg       sync.WaitGroup
		total    int64
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	upload := func(num int, buf []byte, n int) {
		defer wg.Done()
		p, err := core.PutObjectPart(ctx, s.Bucket, obj, uploadID, num, bytes.NewReader(buf[:n]), int64(n), minio.PutObjectPartOptions{})
		free <- buf
		if err != nil {
			fail(mapErr("put part of", key, err))
			return
		}
		mu.Lock()
		parts = append(parts, minio.CompletePart{PartNumber: num, ETag: p.ETag})
		mu.Unlock()
	}

	buf, n, num := first, len(first), 1
	for {
		total += int64(n)
		wg.Add(1)
		go upload(num, buf, n)
		var rerr error
		select {
		case buf = <-free:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		n, rerr = io.ReadFull(r, buf)
		if n == 0 && (errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)) {
			free <- buf
			break
		}
		if rerr != nil && !errors.Is(rerr, io.ErrUnexpectedEOF) {
			fail(fmt.Errorf("s3store: put %s: read: %w", key, rerr))
			break
		}
		num++
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = fmt.Errorf("s3store: put %s: %w", key, ctx.Err())
	}
	if firstErr != nil {
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer acancel()
		_ = core.AbortMultipartUpload(actx, s.Bucket, obj, uploadID) // leftovers go in CleanIncomplete
		return store.Info{}, firstErr
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].PartNumber < parts[j].PartNumber })
	ui, err := core.CompleteMultipartUpload(ctx, s.Bucket, obj, uploadID, parts, minio.PutObjectOptions{})
	if err != nil {
		return store.Info{}, mapErr("complete upload of", key, err)
	}
	return store.Info{Key: key, Size: total, ETag: ui.ETag, Modified: ui.LastModified}, nil
}

func (s *Store) Delete(ctx context.Context, key string) error {
	if err := store.CheckKey(key); err != nil {
		return err
	}
	obj := s.Prefix + key
	if s.isVersioned(ctx) {
		// A plain delete on a versioned bucket only adds a delete marker
		// and keeps paying for the data: remove every version of exactly
		// this key (one listing per deleted key).
		for v := range s.Client.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: obj, WithVersions: true, Recursive: true}) {
			if v.Err != nil {
				return mapErr("list versions of", key, v.Err)
			}
			if v.Key != obj {
				continue
			}
			if err := s.Client.RemoveObject(ctx, s.Bucket, obj, minio.RemoveObjectOptions{VersionID: v.VersionID}); err != nil {
				return mapErr("delete version of", key, err)
			}
		}
		return nil
	}
	err := s.Client.RemoveObject(ctx, s.Bucket, obj, minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != "NoSuchKey" {
		return mapErr("delete", key, err)
	}
	return nil
}

// isVersioned asks once whether the bucket keeps versions. Servers that
// do not implement the call (or deny it) are treated as unversioned.
func (s *Store) isVersioned(ctx context.Context) bool {
	s.versioningOnce.Do(func() {
		cfg, err := s.Client.GetBucketVersioning(ctx, s.Bucket)
		s.versioned = err == nil && (cfg.Enabled() || cfg.Suspended())
	})
	return s.versioned
}

func (s *Store) List(ctx context.Context, prefix string) ([]store.Entry, error) {
	if err := store.CheckPrefix(prefix); err != nil {
		return nil, err
	}
	full := s.Prefix + prefix
	var out []store.Entry
	for oi := range s.Client.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: full, Recursive: false}) {
		if oi.Err != nil {
			return nil, mapErr("list", prefix, oi.Err)
		}
		name := strings.TrimPrefix(oi.Key, full)
		if name == "" {
			continue
		}
		if strings.HasSuffix(name, "/") {
			out = append(out, store.Entry{Name: strings.TrimSuffix(name, "/"), Dir: true})
		} else {
			out = append(out, store.Entry{Name: name})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Store) CleanIncomplete(ctx context.Context, prefix string, olderThan time.Duration) (int, error) {
	if err := store.CheckPrefix(prefix); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx) // stops the listing on early return
	defer cancel()
	cutoff := time.Now().Add(-olderThan)
	full := s.Prefix + prefix
	n := 0
	// List the whole bucket and filter here: MinIO lists uploads only for
	// an exact object name when given a prefix (and, with none, those
	// started since it last started; its own stale-upload expiry covers
	// older ones).
	for u := range s.Client.ListIncompleteUploads(ctx, s.Bucket, "", true) {
		if u.Err != nil {
			return n, mapErr("list uploads", prefix, u.Err)
		}
		if !strings.HasPrefix(u.Key, full) || !u.Initiated.Before(cutoff) {
			continue
		}
		if err := s.core().AbortMultipartUpload(ctx, s.Bucket, u.Key, u.UploadID); err != nil {
			if errors.Is(mapErr("abort upload", u.Key, err), store.ErrNotFound) {
				continue // completed or aborted meanwhile
			}
			return n, mapErr("abort upload", u.Key, err)
		}
		n++
	}
	return n, nil
}
