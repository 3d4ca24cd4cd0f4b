// Package filestore is the store.Store over a local or NFS directory: the
// embedded default (file:///path). Writes go to a temp file that is fsynced
// and renamed (or hard-linked, for create-only), so readers never see a
// partial object. The store holds the cluster CA's key: objects are 0600
// and directories 0700 whatever the process's umask, readable by the
// owner only (on hosts: root; see docs/operations.md).
package filestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/filelock"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

var _ store.Store = (*Store)(nil)

// Names the store keeps for itself: temp files of running Puts (in any
// directory) and the compare-and-swap lock (at the root).
const (
	tmpPrefix = ".tmp-"
	lockName  = ".lock"
)

// Modes of what the store creates, set explicitly (a umask only narrows).
const (
	fileMode = 0o600
	dirMode  = 0o700
)

// Store keeps objects as files below Root.
type Store struct {
	Root string
}

// New returns a Store rooted at dir, which must exist.
func New(dir string) (*Store, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w (create the directory %s first)", err, dir)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("filestore: %s is not a directory", dir)
	}
	return &Store{Root: filepath.Clean(dir)}, nil
}

func (s *Store) String() string { return "file://" + s.Root }

func (s *Store) path(key string) (string, error) {
	if err := store.CheckKey(key); err != nil {
		return "", err
	}
	// An object under a reserved name would be hidden from List, deleted
	// by CleanIncomplete or (the lock) break compare-and-swap.
	if key == lockName {
		return "", fmt.Errorf("%w: %q is reserved by the file store", store.ErrBadKey, key)
	}
	for _, part := range strings.Split(key, "/") {
		if strings.HasPrefix(part, tmpPrefix) {
			return "", fmt.Errorf("%w: %q: names starting with %s are reserved by the file store", store.ErrBadKey, key, tmpPrefix)
		}
	}
	return filepath.Join(s.Root, filepath.FromSlash(key)), nil
}

// etag identifies one version of a file: every write renames a new inode
// into place, so inode, size and mtime change together.
func etag(fi os.FileInfo) string {
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%x-%x-%x", ino, fi.Size(), fi.ModTime().UnixNano())
}

func info(key string, fi os.FileInfo) store.Info {
	return store.Info{Key: key, Size: fi.Size(), ETag: etag(fi), Modified: fi.ModTime()}
}

func (s *Store) Stat(_ context.Context, key string) (store.Info, error) {
	p, err := s.path(key)
	if err != nil {
		return store.Info{}, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.IsDir()) {
		return store.Info{}, fmt.Errorf("%s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return store.Info{}, fmt.Errorf("filestore: stat %s: %w", key, err)
	}
	return info(key, fi), nil
}

func (s *Store) Get(_ context.Context, key string) (io.ReadCloser, store.Info, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, store.Info{}, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, store.Info{}, fmt.Errorf("%s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return nil, store.Info{}, fmt.Errorf("filestore: open %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err == nil && fi.IsDir() {
		f.Close()
		return nil, store.Info{}, fmt.Errorf("%s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		f.Close()
		return nil, store.Info{}, fmt.Errorf("filestore: stat %s: %w", key, err)
	}
	return f, info(key, fi), nil
}

func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts store.PutOptions) (_ store.Info, err error) {
	p, err := s.path(key)
	if err != nil {
		return store.Info{}, err
	}
	conditional := opts.IfNoneMatch || opts.IfMatch != ""
	if conditional {
		r = io.LimitReader(r, store.SmallObjectLimit+1)
	}
	dir := filepath.Dir(p)
	tmp, err := s.writeTemp(dir, filepath.Base(p), r)
	if err != nil {
		s.removeEmptyDirs(dir)
		return store.Info{}, fmt.Errorf("filestore: put %s: %w", key, err)
	}
	defer func() {
		os.Remove(tmp) // a no-op once renamed
		if err != nil {
			// Like S3, a failed write leaves no empty "directory".
			s.removeEmptyDirs(dir)
		}
	}()
	if conditional {
		if fi, err := os.Stat(tmp); err == nil && fi.Size() > store.SmallObjectLimit {
			return store.Info{}, fmt.Errorf("filestore: put %s: %w", key, store.ErrTooLarge)
		}
	}
	switch {
	case opts.IfNoneMatch:
		// link(2) fails if the name exists: an atomic create-only write,
		// also on NFS.
		if err := os.Link(tmp, p); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return store.Info{}, fmt.Errorf("%s: %w", key, store.ErrPrecondition)
			}
			return store.Info{}, fmt.Errorf("filestore: put %s: %w", key, err)
		}
	case opts.IfMatch != "":
		unlock, err := s.lock(ctx)
		if err != nil {
			return store.Info{}, fmt.Errorf("filestore: put %s: %w", key, err)
		}
		defer unlock()
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && etag(fi) != opts.IfMatch) {
			return store.Info{}, fmt.Errorf("%s: %w", key, store.ErrPrecondition)
		}
		if err != nil {
			return store.Info{}, fmt.Errorf("filestore: put %s: %w", key, err)
		}
		if err := os.Rename(tmp, p); err != nil {
			return store.Info{}, fmt.Errorf("filestore: put %s: %w", key, err)
		}
	default:
		if err := os.Rename(tmp, p); err != nil {
			return store.Info{}, fmt.Errorf("filestore: put %s: %w", key, err)
		}
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return store.Info{}, fmt.Errorf("filestore: put %s: %w", key, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return store.Info{}, fmt.Errorf("filestore: put %s: %w", key, err)
	}
	return info(key, fi), nil
}

// writeTemp copies r to a new temp file in dir, creating dir as needed.
func (s *Store) writeTemp(dir, base string, r io.Reader) (string, error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	name := filepath.Join(dir, tmpPrefix+base+"-"+hex.EncodeToString(rnd[:]))
	var f *os.File
	// A Delete or failed Put elsewhere in dir may remove it between
	// MkdirAll and the create when it is empty; a few tries settle that.
	for try := 0; ; try++ {
		if err := s.mkdirs(dir); err != nil {
			return "", err
		}
		var err error
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || try == 3 {
			return "", err
		}
	}
	if err := f.Chmod(fileMode); err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

// mkdirs makes dir and its missing parents below the root, each with
// dirMode exactly.
func (s *Store) mkdirs(dir string) error {
	if dir == s.Root {
		return nil
	}
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s: %w", dir, syscall.ENOTDIR)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := s.mkdirs(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, dirMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // another writer made it
		}
		return err
	}
	return os.Chmod(dir, dirMode)
}

// removeEmptyDirs removes dir and its parents up to the root while they
// are empty, as S3 has no empty prefixes.
func (s *Store) removeEmptyDirs(dir string) {
	for ; dir != s.Root && strings.HasPrefix(dir, s.Root+string(filepath.Separator)); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			return
		}
	}
}

// lock serializes compare-and-swap writes across processes and hosts
// sharing the directory (flock works on local filesystems and NFSv4). It
// waits no longer than ctx: a hung NFS client may hold it for minutes.
func (s *Store) lock(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.Root, lockName), os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, err
	}
	if err := filelock.Lock(ctx, f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing the only descriptor releases the lock
}

func (s *Store) Delete(_ context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("filestore: delete %s: %w", key, err)
	}
	s.removeEmptyDirs(filepath.Dir(p))
	return nil
}

func (s *Store) List(_ context.Context, prefix string) ([]store.Entry, error) {
	if err := store.CheckPrefix(prefix); err != nil {
		return nil, err
	}
	des, err := os.ReadDir(filepath.Join(s.Root, filepath.FromSlash(prefix)))
	// Nothing below a missing name or an object's name, as in S3.
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filestore: list %s: %w", prefix, err)
	}
	out := make([]store.Entry, 0, len(des))
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, tmpPrefix) || (prefix == "" && name == lockName) {
			continue
		}
		out = append(out, store.Entry{Name: name, Dir: de.IsDir()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Store) CleanIncomplete(_ context.Context, prefix string, olderThan time.Duration) (int, error) {
	if err := store.CheckPrefix(prefix); err != nil {
		return 0, err
	}
	cutoff := time.Now().Add(-olderThan)
	n := 0
	root := filepath.Join(s.Root, filepath.FromSlash(prefix))
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if de.IsDir() || !strings.HasPrefix(de.Name(), tmpPrefix) {
			return nil
		}
		fi, err := de.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			return nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		s.removeEmptyDirs(filepath.Dir(p))
		n++
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("filestore: clean %s: %w", prefix, err)
	}
	return n, nil
}
