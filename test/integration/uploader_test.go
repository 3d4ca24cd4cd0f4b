package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestOnlyTheLeaderUploads: the same timer on three members produces
// exactly one backup per run; the others exit 0 and say why.
func TestOnlyTheLeaderUploads(t *testing.T) {
	pki := testenv.NewPKI(t)
	members := testenv.StartEtcdCluster(t, "3.6.16", 3, pki)
	fill(t, members[0].Client(t), 50)
	srv := testenv.StartMinIO(t)
	url := srv.URL("three")
	for run := 1; run <= 3; run++ {
		uploaded := 0
		for _, m := range members {
			r := runBin(t, s3Env(srv, srv.SecretKey), "etcd-snapshot-uploader", append([]string{"--store", url}, tlsArgs(m, pki)...)...)
			if r.code != 0 {
				t.Fatalf("run %d on %s: exit %d\n%s", run, m.Name, r.code, r.stderr)
			}
			switch {
			case strings.Contains(r.stderr, "uploaded backup"):
				uploaded++
			case !strings.Contains(r.stderr, "is not the leader"):
				t.Fatalf("run %d on %s: neither uploaded nor skipped:\n%s", run, m.Name, r.stderr)
			}
		}
		if uploaded != 1 {
			t.Fatalf("run %d: %d members uploaded, want exactly 1", run, uploaded)
		}
	}
	st := openURL(t, srv.URL("three"), srv)
	list, err := backup.List(ctxT(t), st)
	if err != nil || len(list) != 3 {
		t.Fatalf("after 3 runs: %d backups (%v), want 3", len(list), err)
	}
	for _, b := range list {
		if b.Meta.ClusterSpec.MemberCount != 3 {
			t.Errorf("%s records %d members, want 3", b.Name, b.Meta.ClusterSpec.MemberCount)
		}
	}
}

// TestUploaderErrors: what the operator sees when something is wrong, and
// that nothing is written.
func TestUploaderErrors(t *testing.T) {
	pki := testenv.NewPKI(t)
	m := testenv.StartEtcdCluster(t, "3.6.16", 1, pki)[0]
	srv := testenv.StartMinIO(t)
	metrics := filepath.Join(t.TempDir(), "etcd_backup.prom")
	for _, tc := range []struct {
		name   string
		env    []string
		args   []string
		code   int
		stderr string
	}{
		{"wrong secret", s3Env(srv, "not-the-secret"), []string{"--store", srv.URL("x")}, 3, "access denied"},
		{"missing bucket", s3Env(srv, srv.SecretKey), []string{"--store", strings.Replace(srv.URL("x"), srv.Bucket, "no-such-bucket", 1)}, 3, "bucket does not exist"},
		{"no credentials", nil, []string{"--store", srv.URL("x")}, 2, "AWS_ACCESS_KEY_ID"},
		{"store unreachable", s3Env(srv, srv.SecretKey), []string{"--store", "s3://etcd-backups?endpoint=http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))}, 3, "unreachable"},
		{"etcd unreachable", s3Env(srv, srv.SecretKey), []string{"--store", srv.URL("x"), "--endpoints", "https://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), "--dial-timeout", "1s", "--timeout", "5s"}, 4, "etcd"},
		{"plaintext refused", s3Env(srv, srv.SecretKey), []string{"--store", srv.URL("x"), "--endpoints", "http://127.0.0.1:2379"}, 2, "--insecure"},
		{"bad bucket name", s3Env(srv, srv.SecretKey), []string{"--store", "s3://b?endpoint=" + srv.Endpoint}, 2, "bucket"},
		{"bad retention", s3Env(srv, srv.SecretKey), []string{"--store", srv.URL("x"), "--retain-daily-days", "1"}, 2, "retain-daily-days"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(tlsArgs(m, pki), "--metrics-file", metrics), tc.args...)
			r := runBin(t, tc.env, "etcd-snapshot-uploader", args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
				t.Fatalf("exit %d, want %d with %q in:\n%s", r.code, tc.code, tc.stderr, r.stderr)
			}
		})
	}
	st := openURL(t, srv.URL("x"), srv)
	if names, err := backup.Names(ctxT(t), st); err != nil || len(names) != 0 {
		t.Fatalf("failed runs left %v (%v)", names, err)
	}
	prom, err := os.ReadFile(metrics)
	if err != nil || !strings.Contains(string(prom), "etcdadm_backup_last_run_success 0") {
		t.Fatalf("metrics after a failure:\n%s (%v)", prom, err)
	}
	// A good run flips the metrics.
	r := runBin(t, s3Env(srv, srv.SecretKey), "etcd-snapshot-uploader", append(tlsArgs(m, pki), "--store", srv.URL("x"), "--metrics-file", metrics)...)
	prom, _ = os.ReadFile(metrics)
	if r.code != 0 || !strings.Contains(string(prom), "etcdadm_backup_last_run_success 1") || !strings.Contains(string(prom), "etcdadm_backup_last_size_bytes") {
		t.Fatalf("exit %d; metrics:\n%s\n%s", r.code, prom, r.stderr)
	}
}

// TestKilledUploadLeavesNothingListed: SIGKILL the uploader mid-stream;
// nothing lists as a backup, and the next run leaves the store clean.
func TestKilledUploadLeavesNothingListed(t *testing.T) {
	pki := testenv.NewPKI(t)
	m := testenv.StartEtcdCluster(t, "3.6.16", 1, pki)[0]
	fillBig(t, m.Client(t), 96<<20)
	srv := testenv.StartMinIO(t)
	mc := srv.Client(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		url      string
		env      []string
		started  func() bool
		leftover func() int
	}{
		{
			name: "minio", url: srv.URL("crash"), env: s3Env(srv, srv.SecretKey),
			started:  func() bool { return incompleteUploads(mc, srv.Bucket) > 0 },
			leftover: func() int { return incompleteUploads(mc, srv.Bucket) },
		},
		{
			name: "file", url: "file://" + dir,
			started:  func() bool { return len(tempFiles(dir)) > 0 },
			leftover: func() int { return len(tempFiles(dir)) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tlsArgs(m, pki), "--store", tc.url)
			cmd := exec.Command(binary(t, "etcd-snapshot-uploader"), args...)
			cmd.Env = tc.env
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(time.Minute)
			for !tc.started() && time.Now().Before(deadline) && cmd.ProcessState == nil {
				time.Sleep(5 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			if !tc.started() {
				t.Fatal("the upload never started (or finished before it could be killed)")
			}
			st := openURL(t, tc.url, srv)
			if list, err := backup.List(ctxT(t), st); err != nil || len(list) != 0 {
				t.Fatalf("after SIGKILL, listed %v (%v)", names(list), err)
			}
			time.Sleep(1100 * time.Millisecond) // make the leftovers older than --stale-after
			r := runBin(t, tc.env, "etcd-snapshot-uploader", append(args, "--stale-after", "1s")...)
			if r.code != 0 {
				t.Fatalf("next run: exit %d\n%s", r.code, r.stderr)
			}
			list, err := backup.List(ctxT(t), st)
			if err != nil || len(list) != 1 {
				t.Fatalf("after the next run: %v (%v), want exactly its backup", names(list), err)
			}
			all, _ := backup.Names(ctxT(t), st)
			if len(all) != 1 || tc.leftover() != 0 {
				t.Fatalf("store not clean: backup dirs %v, %d unfinished uploads/temp files", all, tc.leftover())
			}
			if _, err := backup.Verify(ctxT(t), st, list[0].Name, ""); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func incompleteUploads(mc *minio.Client, bucket string) int {
	n := 0
	for u := range mc.ListIncompleteUploads(context.Background(), bucket, "", true) {
		if u.Err == nil {
			n++
		}
	}
	return n
}

func tempFiles(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".tmp-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}
