package member

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/etcdadm/etcdadm-immutable/internal/pki"
)

// writeEnvFile writes etcd's ETCD_* settings (0600: it names key files),
// atomically. changed reports whether the content differs from before, so
// a running etcd is restarted only when its settings changed.
func writeEnvFile(path string, vars map[string]string, owner pki.Owner) (changed bool, err error) {
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
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return false, fmt.Errorf("env file: %w", err)
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		f.Close()
		return false, fmt.Errorf("env file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return false, fmt.Errorf("env file: %w", err)
	}
	if err := f.Close(); err != nil {
		return false, fmt.Errorf("env file: %w", err)
	}
	if owner.UID >= 0 {
		if err := os.Chown(tmp, owner.UID, owner.GID); err != nil {
			return false, fmt.Errorf("env file: %w", err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return false, fmt.Errorf("env file: %w", err)
	}
	return true, nil
}
