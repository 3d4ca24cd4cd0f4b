package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/snapshotdb"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestRestoreLocalCrash is restore-local's row of the crash-point sweep
// (the rest run on nspawn hosts, test/e2e/crash_test.go): etcdadm built
// with -tags crashpoints is killed with SIGKILL after it built the data
// and before it moved it into place. The data directory is not there
// (never half of one); run again, it restores every key and leaves none
// of the crashed run's work behind.
func TestRestoreLocalCrash(t *testing.T) {
	pki := testenv.NewPKI(t)
	m := testenv.StartEtcdCluster(t, "3.6.16", 1, pki)[0]
	want := fill(t, m.Client(t), 200)
	url := "file://" + t.TempDir()
	if r := runBin(t, nil, "etcdadm", append([]string{"backup", "now", "--store", url}, tlsArgs(m, pki)...)...); r.code != 0 {
		t.Fatalf("backup now: %+v", r)
	}

	bin := filepath.Join(t.TempDir(), "etcdadm")
	_, file, _, _ := runtime.Caller(0)
	build := exec.Command("go", "build", "-tags", "crashpoints", "-o", bin, "./cmd/etcdadm")
	build.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags crashpoints: %v\n%s", err, out)
	}
	arm := filepath.Join(t.TempDir(), "crashpoint")
	os.WriteFile(arm, []byte("* "+crashpoint.LocalStaged+"\n"), 0o644)
	parent := t.TempDir()
	dataDir := filepath.Join(parent, "data")
	restoreLocal := func() (*exec.Cmd, string, error) {
		cmd := exec.Command(bin, "restore-local", "latest", "--store", url, "--data-dir", dataDir, "--name", "a", "--initial-cluster", "a=https://127.0.0.1:2380")
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "ETCDADM_CRASHPOINT_FILE=" + arm}
		out, err := cmd.CombinedOutput()
		return cmd, string(out), err
	}

	cmd, out, err := restoreLocal()
	if err == nil || !cmd.ProcessState.Sys().(syscall.WaitStatus).Signaled() || !strings.Contains(out, "CRASHPOINT "+crashpoint.LocalStaged) {
		t.Fatalf("restore-local was not killed at %s: %v\n%s", crashpoint.LocalStaged, err, out)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("after the crash the data directory exists (%v): a restore must appear whole or not at all", err)
	}

	os.Remove(arm) // the next run goes through
	if _, out, err := restoreLocal(); err != nil {
		t.Fatalf("restore-local after the crash: %v\n%s", err, out)
	}
	stats, err := snapshotdb.Inspect(filepath.Join(dataDir, "member", "snap", "db"))
	if err != nil || stats.LiveKeys < int64(len(want.kv)) {
		t.Fatalf("restored data: %+v %v; want at least the %d keys written", stats, err, len(want.kv))
	}
	left, _ := filepath.Glob(filepath.Join(parent, ".etcdadm-restore-*"))
	if len(left) != 0 {
		t.Errorf("the crashed run's work is still there: %v", left)
	}
}
