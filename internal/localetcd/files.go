package localetcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/service"
)

// Start starts etcd, or restarts it when restart is set (its settings
// changed). The only way our programs start it (test/deps checks).
func Start(ctx context.Context, svc service.Manager, restart bool) error {
	return svc.Start(ctx, restart)
}

// Stop stops etcd and waits until it exited.
func Stop(ctx context.Context, svc service.Manager) error { return svc.Stop(ctx) }

// WriteEnv writes etcd's ETCD_* settings to path (0600: it names key
// files), atomically. changed reports whether the content differs from
// before, so a running etcd is restarted only when its settings changed.
// Values are written as they are, not envfile.Quote'd: quoting would
// change the file (and restart etcd) on every host with an IPv6 URL in
// it; envfile.Read reads both forms.
func WriteEnv(path string, vars map[string]string, owner pki.Owner) (changed bool, err error) {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString("# Written by etcd-member-join; edits are overwritten on its next run.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, vars[k])
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b.Bytes()) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("env file: %w", err)
	}
	if err := atomicfile.Write(path, b.Bytes(), 0o600, owner.UID, owner.GID); err != nil {
		return false, fmt.Errorf("env file: %w", err)
	}
	return true, nil
}

// Use points d's current link at v, atomically (a new link, named for
// this process, renamed over the old): a crash leaves either the old or
// the new version, never none. The link is relative, so it also resolves
// under a root prefix.
func Use(d etcdbin.Dir, v etcdversion.Version) error {
	if !d.Has(v) {
		return fmt.Errorf("etcdbin: use %s: %w (%s)", v, etcdbin.ErrMissing, d.VersionDir(v))
	}
	link := d.CurrentLink()
	tmp := link + ".new." + strconv.Itoa(os.Getpid())
	os.Remove(tmp)
	if err := os.Symlink("v"+v.String(), tmp); err != nil {
		return fmt.Errorf("etcdbin: use %s: %w", v, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("etcdbin: use %s: %w", v, err)
	}
	if err := atomicfile.SyncDir(string(d)); err != nil {
		return fmt.Errorf("etcdbin: use %s: %w", v, err)
	}
	return nil
}

// MoveAside keeps a data directory's member/ as member.<why> (never
// deleted): member join, a restore, a recovery and a teardown all use it.
// A name already taken (an earlier, interrupted try) gets a unique suffix.
// It returns where the data went, "" when there was none.
func MoveAside(dataDir, why string) (string, error) {
	src := filepath.Join(dataDir, "member")
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	dst := src + "." + strings.ReplaceAll(why, ":", "")
	if _, err := os.Stat(dst); err == nil {
		dst += fmt.Sprintf(".%d", time.Now().UnixNano())
	}
	if err := os.Rename(src, dst); err != nil {
		return "", fmt.Errorf("move %s aside: %w", src, err)
	}
	return dst, atomicfile.SyncDir(dataDir)
}
