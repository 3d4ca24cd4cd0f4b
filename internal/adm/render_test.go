package adm

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/ignition"
)

// runRender runs "etcdadm render ARGS" in process; cli.Exit errors are
// returned instead of exiting.
func runRender(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errw bytes.Buffer
	app := App(&out)
	app.ErrWriter = &errw
	app.ExitErrHandler = func(*cli.Context, error) {}
	err = app.Run(Interspersed(app, append([]string{"etcdadm", "render"}, args...)))
	return out.String(), errw.String(), err
}

func TestRenderCommand(t *testing.T) {
	t.Setenv("ETCDADM_STORE", "")
	creds := filepath.Join("..", "..", "ignition", "testdata", "credentials")
	sums := filepath.Join("..", "..", "ignition", "testdata", "SHA256SUMS")
	base := []string{"--variant", "flatcar", "--store", "s3://bucket/etcd?region=eu-west-1",
		"--s3-credentials-file", creds, "--etcd-version", "3.6.16"}
	want := ignition.Options{Variant: ignition.Flatcar, Store: "s3://bucket/etcd?region=eu-west-1",
		S3CredentialsFile: creds, EtcdVersion: "3.6.16", LogLevel: "info", Env: map[string]string{}}

	t.Run("out-dir", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "configs")
		args := append(append([]string{}, base...), "--binaries", "url", "--binaries-base-url", "https://example.com/x",
			"--sha256-file", sums, "--name", "etcd-a", "--ip", "10.0.0.11", "--ip", "10.0.0.12", "--out-dir", dir)
		if _, _, err := runRender(t, args...); err != nil {
			t.Fatal(err)
		}
		o := want
		o.Binaries, o.BinariesBaseURL, o.SHA256File = ignition.BinariesURL, "https://example.com/x", sums
		o.Name, o.IPs = "etcd-a", []string{"10.0.0.11", "10.0.0.12"}
		wantBu, wantIgn, err := ignition.Render(o)
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range map[string][]byte{"etcd-a.bu": wantBu, "etcd-a.ign": wantIgn} {
			p := filepath.Join(dir, name)
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, w) {
				t.Errorf("%s differs from ignition.Render's output", name)
			}
			if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %v, want 0600 (it holds the S3 credentials)", name, fi.Mode().Perm())
			}
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 2 {
			t.Errorf("out-dir holds %d entries, want 2 (no temp files left)", len(ents))
		}
	})

	t.Run("stdout", func(t *testing.T) {
		o := want
		o.Binaries = ignition.BinariesBaked
		wantBu, wantIgn, err := ignition.Render(o)
		if err != nil {
			t.Fatal(err)
		}
		for format, w := range map[string][]byte{"": wantIgn, "ignition": wantIgn, "butane": wantBu} {
			args := append(append([]string{}, base...), "--binaries", "baked")
			if format != "" {
				args = append(args, "--format", format)
			}
			out, _, err := runRender(t, args...)
			if err != nil {
				t.Fatalf("--format %q: %v", format, err)
			}
			if out != string(w) {
				t.Errorf("--format %q: output differs from ignition.Render's", format)
			}
		}
	})

	// The sysext flags reach ignition.Options as they are.
	t.Run("sysext", func(t *testing.T) {
		sysextSums := filepath.Join("..", "..", "ignition", "testdata", "sysext", "SHA256SUMS")
		o := want
		o.Binaries, o.BinariesBaseURL, o.SHA256File = ignition.BinariesSysext, "https://example.com/sysext", sysextSums
		o.SysextEtcdVersions, o.SysextEtcdadmVersion = []string{"3.5.35", "3.7.3"}, "1.0.0"
		_, wantIgn, err := ignition.Render(o)
		if err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{}, base...), "--binaries", "sysext", "--binaries-base-url", "https://example.com/sysext",
			"--sha256-file", sysextSums, "--sysext-etcd-version", "3.5.35", "--sysext-etcd-version", "3.7.3", "--sysext-etcdadm-version", "1.0.0")
		out, _, err := runRender(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if out != string(wantIgn) {
			t.Error("output differs from ignition.Render's")
		}
		o = want
		o.Binaries, o.SysextBaked = ignition.BinariesSysext, true
		_, wantIgn, err = ignition.Render(o)
		if err != nil {
			t.Fatal(err)
		}
		if out, _, err := runRender(t, append(append([]string{}, base...), "--binaries", "sysext", "--sysext-baked")...); err != nil || out != string(wantIgn) {
			t.Errorf("--sysext-baked: %v, output same as ignition.Render's %v", err, out == string(wantIgn))
		}
	})

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unreadable credentials", []string{"--variant", "fcos", "--store", "s3://bucket/etcd", "--s3-credentials-file", "/nonexistent/creds", "--etcd-version", "3.6.16", "--binaries", "baked"}, "--s3-credentials-file"},
		{"unknown variant", append(append([]string{}, base...), "--variant", "rhcos", "--binaries", "baked"), "--variant flatcar or --variant fcos"},
		{"missing hash", append(append([]string{}, base...), "--binaries", "url", "--binaries-base-url", "https://example.com", "--sha256-file", sums, "--etcd-version", "3.7.3"), "no sha256"},
		{"bad store", []string{"--variant", "fcos", "--store", "nfs://server/x", "--etcd-version", "3.6.16", "--binaries", "baked"}, "unsupported scheme"},
		{"format with out-dir", append(append([]string{}, base...), "--binaries", "baked", "--format", "butane"), "--format is for stdout"},
		{"bad env", append(append([]string{}, base...), "--binaries", "baked", "--env", "ETCDADM_X"), "KEY=VALUE"},
		{"sysext without images", append(append([]string{}, base...), "--binaries", "sysext"), "--binaries sysext needs --binaries-base-url URL and --sha256-file SUMS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			out, _, err := runRender(t, append(append([]string{}, tc.args...), "--out-dir", dir)...)
			if err == nil {
				t.Fatal("rendered; want an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("printed %d bytes despite the error", len(out))
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s exists after a failed render", dir)
			}
		})
	}
}

// Issue 26 finding 2: a misspelt or unknown ETCDADM_* key and a value its
// flag refuses stop render before anything is written, naming the key and
// what it accepts; the keys every binary reads, including etcdadm's own,
// pass.
func TestRenderEnvChecked(t *testing.T) {
	t.Setenv("ETCDADM_STORE", "")
	base := []string{"--variant", "flatcar", "--store", "file:///var/lib/etcdadm/store", "--etcd-version", "3.6.16", "--binaries", "baked"}
	for _, tc := range []struct {
		env  string
		want []string
	}{
		{"ETCDADM_VOLUME_PROVIDR=pool", []string{"ETCDADM_VOLUME_PROVIDR", "did you mean ETCDADM_VOLUME_PROVIDER?"}},
		{"ETCDADM_VOLUME_PROVIDER=ebs", []string{"ETCDADM_VOLUME_PROVIDER=ebs", "want none, local or pool"}},
		{"ETCDADM_VOLUME_LEASE=5s", []string{"ETCDADM_VOLUME_LEASE=5s", "at least 10s"}},
		{"ETCDADM_VOLUME_SIZE=lots", []string{"ETCDADM_VOLUME_SIZE=lots", "a positive size such as 8G"}},
		{"ETCDADM_JOIN_TIMEOUT=soon", []string{"ETCDADM_JOIN_TIMEOUT=soon", "a duration"}},
		{"ETCDADM_GZIP_LEVEL=max", []string{"ETCDADM_GZIP_LEVEL=max", "a whole number"}},
	} {
		stdout, _, err := runRender(t, append(append([]string{}, base...), "--env", tc.env)...)
		if err == nil {
			t.Errorf("--env %s: rendered, want refused", tc.env)
			continue
		}
		if ec, ok := err.(cli.ExitCoder); !ok || ec.ExitCode() != 2 {
			t.Errorf("--env %s: %v, want exit 2", tc.env, err)
		}
		for _, w := range append(tc.want, "Nothing was written") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("--env %s: %q, want it to say %q", tc.env, err, w)
			}
		}
		if stdout != "" {
			t.Errorf("--env %s: wrote %d bytes to stdout", tc.env, len(stdout))
		}
	}
	for _, env := range []string{"ETCDADM_VOLUME_PROVIDER=pool", "ETCDADM_VOLUME_LEASE=30s", "ETCDADM_SWITCH_HEALTH_TIMEOUT=40s", "ETCDADM_PKI_METRICS_FILE=/var/lib/x.prom", "ETCDADM_RETAIN_DAILY_DAYS=0"} {
		if _, _, err := runRender(t, append(append([]string{}, base...), "--env", env)...); err != nil {
			t.Errorf("--env %s: %v, want rendered", env, err)
		}
	}
}
