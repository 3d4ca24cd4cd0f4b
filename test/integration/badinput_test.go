package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// badInput is one row of the bad-input matrix: a binary run with input
// that is wrong in one way. It must exit with the documented code, say
// what is wrong and what fixes it (every want, case-insensitive, in its
// output), and change nothing: the store and the host directory hash the
// same before and after.
type badInput struct {
	name string
	bin  string
	args []string
	env  []string
	code int
	want []string
}

// TestBadInputMatrix: per binary and per etcdadm command, malformed or
// truncated spec, settings and command JSON; corrupt, truncated and
// foreign backups; wrong S3 credentials, a missing bucket, an unreachable
// store, a read-only store; a wrong CA and an expired certificate;
// unknown flags, bad flag values and bad ETCDADM_* values.
func TestBadInputMatrix(t *testing.T) {
	ctx := ctxT(t)
	v := testenv.EtcdVersions()[1]
	ca := testenv.NewPKI(t)
	m := testenv.StartEtcdCluster(t, v, 1, ca)[0]
	s3 := testenv.StartMinIO(t)

	// A good store: spec, CA, one good backup and three bad ones.
	dir := t.TempDir()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterspec.Seed(ctx, st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: v}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Init(ctx, st, pki.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	good := upload(t, m, st).Backup
	truncated, corrupt, foreign := upload(t, m, st).Backup, upload(t, m, st).Backup, upload(t, m, st).Backup
	gz, _ := os.ReadFile(filepath.Join(dir, good, etcdmanager.DataFile))
	os.WriteFile(filepath.Join(dir, truncated, etcdmanager.DataFile), gz[:len(gz)/2], 0o644)
	flipped := append([]byte(nil), gz...)
	flipped[len(flipped)/2] ^= 0xff
	os.WriteFile(filepath.Join(dir, corrupt, etcdmanager.DataFile), flipped, 0o644)
	os.WriteFile(filepath.Join(dir, foreign, etcdmanager.DataFile), []byte("PK\x03\x04 a zip file, not a backup"), 0o644)
	url := "file://" + dir

	// Stores with one malformed file each.
	broken := func(key, content string) string {
		d := t.TempDir()
		if err := os.CopyFS(d, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(filepath.Join(d, key)), 0o755)
		if err := os.WriteFile(filepath.Join(d, key), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return "file://" + d
	}
	badSpec := broken(etcdmanager.ClusterSpecKey, `{"memberCount": 3, "etcdVers`)
	badSettings := broken("etcdadm/settings.json", `{"clusterName": 7}`)
	badCommand := broken("control/2026-07-08T09:20:31Z-000000/_command.json", `{"restoreBackup":{"backup":`)
	// Stores where a request would contradict what is in force.
	paused := broken("etcdadm/paused.json", `{"by":"alice@bastion","since":"2026-11-23T22:00:00Z","reason":"replacing a disk"}`)
	tornDown := broken("etcdadm/teardown.json", `{"at":"2026-11-23T22:00:00Z"}`)
	recovering := broken("etcdadm/recover.json", `{"id":"20261123T220000Z","member":"etcd-a","at":"2026-11-23T22:00:00Z","state":"running"}`)
	readOnly := t.TempDir()
	os.CopyFS(readOnly, os.DirFS(dir))
	makeReadOnly(t, readOnly)

	// Certificates: another CA's client certificate, and an expired one.
	other := testenv.NewPKI(t)
	expired := testenv.ExpiredClient(t, ca)
	tls := func(p *testenv.PKI, cert, key string) []string {
		return []string{"--endpoints", m.Endpoint(), "--cacert", p.CACert, "--cert", cert, "--key", key, "--dial-timeout", "2s"}
	}
	root := t.TempDir()  // a host's root for the binaries that take --root
	empty := t.TempDir() // a store nobody seeded
	renderArgs := func(more ...string) []string {
		return append([]string{"render", "--variant", "flatcar", "--etcd-version", v, "--binaries", "baked", "--store", url}, more...)
	}
	creds := s3Env(s3, s3.SecretKey)

	rows := []badInput{
		// etcdadm: flags and values.
		{name: "unknown flag", bin: "etcdadm", args: []string{"status", "--bogus"}, code: 2, want: []string{"bogus", "--help"}},
		{name: "unknown command", bin: "etcdadm", args: []string{"statuss"}, code: 2, want: []string{"unknown command 'statuss'", "--help"}},
		{name: "bad member count", bin: "etcdadm", args: []string{"spec", "set", "--members", "9", "--store", url}, code: 2, want: []string{"9", "1 to 7"}},
		{name: "member count not a number", bin: "etcdadm", args: []string{"spec", "set", "--members", "three", "--store", url}, code: 2, want: []string{"three", "members", "--help"}},
		{name: "unknown version", bin: "etcdadm", args: []string{"spec", "set", "--version", "3.9.1", "--store", url}, code: 2, want: []string{"3.9.1"}},
		{name: "bad log level", bin: "etcdadm", args: []string{"backup", "list", "--store", url}, env: []string{"ETCDADM_LOG_LEVEL=loud"}, code: 2, want: []string{"loud", "debug, info, warn or error"}},
		{name: "bad store URL", bin: "etcdadm", args: []string{"backup", "list", "--store", "ftp://x/y"}, code: 2, want: []string{"ftp", "s3://", "file://"}},
		{name: "no store", bin: "etcdadm", args: []string{"backup", "list"}, code: 2, want: []string{"flag \"store\" not set", "--help"}},
		// Backups.
		{name: "unknown backup", bin: "etcdadm", args: []string{"backup", "verify", "2020-01-01T00:00:00Z-000001", "--store", url}, code: 1, want: []string{"no such backup", "backup list"}},
		{name: "truncated backup", bin: "etcdadm", args: []string{"backup", "verify", truncated, "--store", url}, code: 1, want: []string{"corrupt", truncated}},
		{name: "corrupt backup", bin: "etcdadm", args: []string{"backup", "verify", corrupt, "--store", url}, code: 1, want: []string{"corrupt", corrupt}},
		{name: "foreign backup", bin: "etcdadm", args: []string{"backup", "verify", foreign, "--store", url}, code: 1, want: []string{"not gzip", foreign}},
		{name: "restore of a corrupt backup", bin: "etcdadm", args: []string{"restore", corrupt, "--yes", "--store", url}, code: 2, want: []string{"corrupt", "Nothing was changed"}},
		{name: "restore-local of a truncated backup", bin: "etcdadm", args: []string{"restore-local", truncated, "--store", url, "--data-dir", filepath.Join(root, "data"), "--name", "a", "--initial-cluster", "a=https://127.0.0.1:2380"}, code: 1, want: []string{"corrupt", truncated}},
		// Store files.
		{name: "truncated spec", bin: "etcdadm", args: []string{"spec", "show", "--store", badSpec}, code: 1, want: []string{"invalid cluster spec", "seed --force"}},
		{name: "bad settings", bin: "etcdadm", args: []string{"spec", "show", "--store", badSettings}, code: 1, want: []string{"settings.json", "seed --force"}},
		{name: "truncated restore command", bin: "etcdadm", args: []string{"restore", good, "--yes", "--store", badCommand}, code: 1, want: []string{"_command.json", "unexpected end of JSON", "delete it"}},
		// The store itself.
		{name: "wrong S3 credentials", bin: "etcdadm", args: []string{"backup", "list", "--store", s3.URL("")}, env: s3Env(s3, "wrong-secret"), code: 1, want: []string{"access denied", "check the credentials"}},
		{name: "missing bucket", bin: "etcdadm", args: []string{"backup", "list", "--store", strings.Replace(s3.URL(""), s3.Bucket, "no-such-bucket", 1)}, env: creds, code: 1, want: []string{"bucket does not exist", "create it"}},
		{name: "unreachable store", bin: "etcdadm", args: []string{"backup", "list", "--store", "s3://backups?endpoint=http://127.0.0.1:1&region=us-east-1"}, env: creds, code: 1, want: []string{"127.0.0.1:1", "connection refused"}},
		{name: "read-only store", bin: "etcdadm", args: []string{"spec", "set", "--members", "5", "--store", "file://" + readOnly}, code: 2, want: []string{"read-only file system", "Nothing was changed"}},
		// TLS.
		{name: "another CA", bin: "etcdadm", args: append([]string{"backup", "now", "--store", url}, tls(other, other.ClientCert, other.ClientKey)...), code: 1, want: []string{"certificate signed by unknown authority", "--cacert is not the CA"}},
		{name: "expired client certificate", bin: "etcdadm", args: append([]string{"backup", "now", "--store", url}, tls(ca, expired.Cert, expired.Key)...), code: 1, want: []string{"expired at", "pki issue-client"}},
		// The other binaries.
		{name: "uploader: bad timeout", bin: "etcd-snapshot-uploader", args: []string{"--store", url}, env: []string{"ETCDADM_UPLOAD_TIMEOUT=soon"}, code: 2, want: []string{"soon", "ETCDADM_UPLOAD_TIMEOUT"}},
		{name: "uploader: unknown flag", bin: "etcd-snapshot-uploader", args: []string{"--store", url, "--bogus"}, code: 2, want: []string{"bogus", "--help"}},
		{name: "uploader: truncated spec", bin: "etcd-snapshot-uploader", args: append([]string{"--store", badSpec}, tls(ca, ca.ClientCert, ca.ClientKey)...), code: 3, want: []string{"etcd-cluster-spec", "seed --force"}},
		{name: "uploader: another CA", bin: "etcd-snapshot-uploader", args: append([]string{"--store", url}, tls(other, other.ClientCert, other.ClientKey)...), code: 4, want: []string{"unknown authority", "--cacert is not the CA"}},
		{name: "member join: bad name", bin: "etcd-member-join", args: []string{"--store", url, "--root", root, "--name", "Etcd_A", "--ip", "127.0.0.1", "--etcd-user="}, code: 2, want: []string{"Etcd_A", "a-z, 0-9"}},
		{name: "member join: no identity on a pool host", bin: "etcd-member-join", args: []string{"--store", url, "--root", root, "--ip", "127.0.0.1", "--etcd-user="}, env: []string{"ETCDADM_VOLUME_PROVIDER=pool"}, code: 1, want: []string{"identity.env", "etcd-volume-attach"}},
		{name: "member join: bad timeout", bin: "etcd-member-join", args: []string{"--store", url, "--root", root}, env: []string{"ETCDADM_JOIN_TIMEOUT=1x"}, code: 2, want: []string{"1x"}},
		{name: "switcher: unknown flag", bin: "etcd-version-switcher", args: []string{"--bogus"}, code: 2, want: []string{"bogus", "--help"}},
		{name: "volume attach: bad provider", bin: "etcd-volume-attach", args: []string{"--store", url, "--root", root, "--provider", "nfs"}, code: 2, want: []string{"nfs", "none, local or pool"}},
		{name: "volume attach: bad lease", bin: "etcd-volume-attach", args: []string{"--store", url, "--root", root, "--provider", "pool"}, env: []string{"ETCDADM_VOLUME_LEASE=forever"}, code: 2, want: []string{"forever"}},
		// Issue 26 finding 2: settings and store URLs checked at the edge.
		{name: "render: misspelt setting", bin: "etcdadm", args: renderArgs("--env", "ETCDADM_VOLUME_PROVIDR=pool"), code: 2, want: []string{"ETCDADM_VOLUME_PROVIDR", "did you mean ETCDADM_VOLUME_PROVIDER?", "Nothing was written"}},
		{name: "render: unknown volume provider", bin: "etcdadm", args: renderArgs("--env", "ETCDADM_VOLUME_PROVIDER=ebs"), code: 2, want: []string{"ETCDADM_VOLUME_PROVIDER=ebs", "none, local or pool"}},
		{name: "render: lease too short", bin: "etcdadm", args: renderArgs("--env", "ETCDADM_VOLUME_LEASE=5s"), code: 2, want: []string{"ETCDADM_VOLUME_LEASE=5s", "at least 10s"}},
		{name: "render: size not a size", bin: "etcdadm", args: renderArgs("--env", "ETCDADM_VOLUME_SIZE=lots"), code: 2, want: []string{"ETCDADM_VOLUME_SIZE=lots", "8G"}},
		{name: "render: timeout not a duration", bin: "etcdadm", args: renderArgs("--env", "ETCDADM_JOIN_TIMEOUT=soon"), code: 2, want: []string{"ETCDADM_JOIN_TIMEOUT=soon", "a duration"}},
		{name: "render: misspelt store parameter", bin: "etcdadm", args: []string{"render", "--variant", "flatcar", "--etcd-version", v, "--binaries", "baked", "--store", "s3://backups/p?endpint=https://minio:9000", "--s3-credentials-file", filepath.Join(root, "none")}, code: 2, want: []string{"endpint", "endpoint, region, path-style, ca-file"}},
		{name: "misspelt store parameter", bin: "etcdadm", args: []string{"backup", "list", "--store", "s3://backups/p?endpint=https://minio:9000"}, env: creds, code: 2, want: []string{"endpint", "endpoint, region, path-style, ca-file"}},
		// Issue 26 finding 3: seed checks every field before writing.
		{name: "seed: bad DNS suffix", bin: "etcdadm", args: []string{"seed", "--store", "file://" + empty, "--members", "3", "--version", v, "--dns-suffix", "has space..x"}, code: 2, want: []string{"has space..x", "a DNS name", "Nothing was written"}},
		{name: "seed: bad cluster name", bin: "etcdadm", args: []string{"seed", "--store", "file://" + empty, "--members", "3", "--version", v, "--cluster-name", "a b/c"}, code: 2, want: []string{"a b/c", "DNS label", "Nothing was written"}},
		{name: "seed: unreleased version", bin: "etcdadm", args: []string{"seed", "--store", "file://" + empty, "--members", "3", "--version", "3.6.999"}, code: 2, want: []string{"3.6.999", "not a release this etcdadm knows", "3.6.16", "release push", "Nothing was written"}},
		{name: "spec set: unreleased version", bin: "etcdadm", args: []string{"spec", "set", "--version", "3.6.999", "--store", url}, code: 2, want: []string{"3.6.999", "Nothing was changed"}},
		// Issue 26 finding 4: requests that contradict one in force.
		{name: "restore while paused", bin: "etcdadm", args: []string{"restore", good, "--yes", "--store", paused}, code: 2, want: []string{"paused by alice@bastion", "replacing a disk", "etcdadm resume", "Nothing was changed"}},
		{name: "restore after a teardown", bin: "etcdadm", args: []string{"restore", good, "--yes", "--store", tornDown}, code: 2, want: []string{"torn down at 2026-11-23T22:00:00Z", "seed --force", "Nothing was changed"}},
		{name: "restore during a recovery", bin: "etcdadm", args: []string{"restore", good, "--yes", "--store", recovering}, code: 2, want: []string{"recovery from member etcd-a is in progress", "let it finish", "Nothing was changed"}},
		{name: "teardown while paused", bin: "etcdadm", args: []string{"teardown", "--yes", "--store", paused}, code: 2, want: []string{"paused", "etcdadm resume", "Nothing was changed"}},
		{name: "restore --cancel with a backup", bin: "etcdadm", args: []string{"restore", "--cancel", good, "--store", url}, code: 2, want: []string{"takes no BACKUP"}},
		// etcdadm: one row per command not covered above.
		{name: "completion: unknown shell", bin: "etcdadm", args: []string{"completion", "tcsh"}, code: 2, want: []string{"tcsh", "bash, zsh, fish"}},
		{name: "status: bad output", bin: "etcdadm", args: []string{"status", "--store", url, "-o", "yaml"}, code: 2, want: []string{"yaml", "table or json"}},
		{name: "status off a master", bin: "etcdadm", args: []string{"status", "--store", url, "--cert", filepath.Join(root, "none.crt")}, code: 1, want: []string{"none.crt", "pki issue-client"}},
		{name: "member remove: no name", bin: "etcdadm", args: []string{"member", "remove"}, code: 2, want: []string{"member remove NAME|ID"}},
		{name: "pki issue-client: no out-dir", bin: "etcdadm", args: []string{"pki", "issue-client", "admin", "--store", url}, code: 2, want: []string{"out-dir", "etcdadm pki issue-client --help"}},
		{name: "wait-healthy: bad timeout", bin: "etcdadm", args: []string{"wait-healthy", "--timeout", "soon"}, code: 2, want: []string{"soon", "--help"}},
		{name: "render: bad variant", bin: "etcdadm", args: []string{"render", "--variant", "windows", "--etcd-version", v, "--binaries", "baked", "--store", url}, code: 2, want: []string{"windows", "flatcar", "Nothing was written"}},
		{name: "upgrade: not a version", bin: "etcdadm", args: []string{"upgrade", "--to", "banana", "--store", url}, code: 2, want: []string{"banana", "3.6.16", "Nothing was changed"}},
		{name: "release push: no binaries", bin: "etcdadm", args: []string{"release", "push", v, "--from", filepath.Join(root, "nowhere"), "--store", url}, code: 1, want: []string{"nowhere", "etcd, etcdctl and etcdutl"}},
		{name: "teardown: not confirmed", bin: "etcdadm", args: []string{"teardown", "--store", url}, code: 2, want: []string{"not confirmed", "Nothing was changed"}},
		{name: "recover: no member registered", bin: "etcdadm", args: []string{"recover", "--from-member", "a", "--yes", "--store", url}, code: 1, want: []string{"peer registry lists no member", "--store"}},
		{name: "adopt: no endpoints", bin: "etcdadm", args: []string{"adopt", "--store", url}, code: 2, want: []string{"--endpoints"}},
		{name: "pause: value missing", bin: "etcdadm", args: []string{"pause", "--store", url, "--reason"}, code: 2, want: []string{"needs an argument", "reason", "--help"}},
		{name: "init: bad name", bin: "etcdadm", args: []string{"init", "--name", "Etcd_A", "--root", root}, code: 2, want: []string{"Etcd_A", "DNS label"}},
		{name: "join: no endpoint", bin: "etcdadm", args: []string{"join", "--root", root}, code: 2, want: []string{"name one endpoint", "etcdadm init"}},
		{name: "seed: over another spec", bin: "etcdadm", args: []string{"seed", "--store", url, "--members", "5", "--version", v}, code: 1, want: []string{"--force", "spec set"}},
		{name: "registrar: bad provider", bin: "etcd-dns-registrar", args: []string{"--store", url, "--root", root, "--name", "a", "--dns-suffix", "x.test", "--provider", "bind"}, code: 2, want: []string{"bind", "hosts or rfc2136"}},
		{name: "registrar: bad name", bin: "etcd-dns-registrar", args: []string{"--store", url, "--root", root, "--name", "Etcd_A", "--dns-suffix", "x.test"}, code: 2, want: []string{"Etcd_A"}},
	}
	stores := []string{dir, empty, strings.TrimPrefix(paused, "file://"), strings.TrimPrefix(tornDown, "file://"), strings.TrimPrefix(recovering, "file://"), strings.TrimPrefix(badSpec, "file://"), strings.TrimPrefix(badSettings, "file://"), strings.TrimPrefix(badCommand, "file://"), readOnly}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var before []string
			for _, d := range append(stores, root) {
				before = append(before, hashDir(t, d))
			}
			res := runBin(t, r.env, r.bin, r.args...)
			out := res.stdout + res.stderr
			if res.code != r.code {
				t.Errorf("%s %v: exit %d, want %d\n%s", r.bin, r.args, res.code, r.code, out)
			}
			for _, w := range r.want {
				if !strings.Contains(strings.ToLower(out), strings.ToLower(w)) {
					t.Errorf("%s %v: the message does not say %q:\n%s", r.bin, r.args, w, out)
				}
			}
			for i, d := range append(stores, root) {
				if hashDir(t, d) != before[i] {
					t.Errorf("%s %v changed %s", r.bin, r.args, d)
				}
			}
		})
	}
}

// makeReadOnly bind-mounts dir read-only over itself (root ignores file
// modes), until the test ends.
func makeReadOnly(t *testing.T, dir string) {
	t.Helper()
	for _, args := range [][]string{{"--bind", dir, dir}, {"-o", "remount,ro,bind", dir}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v\n%s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
}
