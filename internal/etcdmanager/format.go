// Package etcdmanager reads and writes the project-neutral files that
// etcd-manager (kops) keeps in a backup store, byte for byte as it writes
// them, so clusters and backups move between the two tools. etcd-manager
// parses these strictly: never add fields; our own records live under
// etcdadm/ in the store.
package etcdmanager

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Names of etcd-manager's files in a store.
const (
	MetaFile           = "_etcd_backup.meta"
	DataFile           = "etcd.backup.gz"
	ClusterSpecKey     = "control/etcd-cluster-spec"
	ClusterCreatedKey  = "control/etcd-cluster-created"
	backupNameTimeForm = time.RFC3339
)

// ClusterSpec is etcd-manager's EtcdClusterSpec.
type ClusterSpec struct {
	MemberCount int32  `json:"memberCount"`
	EtcdVersion string `json:"etcdVersion"`
}

// BackupInfo is etcd-manager's BackupInfo, the _etcd_backup.meta file.
// Timestamp is Unix seconds.
type BackupInfo struct {
	EtcdVersion string       `json:"etcdVersion"`
	Timestamp   int64        `json:"timestamp"`
	ClusterSpec *ClusterSpec `json:"clusterSpec,omitempty"`
}

// Protobuf-JSON, as etcd-manager writes it: two-space indent,
// lowerCamelCase, int64 as a quoted string, int32 as a number.
type backupInfoJSON struct {
	EtcdVersion string       `json:"etcdVersion,omitempty"`
	Timestamp   string       `json:"timestamp,omitempty"`
	ClusterSpec *ClusterSpec `json:"clusterSpec,omitempty"`
}

// MarshalMeta renders the meta file.
func MarshalMeta(bi BackupInfo) ([]byte, error) {
	j := backupInfoJSON{EtcdVersion: bi.EtcdVersion, ClusterSpec: bi.ClusterSpec}
	if bi.Timestamp != 0 {
		j.Timestamp = strconv.FormatInt(bi.Timestamp, 10)
	}
	return json.MarshalIndent(j, "", "  ")
}

// ParseMeta reads a meta file. It accepts the timestamp quoted (protobuf
// JSON) or as a number, as etcd-manager's parser does, and rejects unknown
// fields, so anything it accepts etcd-manager accepts too.
func ParseMeta(b []byte) (BackupInfo, error) {
	var raw struct {
		EtcdVersion string          `json:"etcdVersion"`
		Timestamp   json.RawMessage `json:"timestamp"`
		ClusterSpec *ClusterSpec    `json:"clusterSpec"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return BackupInfo{}, fmt.Errorf("%s: %w", MetaFile, err)
	}
	bi := BackupInfo{EtcdVersion: raw.EtcdVersion, ClusterSpec: raw.ClusterSpec}
	if len(raw.Timestamp) > 0 {
		ts := strings.Trim(string(raw.Timestamp), `"`)
		v, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return BackupInfo{}, fmt.Errorf("%s: timestamp %s is not a number of seconds", MetaFile, raw.Timestamp)
		}
		bi.Timestamp = v
	}
	if bi.EtcdVersion == "" {
		return BackupInfo{}, fmt.Errorf("%s: no etcdVersion", MetaFile)
	}
	return bi, nil
}

// MarshalClusterSpec renders control/etcd-cluster-spec.
func MarshalClusterSpec(s ClusterSpec) ([]byte, error) {
	return json.MarshalIndent(s, "", "  ")
}

// ParseClusterSpec reads control/etcd-cluster-spec strictly.
func ParseClusterSpec(b []byte) (ClusterSpec, error) {
	var s ClusterSpec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return ClusterSpec{}, fmt.Errorf("%s: %w", ClusterSpecKey, err)
	}
	return s, nil
}

// BackupName is the name of a backup taken at t with sequence number seq:
// "2024-01-01T00:00:00Z-000001". Names sort by time as strings.
func BackupName(t time.Time, seq int) string {
	return fmt.Sprintf("%s-%06d", t.UTC().Format(backupNameTimeForm), seq)
}

// ParseBackupName returns the time and sequence of a backup name, or
// ok=false for anything else in the store (control/, etcdadm/, ...).
func ParseBackupName(name string) (t time.Time, seq int, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || len(name)-i-1 != 6 {
		return time.Time{}, 0, false
	}
	seq, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return time.Time{}, 0, false
	}
	t, err = time.Parse(backupNameTimeForm, name[:i])
	if err != nil {
		return time.Time{}, 0, false
	}
	return t.UTC(), seq, true
}
