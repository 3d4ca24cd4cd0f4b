package etcdmanager

import (
	"testing"
	"time"
)

// The meta file exactly as etcd-manager writes it (protobuf JSON).
const etcdManagerMeta = `{
  "etcdVersion": "3.5.9",
  "timestamp": "1704067200",
  "clusterSpec": {
    "memberCount": 3,
    "etcdVersion": "3.5.9"
  }
}`

func TestMetaRoundTripIsByteExact(t *testing.T) {
	bi, err := ParseMeta([]byte(etcdManagerMeta))
	if err != nil {
		t.Fatal(err)
	}
	if bi.Timestamp != 1704067200 || bi.ClusterSpec.MemberCount != 3 {
		t.Fatalf("parsed %+v", bi)
	}
	out, err := MarshalMeta(bi)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != etcdManagerMeta {
		t.Fatalf("re-rendered meta differs:\n%s\nwant:\n%s", out, etcdManagerMeta)
	}
}

func TestParseMetaRejects(t *testing.T) {
	for name, in := range map[string]string{
		"extra field": `{"etcdVersion":"3.5.9","sha256":"x"}`,
		"no version":  `{"timestamp":"1"}`,
		"bad time":    `{"etcdVersion":"3.5.9","timestamp":"yesterday"}`,
		"not json":    `etcdVersion: 3.5.9`,
	} {
		if _, err := ParseMeta([]byte(in)); err == nil {
			t.Errorf("%s: accepted %s", name, in)
		}
	}
	if _, err := ParseMeta([]byte(`{"etcdVersion":"3.5.9","timestamp":1704067200}`)); err != nil {
		t.Errorf("numeric timestamp: %v", err)
	}
}

func TestBackupNames(t *testing.T) {
	ts := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	n := BackupName(ts, 7)
	if n != "2024-01-01T00:00:00Z-000007" {
		t.Fatalf("name %q", n)
	}
	got, seq, ok := ParseBackupName(n)
	if !ok || !got.Equal(ts) || seq != 7 {
		t.Fatalf("parse %q: %v %d %v", n, got, seq, ok)
	}
	for _, bad := range []string{"control", "etcdadm", "2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z-1", "x-000001"} {
		if _, _, ok := ParseBackupName(bad); ok {
			t.Errorf("%q parsed as a backup name", bad)
		}
	}
}
