package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Modes of what IssueMember and RenewDir write.
const (
	dirMode  = 0o700
	certMode = 0o644
	keyMode  = 0o600
)

// tmpMark is in the names of temp files while they are written; what a
// crash left behind is removed by the next writer.
const tmpMark = ".tmp-"

// Owner is who owns written files: etcd reads its keys as the etcd user.
// -1 leaves that part alone: a new file keeps the writer's, a replaced
// file the owner of the file it replaces.
type Owner struct{ UID, GID int }

// ParseOwner reads USER[:GROUP] as names or numbers; "" is {-1, -1}. A
// user without a group gets the user's primary group.
func ParseOwner(s string) (Owner, error) {
	none := Owner{-1, -1}
	if s == "" {
		return none, nil
	}
	u, g, hasGroup := strings.Cut(s, ":")
	o := none
	if uid, err := strconv.Atoi(u); err == nil {
		o.UID = uid
	} else {
		usr, err := user.Lookup(u)
		if err != nil {
			return none, fmt.Errorf("%w: owner %q: %w (create the user, e.g. with sysusers.d, or give uid:gid)", ErrInvalid, s, err)
		}
		o.UID, _ = strconv.Atoi(usr.Uid)
		if !hasGroup {
			o.GID, _ = strconv.Atoi(usr.Gid)
		}
	}
	if hasGroup {
		if gid, err := strconv.Atoi(g); err == nil {
			o.GID = gid
		} else {
			grp, err := user.LookupGroup(g)
			if err != nil {
				return none, fmt.Errorf("%w: owner %q: %w", ErrInvalid, s, err)
			}
			o.GID, _ = strconv.Atoi(grp.Gid)
		}
	}
	if o.UID < -1 || o.GID < -1 {
		return none, fmt.Errorf("%w: owner %q", ErrInvalid, s)
	}
	return o, nil
}

// ensureDir creates dir (mode 0700, owned by owner) when it is missing;
// an existing dir is left as it is. Missing parents get 0755 so the owner
// can reach dir.
func ensureDir(dir string, owner Owner) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chmod(dir, dirMode); err != nil { // past the umask
		return err
	}
	if owner.UID != -1 || owner.GID != -1 {
		if err := os.Chown(dir, owner.UID, owner.GID); err != nil {
			return err
		}
	}
	return syncDir(filepath.Dir(dir))
}

// lockDir serializes the writers of dir (member join and the renewal
// timer may run at once), so a certificate and its key are replaced
// together. It also removes temp files an interrupted writer left.
func lockDir(dir string) (unlock func(), err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
		d.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	unlock = func() { syscall.Flock(int(d.Fd()), syscall.LOCK_UN); d.Close() }
	des, err := os.ReadDir(dir)
	if err != nil {
		unlock()
		return nil, err
	}
	for _, de := range des {
		if n := de.Name(); strings.HasPrefix(n, ".") && strings.Contains(n, tmpMark) {
			os.Remove(filepath.Join(dir, n))
		}
	}
	return unlock, nil
}

// writeFile replaces dir/name with data: temp file, fsync, rename, fsync
// of the directory, so a crash leaves the old file or the new one.
func writeFile(dir, name string, data []byte, mode os.FileMode, owner Owner) (err error) {
	target := filepath.Join(dir, name)
	if fi, err := os.Stat(target); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if owner.UID == -1 {
				owner.UID = int(st.Uid)
			}
			if owner.GID == -1 {
				owner.GID = int(st.Gid)
			}
		}
	}
	f, err := os.CreateTemp(dir, "."+name+tmpMark+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", target, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("write %s: %w", target, err)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if err := chownIfNeeded(f, owner); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), target); err != nil {
		return err
	}
	return syncDir(dir)
}

// chownIfNeeded changes only what differs, so a non-root writer keeping
// its own files never needs a privilege.
func chownIfNeeded(f *os.File, owner Owner) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	uid, gid := -1, -1
	if owner.UID != -1 && owner.UID != int(st.Uid) {
		uid = owner.UID
	}
	if owner.GID != -1 && owner.GID != int(st.Gid) {
		gid = owner.GID
	}
	if uid == -1 && gid == -1 {
		return nil
	}
	if err := f.Chown(uid, gid); err != nil {
		return fmt.Errorf("%w (run as root to give files to %d:%d)", err, owner.UID, owner.GID)
	}
	return nil
}

// fixFile gives a kept file the mode and owner it should have, without
// rewriting it.
func fixFile(path string, mode os.FileMode, owner Owner) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Mode().Perm() != mode {
		if err := f.Chmod(mode); err != nil {
			return fmt.Errorf("chmod %s: %w", path, err)
		}
	}
	if err := chownIfNeeded(f, owner); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
