package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestCorruptionChecksOn: etcd's own corruption checks, off by default in
// etcd, run on every version we support with exactly the etcd.env member
// join writes: a member restarted on its data compares its hash with the
// peers' before it serves, and the leader compares the compaction hashes
// (every second here: the operator's setting, in the plain spelling that
// 3.5 does not know). etcd's own log says so, and names no setting it does
// not know or has deprecated.
func TestCorruptionChecksOn(t *testing.T) {
	for _, v := range testenv.EtcdVersions() {
		t.Run(v, func(t *testing.T) {
			st := newCluster(t, 1, v)
			h := newHost(t, st, "etcd-a", v)
			settings := filepath.Join(h.Cfg.Root, member.SettingsFile)
			if err := os.MkdirAll(filepath.Dir(settings), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(settings, []byte("ETCD_COMPACT_HASH_CHECK_TIME=1s\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			h.mustJoin(t, member.Found)
			// The initial check runs only for a member that has data.
			if err := h.Runner.Stop(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			h.mustJoin(t, member.Rejoin)
			want := []string{"starting initial corruption check", "initial corruption checking passed; no corruption", "starting compact hash check"}
			var log string
			for deadline := time.Now().Add(15 * time.Second); ; {
				b, err := os.ReadFile(h.Runner.LogFile)
				if err != nil {
					t.Fatal(err)
				}
				log = string(b)
				if missing := missingLines(log, want); len(missing) == 0 {
					break
				} else if time.Now().After(deadline) {
					env, _ := os.ReadFile(h.Runner.EnvFile)
					t.Fatalf("etcd %s never logged %q; etcd.env:\n%s", v, missing, env)
				}
				time.Sleep(200 * time.Millisecond)
			}
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, "unrecognized environment variable") || strings.Contains(l, "deprecated") {
					t.Errorf("etcd %s: %s", v, l)
				}
			}
		})
	}
}

func missingLines(log string, want []string) []string {
	var missing []string
	for _, w := range want {
		if !strings.Contains(log, w) {
			missing = append(missing, w)
		}
	}
	return missing
}
