package member

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
)

// writeEnvFile writes etcd's ETCD_* settings (0600: it names key files),
// atomically. changed reports whether the content differs from before, so
// a running etcd is restarted only when its settings changed.
// Values are written as they are, not envfile.Quote'd: quoting would
// change the file (and restart etcd) on every host with an IPv6 URL in
// it; envfile.Read reads both forms.
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
	if err := atomicfile.Write(path, b.Bytes(), 0o600, owner.UID, owner.GID); err != nil {
		return false, fmt.Errorf("env file: %w", err)
	}
	return true, nil
}
