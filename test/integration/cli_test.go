package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestEtcdadmBackupCommands drives the operator CLI the way the README and
// --help describe it.
func TestEtcdadmBackupCommands(t *testing.T) {
	pki := testenv.NewPKI(t)
	m := testenv.StartEtcdCluster(t, "3.7.3", 1, pki)[0]
	want := fill(t, m.Client(t), 100)
	dir := t.TempDir()
	url := "file://" + dir
	etcdadm := func(args ...string) result { return runBin(t, nil, "etcdadm", args...) }

	if r := etcdadm("backup", "list", "--store", url); r.code != 0 || !strings.Contains(r.stdout, "no backups") {
		t.Fatalf("list of an empty store: %+v", r)
	}
	if r := etcdadm("backup", "verify", "latest", "--store", url); r.code == 0 || !strings.Contains(r.stderr, "no backups yet") {
		t.Fatalf("verify in an empty store: %+v", r)
	}
	now := etcdadm(append([]string{"backup", "now", "--store", url}, tlsArgs(m, pki)...)...)
	if now.code != 0 || !strings.Contains(now.stdout, "etcd 3.7.3") {
		t.Fatalf("backup now: %+v", now)
	}
	r := etcdadm("backup", "list", "--store", url, "-o", "json")
	var rows []struct{ Name, Verified, EtcdVersion string }
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 || rows[0].Verified != "sha256" || rows[0].EtcdVersion != "3.7.3" {
		t.Fatalf("list -o json: %v %+v", err, r)
	}
	name := rows[0].Name
	if r := etcdadm("backup", "list", "--store", url); !strings.Contains(r.stdout, name) || !strings.Contains(r.stdout, "VERIFIED") {
		t.Fatalf("list table: %+v", r)
	}
	r = etcdadm("backup", "verify", name, "--restore-test", "--store", url, "--scratch-dir", t.TempDir())
	if r.code != 0 || !strings.Contains(r.stdout, "restore test: OK") || !strings.Contains(r.stdout, " keys") {
		t.Fatalf("verify --restore-test: %+v", r)
	}
	if r := etcdadm("backup", "verify", "2020-01-01T00:00:00Z-000001", "--store", url); r.code == 0 || !strings.Contains(r.stderr, "no such backup") {
		t.Fatalf("verify of an unknown backup: %+v", r)
	}

	// restore-local refuses a non-empty data dir and leaves it alone.
	occupied := filepath.Join(t.TempDir(), "data")
	os.MkdirAll(filepath.Join(occupied, "member"), 0o700)
	os.WriteFile(filepath.Join(occupied, "member", "precious"), []byte("x"), 0o600)
	r = etcdadm("restore-local", "latest", "--store", url, "--data-dir", occupied, "--name", "a", "--initial-cluster", "a=https://127.0.0.1:2380")
	if r.code == 0 || !strings.Contains(r.stderr, "not empty") || !strings.Contains(r.stderr, "mv ") {
		t.Fatalf("restore into an occupied dir: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(occupied, "member", "precious")); err != nil || string(b) != "x" {
		t.Fatal("restore touched an occupied data dir")
	}
	// A newer backup whose meta file does not parse is listed as
	// unreadable and passed over by 'latest'.
	bad := "2099-01-01T00:00:00Z-000001"
	os.MkdirAll(filepath.Join(dir, bad), 0o755)
	os.WriteFile(filepath.Join(dir, bad, etcdmanager.MetaFile), []byte("{truncated"), 0o644)
	if r := etcdadm("backup", "list", "--store", url); r.code != 0 || !strings.Contains(r.stdout, name) || !strings.Contains(r.stdout, bad) || !strings.Contains(r.stdout, "UNREADABLE") {
		t.Fatalf("list with an unreadable backup: %+v", r)
	}
	fresh := filepath.Join(t.TempDir(), "data")
	r = etcdadm("restore-local", "latest", "--store", url, "--data-dir", fresh, "--name", "a", "--initial-cluster", "a=https://127.0.0.1:2380")
	if r.code != 0 || !strings.Contains(r.stdout, "keys") || !strings.Contains(r.stdout, "restored backup "+name) {
		t.Fatalf("restore-local latest (the newest readable backup %s): %+v", name, r)
	}
	if len(want.kv) == 0 {
		t.Fatal("no data written")
	}

	// A corrupt backup: verify exits 1 and says not to restore from it.
	gz := filepath.Join(dir, name, etcdmanager.DataFile)
	b, _ := os.ReadFile(gz)
	b[len(b)/2] ^= 1
	os.WriteFile(gz, b, 0o644)
	r = etcdadm("backup", "verify", name, "--store", url)
	if r.code != 1 || !strings.Contains(r.stderr, "corrupt") || !strings.Contains(r.stderr, "Do not restore") {
		t.Fatalf("verify of a corrupt backup: %+v", r)
	}
	if r := etcdadm("backup", "--help"); !strings.Contains(r.stdout, "verify") {
		t.Fatalf("help: %+v", r)
	}
}
