// Package backup writes, lists, verifies and prunes etcd backups in a
// store, in etcd-manager's layout:
//
//	<name>/etcd.backup.gz          gzip of the v3 snapshot
//	<name>/_etcd_backup.meta       etcd-manager's BackupInfo, written last
//	etcdadm/backups/<name>.json    our integrity record (never in the meta)
//
// A backup exists for readers once its meta file does. Anything else under
// a backup name is the remains of an interrupted upload, removed by Clean.
// Used by the snapshot uploader and the etcdadm CLI.
package backup

import "errors"

// IntegrityPrefix is where integrity records live in the store.
const IntegrityPrefix = "etcdadm/backups/"

// Errors callers and operators tell apart.
var (
	ErrUnknownBackup = errors.New("no such backup (run 'etcdadm backup list' to see the backups)")
	ErrCorrupt       = errors.New("backup is corrupt")
	ErrNoBackups     = errors.New("the store holds no backups yet (run 'etcdadm backup now')")
)

func integrityKey(name string) string { return IntegrityPrefix + name + ".json" }
