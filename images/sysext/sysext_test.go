package sysext

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// build runs build.sh into a new directory with env added, and returns it.
func build(t *testing.T, env ...string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("bash", "build.sh", out)
	cmd.Env = append(append(os.Environ(), "ETCDADM_VERSION=1.0.0-test"), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	return out
}

// sums reads SHA256SUMS: image name → hash.
func sums(t *testing.T, dir string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		out[name] = sum
	}
	return out
}

// The images: one per supported etcd version and one of ours, listed in
// SHA256SUMS with their real hashes, the same bytes from the same inputs,
// accepted by systemd as system extensions, and their binaries run from
// the unpacked image.
func TestImages(t *testing.T) {
	for _, tool := range []string{"mksquashfs", "unsquashfs", "systemd-dissect", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (make components installs squashfs-tools and systemd-container): %v", tool, err)
		}
	}
	dir := build(t)
	got := sums(t, dir)
	want := []string{"etcdadm-1.0.0-test-x86-64.raw"}
	for _, v := range testenv.EtcdVersions() {
		want = append(want, "etcd-v"+v+"-x86-64.raw")
	}
	if len(got) != len(want) {
		t.Errorf("SHA256SUMS lists %v, want %v", got, want)
	}
	for _, name := range want {
		if got[name] == "" {
			t.Errorf("SHA256SUMS lacks %s", name)
		}
		out, err := exec.Command("sha256sum", filepath.Join(dir, name)).Output()
		if err != nil || !strings.HasPrefix(string(out), got[name]+" ") {
			t.Errorf("%s: sha256sum %q, SHA256SUMS says %s (%v)", name, out, got[name], err)
		}
	}

	// Reproducible: a second build (of one etcd version) gives the same
	// bytes for what both built.
	v := testenv.EtcdVersions()[1]
	again := sums(t, build(t, "ETCD_VERSIONS="+v))
	for _, name := range []string{"etcdadm-1.0.0-test-x86-64.raw", "etcd-v" + v + "-x86-64.raw"} {
		if again[name] != got[name] {
			t.Errorf("%s: built twice, hashes %s and %s", name, got[name], again[name])
		}
	}

	for _, v := range testenv.EtcdVersions() {
		minor := v[:strings.LastIndex(v, ".")]
		// Activated as /etc/extensions/etcd-X.Y.raw (sysupdate's
		// CurrentSymlink): systemd must take it as that extension.
		link := filepath.Join(t.TempDir(), "etcd-"+minor+".raw")
		if err := os.Symlink(filepath.Join(dir, "etcd-v"+v+"-x86-64.raw"), link); err != nil {
			t.Fatal(err)
		}
		dissect(t, link, "etcd-"+minor)
		mnt := unpack(t, link)
		// The version switcher finds the version where the image puts
		// it, and installs it into /opt/etcd without a download.
		opt := etcdbin.HostDir(mnt)
		if err := opt.Ensure(context.Background(), etcdversion.MustParse(v), etcdbin.Releases{}); err != nil {
			t.Fatalf("etcd %s from its image: %v", v, err)
		}
		if err := localetcd.Use(opt, etcdversion.MustParse(v)); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(filepath.Join(string(opt), "current", "etcd"), "--version").Output()
		if err != nil || !strings.Contains(string(out), "etcd Version: "+v+"\n") {
			t.Errorf("etcd from the %s image: %v\n%s", v, err, out)
		}
		for _, b := range []string{"etcdctl", "etcdutl"} {
			if out, err := exec.Command(filepath.Join(mnt, "usr/lib/etcdadm/etcd/v"+v, b), "version").Output(); err != nil || !strings.Contains(string(out), v) {
				t.Errorf("%s from the %s image: %v\n%s", b, v, err, out)
			}
		}
		tr, err := os.ReadFile(filepath.Join(dir, "sysupdate.d", "etcd-"+minor+".transfer"))
		if err != nil || !strings.Contains(string(tr), "MatchPattern=etcd-v"+minor+".@v-%a.raw\n") || !strings.Contains(string(tr), "CurrentSymlink=/etc/extensions/etcd-"+minor+".raw\n") {
			t.Errorf("etcd-%s.transfer: %v\n%s", minor, err, tr)
		}
		if conf, _ := os.ReadFile(filepath.Join(dir, "sysupdate.d", "etcd-"+minor+".conf")); string(conf) != string(tr) {
			t.Errorf("etcd-%s.conf differs from its .transfer", minor)
		}
	}

	link := filepath.Join(t.TempDir(), "etcdadm.raw")
	os.Symlink(filepath.Join(dir, "etcdadm-1.0.0-test-x86-64.raw"), link)
	dissect(t, link, "etcdadm")
	mnt := unpack(t, link)
	units, _ := filepath.Glob(filepath.Join(mnt, "usr/lib/systemd/system/etcd*"))
	if len(units) < 10 {
		t.Fatalf("the etcdadm image ships units %v", units)
	}
	for _, u := range units {
		b, _ := os.ReadFile(u)
		for _, line := range strings.Split(string(b), "\n") {
			exe, ok := strings.CutPrefix(line, "ExecStart=")
			if !ok || !strings.HasPrefix(exe, "/usr/bin/") {
				continue
			}
			bin := strings.Fields(exe)[0]
			if out, err := exec.Command(filepath.Join(mnt, bin), "--help").CombinedOutput(); err != nil {
				t.Errorf("%s: %s --help from the image: %v\n%s", filepath.Base(u), bin, err, out)
			}
		}
		if strings.Contains(string(b), "/opt/etcdadm") {
			t.Errorf("%s in the image still runs binaries from /opt/etcdadm", filepath.Base(u))
		}
	}

	// Every binary comes with its man page and completion for three
	// shells; the page renders, and bash completes from the binary itself.
	bins, _ := filepath.Glob(filepath.Join(mnt, "usr/bin/*"))
	if len(bins) != 6 {
		t.Errorf("the etcdadm image ships binaries %v, want our six", bins)
	}
	for _, b := range bins {
		n := filepath.Base(b)
		for _, f := range []string{"usr/share/man/man8/" + n + ".8", "usr/share/bash-completion/completions/" + n, "usr/share/zsh/site-functions/_" + n, "usr/share/fish/vendor_completions.d/" + n + ".fish"} {
			if st, err := os.Stat(filepath.Join(mnt, f)); err != nil || st.Size() == 0 {
				t.Errorf("%s: %s missing or empty (%v)", n, f, err)
			}
		}
		page, err := exec.Command("man", "-l", filepath.Join(mnt, "usr/share/man/man8", n+".8")).Output()
		if err != nil || !strings.Contains(string(page), "NAME") || !strings.Contains(string(page), n) {
			t.Errorf("man -l %s.8: %v\n%.500s", n, err, page)
		}
	}
	script := `source "$1"; COMP_WORDS=(etcdadm up); COMP_CWORD=1; _etcdadm_complete; echo "${COMPREPLY[*]}"
COMP_WORDS=(etcdadm backup ""); COMP_CWORD=2; _etcdadm_complete; echo "${COMPREPLY[*]}"`
	cmd := exec.Command("bash", "-c", script, "bash", filepath.Join(mnt, "usr/share/bash-completion/completions/etcdadm"))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(mnt, "usr/bin")+":"+os.Getenv("PATH"))
	out, err := cmd.Output()
	if lines := strings.Split(string(out), "\n"); err != nil || len(lines) < 2 || lines[0] != "upgrade" || !strings.Contains(lines[1], "verify") {
		t.Errorf("bash completion of 'etcdadm up' and 'etcdadm backup ': %v\n%s", err, out)
	}
}

// dissect checks systemd takes image as a system extension named name
// (systemd-dissect holds a loop device for a moment).
func dissect(t *testing.T, image, name string) {
	t.Helper()
	out, err := exec.Command("systemd-dissect", "--json=short", image).Output()
	if err != nil {
		t.Fatalf("systemd-dissect %s: %v", image, err)
	}
	var d struct {
		Name               string   `json:"name"`
		ExtensionRelease   []string `json:"extensionRelease"`
		UseSystemExtension bool     `json:"useSystemExtension"`
	}
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("systemd-dissect %s: %v\n%s", image, err, out)
	}
	if !d.UseSystemExtension || d.Name != name+".raw" || !strings.Contains(strings.Join(d.ExtensionRelease, "\n"), "ARCHITECTURE=x86-64") {
		t.Errorf("systemd-dissect %s: %+v, want a system extension %s for x86-64", image, d, name)
	}
}

// unpack extracts a squashfs image with unsquashfs (no loop device: the
// e2e hosts running beside this test count on the free ones).
func unpack(t *testing.T, image string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("unsquashfs", "-no-progress", "-d", dir, image).CombinedOutput(); err != nil {
		t.Fatalf("unsquashfs %s: %v\n%s", image, err, out)
	}
	return dir
}
