// Package atomicfile replaces files so that a reader, or the next boot
// after a crash, sees the old content or the new one, never a part.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// TempMark is in the name of a temp file while it is written
// (".NAME.tmp-RANDOM"), so a leftover of a crash can be recognized.
const TempMark = ".tmp-"

// Write replaces path with data: a temp file beside it gets the mode and
// owner (uid or gid -1: left as created), is synced and renamed over
// path, and the directory is synced. On failure path is untouched and the
// temp file removed.
func Write(path string, data []byte, mode os.FileMode, uid, gid int) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+TempMark+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if err := ChownIfNeeded(f, uid, gid); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// ChownIfNeeded changes only what differs (-1: leave), so a writer
// keeping its own files never needs a privilege.
func ChownIfNeeded(f *os.File, uid, gid int) error {
	if uid == -1 && gid == -1 {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if uid == int(st.Uid) {
			uid = -1
		}
		if gid == int(st.Gid) {
			gid = -1
		}
	}
	if uid == -1 && gid == -1 {
		return nil
	}
	if err := f.Chown(uid, gid); err != nil {
		return fmt.Errorf("%w (run as root to give files to %d:%d)", err, uid, gid)
	}
	return nil
}

// SyncDir makes a rename in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
