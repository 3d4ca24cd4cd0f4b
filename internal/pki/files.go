package pki

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/filelock"
)

// Modes of what IssueMember and RenewDir write.
const (
	dirMode  = 0o700
	certMode = 0o644
	keyMode  = 0o600
)

// Owner is who owns written files: etcd reads its keys as the etcd user.
// -1 leaves that part alone: a new file keeps the writer's, a replaced
// file the owner of the file it replaces.
type Owner struct{ UID, GID int }

// ParseOwner reads USER[:GROUP] as names or numbers; "" is {-1, -1}. A
// user without a group gets the user's primary group.
func ParseOwner(s string) (Owner, error) {
	return parseOwner(s, user.Lookup, user.LookupGroup)
}

func parseOwner(s string, lookupUser func(string) (*user.User, error), lookupGroup func(string) (*user.Group, error)) (Owner, error) {
	none := Owner{-1, -1}
	if s == "" {
		return none, nil
	}
	u, g, hasGroup := strings.Cut(s, ":")
	o := none
	if uid, err := strconv.Atoi(u); err == nil {
		o.UID = uid
	} else {
		usr, err := lookupUser(u)
		if err != nil {
			return none, fmt.Errorf("%w: owner %q: %w (create the user, e.g. with sysusers.d, or give uid:gid)", ErrInvalid, s, err)
		}
		// A failed parse must not become 0: files would go to root.
		if o.UID, err = strconv.Atoi(usr.Uid); err != nil {
			return none, fmt.Errorf("%w: owner %q: user %s has uid %q, not a number: %w", ErrInvalid, s, u, usr.Uid, err)
		}
		if !hasGroup {
			if o.GID, err = strconv.Atoi(usr.Gid); err != nil {
				return none, fmt.Errorf("%w: owner %q: user %s has gid %q, not a number: %w", ErrInvalid, s, u, usr.Gid, err)
			}
		}
	}
	if hasGroup {
		if gid, err := strconv.Atoi(g); err == nil {
			o.GID = gid
		} else {
			grp, err := lookupGroup(g)
			if err != nil {
				return none, fmt.Errorf("%w: owner %q: %w", ErrInvalid, s, err)
			}
			if o.GID, err = strconv.Atoi(grp.Gid); err != nil {
				return none, fmt.Errorf("%w: owner %q: group %s has gid %q, not a number: %w", ErrInvalid, s, g, grp.Gid, err)
			}
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
	return atomicfile.SyncDir(filepath.Dir(dir))
}

// lockDir serializes the writers of dir (member join and the renewal
// timer may run at once), so a certificate and its key are replaced
// together; it waits no longer than ctx. It also removes temp files an
// interrupted writer left.
func lockDir(ctx context.Context, dir string) (unlock func(), err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := filelock.Lock(ctx, d); err != nil {
		d.Close()
		return nil, err
	}
	unlock = func() { d.Close() } // closing the only descriptor releases the lock
	des, err := os.ReadDir(dir)
	if err != nil {
		unlock()
		return nil, err
	}
	for _, de := range des {
		if n := de.Name(); strings.HasPrefix(n, ".") && strings.Contains(n, atomicfile.TempMark) {
			os.Remove(filepath.Join(dir, n))
		}
	}
	return unlock, nil
}

// writeFile replaces dir/name with data: temp file, fsync, rename, fsync
// of the directory, so a crash leaves the old file or the new one.
func writeFile(dir, name string, data []byte, mode os.FileMode, owner Owner) error {
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
	return atomicfile.Write(target, data, mode, owner.UID, owner.GID)
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
	if err := atomicfile.ChownIfNeeded(f, owner.UID, owner.GID); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}
