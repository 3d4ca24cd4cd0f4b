package localetcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/service"
)

// OnceEnvFile holds settings for etcd's next start only (under the host's
// root prefix): etcd.service reads it after etcd.env and removes it once
// etcd is up (ExecStartPost), so a crash and Restart= later, or any
// other start, runs without them. --force-new-cluster lives here: kept in
// etcd.env, a restart before it was rewritten forced the cluster again and
// dropped the members that had joined meanwhile.
const OnceEnvFile = "run/etcdadm/etcd-once.env"

// StartOnce restarts etcd with vars added for this start only.
func StartOnce(ctx context.Context, root string, svc service.Manager, vars map[string]string) error {
	var b strings.Builder
	b.WriteString("# For etcd's next start only (etcdadm); etcd.service removes it once etcd is up.\n")
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		fmt.Fprintf(&b, "%s=%s\n", k, vars[k])
	}
	path := filepath.Join(root, OnceEnvFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if err := atomicfile.Write(path, []byte(b.String()), 0o600, -1, -1); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if err := Start(ctx, svc, true); err != nil {
		return fmt.Errorf("etcd: start once with %s: %w", strings.Join(slices.Sorted(maps.Keys(vars)), ", "), err)
	}
	return nil
}

// ClearOnce removes settings a start never consumed (a crash between
// writing them and the start): an ordinary start must not pick them up.
func ClearOnce(root string) error {
	if err := os.Remove(filepath.Join(root, OnceEnvFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("etcd: %w", err)
	}
	return nil
}
