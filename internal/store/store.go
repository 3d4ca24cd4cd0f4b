// Package store defines the shared store every host coordinates through: a
// small key/value interface over a directory (filestore) or an S3 bucket
// (s3store). Keys are slash-separated relative paths. Callers that need a
// store from a URL use package storeurl; everything else takes a Store.
package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Store is what the rest of the project needs from shared storage. Every
// implementation passes storetest.Run.
type Store interface {
	// Get opens key for reading. ErrNotFound when it does not exist.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat describes key. ErrNotFound when it does not exist.
	Stat(ctx context.Context, key string) (Info, error)
	// Put writes key from r, streaming: memory use does not depend on the
	// object's size. The object appears whole or not at all. Conditions
	// (create-only, compare-and-swap) fail with ErrPrecondition and are
	// only accepted for objects up to SmallObjectLimit.
	Put(ctx context.Context, key string, r io.Reader, opts PutOptions) (Info, error)
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns the entries directly below prefix (one level, like an
	// S3 listing with delimiter "/"), sorted by name. prefix is "" or ends
	// in "/". Directory entries have Dir set and no trailing slash.
	List(ctx context.Context, prefix string) ([]Entry, error)
	// CleanIncomplete removes what interrupted Puts under prefix left
	// behind (temp files, unfinished multipart uploads) that is older
	// than olderThan, and returns how many it removed.
	CleanIncomplete(ctx context.Context, prefix string, olderThan time.Duration) (int, error)
	// String is the store's URL, without secrets.
	String() string
}

// SmallObjectLimit is the largest object a conditional Put accepts.
const SmallObjectLimit = 5 << 20

// Info describes one stored object.
type Info struct {
	Key      string
	Size     int64
	ETag     string
	Modified time.Time
}

// Entry is one name in a List result.
type Entry struct {
	Name string
	Dir  bool
}

// PutOptions are the conditions of a write.
type PutOptions struct {
	// IfNoneMatch makes the write create-only.
	IfNoneMatch bool
	// IfMatch, when set, makes the write succeed only if the object's
	// current ETag is this value (compare-and-swap).
	IfMatch string
}

// PutBytes is Put for a small in-memory object.
func PutBytes(ctx context.Context, s Store, key string, b []byte, opts PutOptions) (Info, error) {
	return s.Put(ctx, key, bytes.NewReader(b), opts)
}

// Since makes a compare-and-swap on what was read: the write succeeds only
// if the object still has etag, or, with etag "", does not exist yet.
func Since(etag string) PutOptions {
	if etag == "" {
		return PutOptions{IfNoneMatch: true}
	}
	return PutOptions{IfMatch: etag}
}

// PutJSON writes v as indented JSON under key with opts and returns the
// new ETag.
func PutJSON(ctx context.Context, s Store, key string, v any, opts PutOptions) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", key, err)
	}
	info, err := PutBytes(ctx, s, key, b, opts)
	if err != nil {
		return "", err
	}
	return info.ETag, nil
}

// GetBytes reads a small object whole, refusing anything over limit bytes.
func GetBytes(ctx context.Context, s Store, key string, limit int64) ([]byte, Info, error) {
	rc, info, err := s.Get(ctx, key)
	if err != nil {
		return nil, Info{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, Info{}, fmt.Errorf("read %s: %w", key, err)
	}
	if int64(len(b)) > limit {
		return nil, Info{}, fmt.Errorf("read %s: object larger than %d bytes", key, limit)
	}
	return b, info, nil
}

// GetJSON reads a small JSON object (at most 1 MiB) into v and returns
// its ETag (for a conditional write back with Since); ErrNotFound when
// there is none.
func GetJSON(ctx context.Context, s Store, key string, v any) (string, error) {
	b, info, err := GetBytes(ctx, s, key, 1<<20)
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	return info.ETag, nil
}

// EachJSON reads every NAME.json object directly below prefix (one
// listing, then one read each) and calls fn with NAME and the content;
// objects deleted between the listing and the read are skipped.
func EachJSON(ctx context.Context, s Store, prefix string, limit int64, fn func(name string, b []byte) error) error {
	entries, err := s.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("list %s: %w", prefix, err)
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name, ".json")
		if e.Dir || !ok {
			continue
		}
		b, _, err := GetBytes(ctx, s, prefix+e.Name, limit)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", prefix+e.Name, err)
		}
		if err := fn(name, b); err != nil {
			return err
		}
	}
	return nil
}

// CheckKey rejects keys that could escape the store or name nothing.
func CheckKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("%w: %q", ErrBadKey, key)
		}
	}
	return nil
}

// CheckPrefix accepts "" or a valid key followed by "/".
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("%w: prefix %q must end in /", ErrBadKey, prefix)
	}
	return CheckKey(strings.TrimSuffix(prefix, "/"))
}
