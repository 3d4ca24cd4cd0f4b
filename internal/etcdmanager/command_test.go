package etcdmanager

import (
	"strings"
	"testing"
	"time"
)

func TestParseCommand(t *testing.T) {
	want := RestoreCommand{Timestamp: 1752000000123456789, ClusterSpec: ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.13"}, Backup: "2026-07-08T09:20:30Z-000001"}
	for name, in := range map[string]string{
		// As etcd-manager-ctl restore-backup writes it.
		"etcd-manager-ctl": `{"timestamp":"1752000000123456789","restoreBackup":{"clusterSpec":{"memberCount":3,"etcdVersion":"3.6.13"},"backup":"2026-07-08T09:20:30Z-000001"}}`,
		// protojson also accepts these.
		"snake_case and a numeric timestamp": "{\n \"timestamp\": 1752000000123456789,\n \"restore_backup\": {\"cluster_spec\": {\"member_count\": 3, \"etcd_version\": \"3.6.13\"}, \"backup\": \"2026-07-08T09:20:30Z-000001\"}\n}",
	} {
		got, ok, err := ParseCommand([]byte(in))
		if err != nil || !ok || got != want {
			t.Errorf("%s: %+v ok=%v err=%v, want %+v", name, got, ok, err, want)
		}
	}
	// Ours parses with the same rules, and says what etcd-manager-ctl says.
	b, err := MarshalRestoreCommand(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"timestamp": "1752000000123456789"`) || !strings.Contains(string(b), `"restoreBackup"`) {
		t.Errorf("our command is not protobuf-JSON as etcd-manager writes it:\n%s", b)
	}
	if got, ok, err := ParseCommand(b); err != nil || !ok || got != want {
		t.Errorf("round trip: %+v %v %v", got, ok, err)
	}
	// Other commands are not restores; broken ones say so.
	if _, ok, err := ParseCommand([]byte(`{"timestamp":"1","somethingElse":{}}`)); ok || err != nil {
		t.Errorf("another command: ok=%v err=%v", ok, err)
	}
	for _, bad := range []string{`{`, `{"restoreBackup":{}}`, `{"timestamp":"soon","restoreBackup":{"backup":"x"}}`} {
		if _, _, err := ParseCommand([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	key := CommandKey(time.Date(2026, 7, 8, 9, 20, 31, 0, time.UTC))
	if key != "control/2026-07-08T09:20:31Z-000000/_command.json" || CommandID(key) != "2026-07-08T09:20:31Z-000000" {
		t.Errorf("key %s, id %s", key, CommandID(key))
	}
}
