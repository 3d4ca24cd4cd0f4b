package etcdmanager

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ControlPrefix holds etcd-manager's control files: the spec, the created
// marker and one folder per command.
const ControlPrefix = "control/"

// CommandFile is the name of a command in its folder.
const CommandFile = "_command.json"

// RestoreCommand is etcd-manager's Command with a RestoreBackup: rebuild
// the cluster from Backup. etcd-manager-ctl restore-backup writes it;
// etcd-manager deletes it when done.
type RestoreCommand struct {
	// Timestamp is Unix nanoseconds (an int64: a quoted string in
	// protobuf-JSON).
	Timestamp   int64
	ClusterSpec ClusterSpec
	Backup      string
}

// CommandKey is where a command written at t lives:
// control/<RFC3339 UTC>-000000/_command.json, as etcd-manager-ctl names it.
func CommandKey(t time.Time) string {
	return ControlPrefix + BackupName(t, 0) + "/" + CommandFile
}

// MarshalRestoreCommand renders a command as etcd-manager-ctl does:
// protobuf-JSON, lowerCamelCase, the int64 timestamp quoted.
func MarshalRestoreCommand(c RestoreCommand) ([]byte, error) {
	spec := c.ClusterSpec
	return json.MarshalIndent(struct {
		Timestamp     string `json:"timestamp"`
		RestoreBackup struct {
			ClusterSpec *ClusterSpec `json:"clusterSpec"`
			Backup      string       `json:"backup"`
		} `json:"restoreBackup"`
	}{Timestamp: strconv.FormatInt(c.Timestamp, 10), RestoreBackup: struct {
		ClusterSpec *ClusterSpec `json:"clusterSpec"`
		Backup      string       `json:"backup"`
	}{&spec, c.Backup}}, "", "  ")
}

// ParseCommand reads a command the way protobuf-JSON does: field names in
// lowerCamelCase or snake_case, the timestamp quoted or as a number,
// whitespace as it comes. ok is false for a command that is not a restore
// (etcd-manager has others); a malformed file is an error naming the fix.
func ParseCommand(b []byte) (c RestoreCommand, ok bool, err error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return c, false, fmt.Errorf("%s: %w", CommandFile, err)
	}
	field := func(m map[string]json.RawMessage, camel, snake string) (json.RawMessage, bool) {
		if v, ok := m[camel]; ok {
			return v, true
		}
		v, ok := m[snake]
		return v, ok
	}
	if ts, ok := field(raw, "timestamp", "timestamp"); ok {
		s := strings.Trim(string(ts), `"`)
		if c.Timestamp, err = strconv.ParseInt(s, 10, 64); err != nil {
			return c, false, fmt.Errorf("%s: timestamp %s is not a number of nanoseconds", CommandFile, ts)
		}
	}
	rb, isRestore := field(raw, "restoreBackup", "restore_backup")
	if !isRestore {
		return c, false, nil
	}
	var r map[string]json.RawMessage
	if err := json.Unmarshal(rb, &r); err != nil {
		return c, false, fmt.Errorf("%s: restoreBackup: %w", CommandFile, err)
	}
	if v, ok := field(r, "backup", "backup"); ok {
		if err := json.Unmarshal(v, &c.Backup); err != nil {
			return c, false, fmt.Errorf("%s: restoreBackup.backup: %w", CommandFile, err)
		}
	}
	if c.Backup == "" {
		return c, false, fmt.Errorf("%s: restoreBackup names no backup", CommandFile)
	}
	if v, ok := field(r, "clusterSpec", "cluster_spec"); ok {
		var s map[string]json.RawMessage
		if err := json.Unmarshal(v, &s); err != nil {
			return c, false, fmt.Errorf("%s: clusterSpec: %w", CommandFile, err)
		}
		if mc, ok := field(s, "memberCount", "member_count"); ok {
			n, err := strconv.ParseInt(strings.Trim(string(mc), `"`), 10, 32)
			if err != nil {
				return c, false, fmt.Errorf("%s: clusterSpec.memberCount %s: %w", CommandFile, mc, err)
			}
			c.ClusterSpec.MemberCount = int32(n)
		}
		if ev, ok := field(s, "etcdVersion", "etcd_version"); ok {
			if err := json.Unmarshal(ev, &c.ClusterSpec.EtcdVersion); err != nil {
				return c, false, fmt.Errorf("%s: clusterSpec.etcdVersion: %w", CommandFile, err)
			}
		}
	}
	return c, true, nil
}

// CommandID is a command's folder name (its key without the file), the
// id our own record of it is kept under.
func CommandID(key string) string {
	return strings.TrimSuffix(strings.TrimPrefix(key, ControlPrefix), "/"+CommandFile)
}
