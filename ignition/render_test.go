package ignition

import (
	"bytes"
	"encoding/base64"
	"errors"
	"flag"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/ignition/v2/config/v3_4/types"

	"github.com/etcdadm/etcdadm-immutable/units"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const (
	sums  = "testdata/SHA256SUMS"
	creds = "testdata/credentials"
	s3URL = "s3://etcd-backups/prod/main?endpoint=https://minio.internal:9000&region=eu-west-1"
	// sysextSums is a SHA256SUMS as make images writes it (of fake images).
	sysextSums = "testdata/sysext/SHA256SUMS"
)

// goldenCases cover both variants, every binary mode, shared and per host.
var goldenCases = []struct {
	name string
	opts Options
}{
	{"flatcar-baked-shared", Options{
		Variant: Flatcar, Store: "file:///var/lib/etcdadm/store", EtcdVersion: "3.6.16",
		Binaries: BinariesBaked,
	}},
	{"flatcar-url-host", Options{
		Variant: Flatcar, Store: s3URL, EtcdVersion: "3.6.16", LogLevel: "debug",
		Env:               map[string]string{"ETCDADM_FOUND_GRACE": "2m"},
		S3CredentialsFile: creds,
		Name:              "etcd-a", Host: "etcd-a.internal.example.com", IPs: []string{"10.0.0.11"},
		Binaries: BinariesURL, BinariesBaseURL: "https://artifacts.example.com/etcdadm/", SHA256File: sums,
	}},
	{"fcos-baked-host", Options{
		Variant: FCOS, Store: "file:///var/lib/etcdadm/store", EtcdVersion: "3.5.35",
		Name: "etcd-b", IPs: []string{"10.0.0.12", "2001:db8::12"},
		Binaries: BinariesBaked,
	}},
	{"flatcar-baked-manual", Options{
		Variant: Flatcar, EtcdVersion: "3.6.16", Binaries: BinariesBaked, Manual: true,
	}},
	{"fcos-url-shared", Options{
		Variant: FCOS, Store: s3URL, EtcdVersion: "3.6.16",
		Env:               map[string]string{"ETCDADM_VOLUME_PROVIDER": "pool", "ETCDADM_VOLUME_LEASE": "45s"},
		S3CredentialsFile: creds,
		Binaries:          BinariesURL, BinariesBaseURL: "http://10.0.0.1:8080", SHA256File: sums,
	}},
	{"flatcar-sysext-shared", Options{
		Variant: Flatcar, Store: s3URL, EtcdVersion: "3.6.16",
		S3CredentialsFile: creds, EnableUnits: []string{"etcd-dns-registrar.service"}, BackupInterval: 5 * time.Minute,
		Binaries: BinariesSysext, BinariesBaseURL: "https://artifacts.example.com/sysext/", SHA256File: sysextSums,
		SysextEtcdVersions: []string{"3.5.35", "3.7.3"},
	}},
	{"fcos-sysext-baked-host", Options{
		Variant: FCOS, Store: "file:///var/lib/etcdadm/store", EtcdVersion: "3.6.16",
		Env:  map[string]string{"ETCDADM_VOLUME_PROVIDER": "pool", "ETCDADM_VOLUME_LEASE": "45s"},
		Name: "etcd-c", Host: "etcd-c.internal.example.com",
		Binaries: BinariesSysext, SysextBaked: true,
	}},
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			bu, ign, err := Render(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".bu", bu)
			golden(t, tc.name+".ign", ign)
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./ignition -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the rendered output (if the change is intended: go test ./ignition -update)\n%s", path, firstDiff(want, got))
	}
}

func firstDiff(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n  want: " + wl + "\n  got:  " + gl
		}
	}
	return ""
}

// TestIgnitionContents checks what a host would get from each config, read
// back through Ignition's own parser.
func TestIgnitionContents(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			bu, ign, err := Render(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse(ign)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Ignition.Version != "3.4.0" {
				t.Errorf("ignition version %s, want 3.4.0", cfg.Ignition.Version)
			}
			again, err := Translate(bu)
			if err != nil || !bytes.Equal(again, ign) {
				t.Errorf("translating the rendered Butane again: err %v, same output %v", err, bytes.Equal(again, ign))
			}
			on := units.Enabled()
			if tc.opts.Manual {
				on = []string{"etcd-member-join.service", "etcd-pki-renew.timer"}
			}
			on = append(slices.Clone(on), tc.opts.EnableUnits...)
			if tc.opts.Binaries == BinariesSysext && !tc.opts.SysextBaked {
				// Downloaded images are kept current.
				on = append(on, "etcd-sysupdate.timer")
			}
			files := map[string]types.File{}
			for _, f := range cfg.Storage.Files {
				files[f.Path] = f
			}
			if tc.opts.Binaries == BinariesSysext {
				checkSysextUnits(t, cfg, tc.opts.Variant, on)
				checkSysextImages(t, cfg, files, tc.opts)
			} else {
				checkUnits(t, cfg, on)
				checkLoose(t, cfg, tc.opts)
			}

			cred, ok := files[CredentialsFile]
			switch {
			case !ok:
				t.Errorf("%s missing: the units' LoadCredential= needs it", CredentialsFile)
			case cred.Mode == nil || *cred.Mode != 0o600:
				t.Errorf("%s mode %v, want 0600", CredentialsFile, cred.Mode)
			case cred.User.ID == nil || *cred.User.ID != 0 || cred.Group.ID == nil || *cred.Group.ID != 0:
				t.Errorf("%s not owned by root:root", CredentialsFile)
			}
			credText := contents(t, cred)
			if tc.opts.S3CredentialsFile != "" {
				want, _ := os.ReadFile(tc.opts.S3CredentialsFile)
				if credText != string(want) {
					t.Errorf("%s = %q, want the credentials file", CredentialsFile, credText)
				}
			} else if !onlyComments(credText) {
				t.Errorf("%s for a file:// store should hold only comments: %q", CredentialsFile, credText)
			}

			env := contents(t, mustFile(t, files, EnvFile, 0o644))
			if !strings.Contains(env, "ETCDADM_STORE=") {
				t.Errorf("etcdadm.env has no ETCDADM_STORE:\n%s", env)
			}
			for _, secret := range []string{"AWS_", "aws_", "AKIA", "wJalrXUtnFEMI"} {
				if strings.Contains(env, secret) {
					t.Errorf("etcdadm.env holds %q: no secrets belong there:\n%s", secret, env)
				}
			}
			host, hasHost := files[HostEnvFile]
			if tc.opts.Name != "" {
				hostText := contents(t, mustFile(t, files, HostEnvFile, 0o644))
				if !strings.Contains(hostText, "ETCDADM_MEMBER_NAME="+tc.opts.Name+"\n") {
					t.Errorf("host.env lacks the member name:\n%s", hostText)
				}
			} else if hasHost && strings.Contains(contents(t, host), "ETCDADM_MEMBER_NAME") {
				t.Errorf("a shared config names a member")
			}

			users := contents(t, mustFile(t, files, SysusersFile, 0o644))
			if !strings.Contains(users, "u etcd ") || !strings.Contains(users, "/var/lib/etcd") {
				t.Errorf("sysusers.d does not create etcd with home /var/lib/etcd:\n%s", users)
			}
			tmp := contents(t, mustFile(t, files, TmpfilesFile, 0o644))
			if !strings.Contains(tmp, "d /var/lib/etcd  0700 etcd etcd") {
				t.Errorf("tmpfiles.d does not make /var/lib/etcd 0700 etcd:\n%s", tmp)
			}
		})
	}
}

// checkLoose: binaries baked or downloaded as files, etcd's in
// /opt/etcd/vX.Y.Z, the only link /opt/etcd/current.
func checkLoose(t *testing.T, cfg types.Config, o Options) {
	t.Helper()
	if len(cfg.Storage.Links) != 1 {
		t.Fatalf("links %+v, want just %s", cfg.Storage.Links, EtcdCurrent)
	}
	checkCurrent(t, cfg.Storage.Links[0], o.EtcdVersion)

	var bins []string
	for _, f := range cfg.Storage.Files {
		if strings.HasPrefix(f.Path, "/opt/") {
			bins = append(bins, f.Path)
			if f.Mode == nil || *f.Mode != 0o755 {
				t.Errorf("%s mode %v, want 0755", f.Path, f.Mode)
			}
			if f.Contents.Verification.Hash == nil || !strings.HasPrefix(*f.Contents.Verification.Hash, "sha256-") {
				t.Errorf("%s is downloaded without a sha256", f.Path)
			}
		}
	}
	if o.Binaries == BinariesBaked && len(bins) > 0 {
		t.Errorf("baked binaries, yet files %v", bins)
	}
	// Every program an enabled unit (or a unit those start) runs is
	// downloaded: read from the units' own ExecStart= lines, not
	// from render's list.
	if o.Binaries == BinariesURL {
		for _, u := range cfg.Systemd.Units {
			if u.Contents == nil {
				continue
			}
			for _, line := range strings.Split(*u.Contents, "\n") {
				exe, ok := strings.CutPrefix(line, "ExecStart=")
				if !ok {
					continue
				}
				exe, _, _ = strings.Cut(exe, " ")
				exe = strings.Replace(exe, EtcdCurrent, EtcdDir+"/v"+o.EtcdVersion, 1)
				if !slices.Contains(bins, exe) {
					t.Errorf("%s runs %s, which the config does not download (downloads: %v)", u.Name, exe, bins)
				}
			}
		}
	}
}

func checkCurrent(t *testing.T, l types.Link, version string) {
	t.Helper()
	if l.Path != EtcdCurrent || l.Target == nil || *l.Target != "v"+version || l.Hard == nil || *l.Hard {
		t.Errorf("link %+v, want soft %s -> v%s", l, EtcdCurrent, version)
	}
}

// checkSysextUnits: the config writes and enables none of the units the
// etcdadm image has; every enabled unit is wanted by a unit that starts
// once the images are merged (etcdadm-sysext.target, upheld by
// multi-user.target, or the unit its WantedBy= names), and none is upheld
// (fencing stops them for good).
func checkSysextUnits(t *testing.T, cfg types.Config, variant Variant, on []string) {
	t.Helper()
	got := map[string]types.Unit{}
	wanted := map[string]string{} // unit -> the unit that wants it
	for _, u := range cfg.Systemd.Units {
		got[u.Name] = u
		texts := []string{}
		if u.Contents != nil {
			texts = append(texts, *u.Contents)
		}
		for _, d := range u.Dropins {
			texts = append(texts, *d.Contents)
		}
		for _, text := range texts {
			for _, line := range strings.Split(text, "\n") {
				if n, ok := strings.CutPrefix(line, "Wants="); ok {
					wanted[n] = u.Name
				}
				if n, ok := strings.CutPrefix(line, "Upholds="); ok && slices.Contains(units.Names(), n) {
					t.Errorf("%s upholds %s: it would come back after a fence", u.Name, n)
				}
			}
		}
	}
	for _, n := range units.Names() {
		if u, ok := got[n]; ok && (u.Contents != nil || u.Enabled != nil) {
			t.Errorf("%s is the etcdadm image's; the config writes it (%v) or enables it (%v)", n, u.Contents != nil, u.Enabled != nil)
		}
	}
	target, ok := got["etcdadm-sysext.target"]
	if !ok || target.Contents == nil {
		t.Fatal("no etcdadm-sysext.target")
	}
	starter, ok := got["etcdadm-sysext.service"]
	if !ok || starter.Contents == nil || starter.Enabled == nil || !*starter.Enabled ||
		!strings.Contains(*starter.Contents, "\nAfter=systemd-sysext.service\n") || !strings.Contains(*starter.Contents, "start --no-block etcdadm-sysext.target\n") {
		t.Errorf("no enabled etcdadm-sysext.service that starts etcdadm-sysext.target after the merge: %+v", starter)
	}
	// Wanted where its WantedBy= says: a unit wanted by etcd.service must
	// not start before etcd (etcd-wait-healthy.service binds to it).
	for _, n := range on {
		by, _ := units.WantedBy(n)
		if len(by) == 0 {
			t.Errorf("%s is enabled, yet has no WantedBy=", n)
			continue
		}
		want := by[0]
		if strings.HasSuffix(want, ".target") {
			want = "etcdadm-sysext.target"
		}
		if wanted[n] != want {
			t.Errorf("%s is enabled (WantedBy=%s), wanted by %q; want %s", n, by[0], wanted[n], want)
		}
	}
	for n := range wanted {
		if !slices.Contains(on, n) {
			t.Errorf("%s is wanted, yet not enabled", n)
		}
	}
	sysextOn := got["systemd-sysext.service"].Enabled != nil && *got["systemd-sysext.service"].Enabled
	if want := variant == FCOS; sysextOn != want {
		t.Errorf("%s: systemd-sysext.service enabled %v, want %v (Flatcar enables it itself)", variant, sysextOn, want)
	}
}

// checkSysextImages: each image (the cluster's etcd, the extra ones,
// etcdadm) downloaded with its sha256 and activated as
// /etc/extensions/NAME.raw, and kept current by a sysupdate component of
// its own from the same URL; nothing of that when the images are baked.
func checkSysextImages(t *testing.T, cfg types.Config, files map[string]types.File, o Options) {
	t.Helper()
	links := map[string]string{}
	for _, l := range cfg.Storage.Links {
		if l.Path == EtcdCurrent {
			checkCurrent(t, l, o.EtcdVersion)
			continue
		}
		links[l.Path] = *l.Target
	}
	if o.SysextBaked {
		for p := range files {
			if strings.HasPrefix(p, "/opt/") || strings.HasPrefix(p, "/etc/sysupdate") {
				t.Errorf("baked images, yet file %s", p)
			}
		}
		if len(links) > 0 {
			t.Errorf("baked images, yet links %v", links)
		}
		return
	}
	base := strings.TrimSuffix(o.BinariesBaseURL, "/")
	want := map[string]string{"etcdadm": ""} // extension -> its image's file, "" any
	for _, v := range append([]string{o.EtcdVersion}, o.SysextEtcdVersions...) {
		want["etcd-"+v[:strings.LastIndex(v, ".")]] = "etcd-v" + v + "-x86-64.raw"
	}
	if len(links) != len(want) {
		t.Errorf("extension links %v, want one for each of %v", links, slices.Sorted(maps.Keys(want)))
	}
	for name, file := range want {
		link := "/etc/extensions/" + name + ".raw"
		target, ok := links[link]
		if !ok {
			t.Errorf("%s missing", link)
			continue
		}
		img := path.Join(path.Dir(link), target)
		f, ok := files[img]
		switch {
		case !ok:
			t.Errorf("%s -> %s, which the config does not download", link, img)
			continue
		case !strings.HasPrefix(img, "/opt/extensions/"+name+"/") || file != "" && path.Base(img) != file:
			t.Errorf("%s -> %s, want /opt/extensions/%s/%s", link, img, name, file)
		case f.Mode == nil || *f.Mode != 0o644:
			t.Errorf("%s mode %v, want 0644", img, f.Mode)
		case f.Contents.Verification.Hash == nil || !strings.HasPrefix(*f.Contents.Verification.Hash, "sha256-"):
			t.Errorf("%s is downloaded without a sha256", img)
		case *f.Contents.Source != base+"/"+path.Base(img):
			t.Errorf("%s from %s, want %s/%s", img, *f.Contents.Source, base, path.Base(img))
		}
		dir := "/etc/sysupdate." + name + ".d/" + name
		tr := contents(t, mustFile(t, files, dir+".transfer", 0o644))
		if conf := contents(t, mustFile(t, files, dir+".conf", 0o644)); conf != tr {
			t.Errorf("%s.conf differs from %s.transfer", dir, dir)
		}
		for _, line := range []string{"Path=" + base, "Path=/opt/extensions/" + name, "CurrentSymlink=" + link} {
			if !strings.Contains(tr, "\n"+line+"\n") {
				t.Errorf("%s.transfer lacks %s:\n%s", dir, line, tr)
			}
		}
	}
}

func checkUnits(t *testing.T, cfg types.Config, on []string) {
	t.Helper()
	got := map[string]types.Unit{}
	for _, u := range cfg.Systemd.Units {
		got[u.Name] = u
	}
	if len(got) != len(units.Names()) {
		t.Errorf("%d units, want the %d embedded ones", len(got), len(units.Names()))
	}
	for _, n := range units.Names() {
		u, ok := got[n]
		if !ok {
			t.Errorf("unit %s missing", n)
			continue
		}
		want, _ := units.Read(n)
		if u.Contents == nil || *u.Contents != string(want) {
			t.Errorf("unit %s: contents differ from units/%s", n, n)
		}
		enabled := u.Enabled != nil && *u.Enabled
		if wantOn := slices.Contains(on, n); enabled != wantOn {
			t.Errorf("unit %s enabled %v, want %v", n, enabled, wantOn)
		}
		if u.Enabled == nil {
			t.Errorf("unit %s: enabled not set: say whether the config enables it", n)
		}
	}
	if e := got["etcd.service"]; e.Enabled != nil && *e.Enabled {
		t.Errorf("etcd.service is enabled: etcd-member-join starts it")
	}
}

func mustFile(t *testing.T, files map[string]types.File, path string, mode int) types.File {
	t.Helper()
	f, ok := files[path]
	if !ok {
		t.Fatalf("%s missing", path)
	}
	if f.Mode == nil || *f.Mode != mode {
		t.Errorf("%s mode %v, want %#o", path, f.Mode, mode)
	}
	return f
}

// contents decodes the data: URLs Butane writes for inline files.
func contents(t *testing.T, f types.File) string {
	t.Helper()
	if f.Contents.Source == nil {
		return ""
	}
	src := *f.Contents.Source
	switch {
	case strings.HasPrefix(src, "data:,"):
		s, err := url.PathUnescape(strings.TrimPrefix(src, "data:,"))
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		return s
	case strings.HasPrefix(src, "data:;base64,"):
		b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(src, "data:;base64,"))
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		return string(b)
	}
	t.Fatalf("%s: not an inline data URL: %.40s", f.Path, src)
	return ""
}

func onlyComments(s string) bool {
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// TestVolumeLeaseRenewal: a lease other than the default 2m gets a
// drop-in renewing it at a third; a lease under 10s is refused.
func TestVolumeLeaseRenewal(t *testing.T) {
	renewal := func(lease string) (string, error) {
		return timerDropin(Options{Env: map[string]string{"ETCDADM_VOLUME_LEASE": lease}}, "etcd-volume-renew.timer")
	}
	if d, err := renewal("2m"); err != nil || d != "" {
		t.Errorf("default lease: drop-in %q, err %v; want none", d, err)
	}
	d, err := renewal("30s")
	// An empty OnXSec= resets all of the unit's timers: only the first
	// line may be one, or it would undo the lines before it.
	if err != nil || !strings.Contains(d, "[Timer]\nOnActiveSec=\nOnActiveSec=10s\nOnUnitActiveSec=10s\n") || strings.Count(d, "Sec=\n") != 1 {
		t.Errorf("30s lease: drop-in %q, err %v; want renewal every 10s", d, err)
	}
	if _, err := renewal("5s"); err == nil || !strings.Contains(err.Error(), "at least 10s") {
		t.Errorf("5s lease: %v, want refused", err)
	}
}

func TestRenderErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	raw, _ := os.ReadFile(sums)
	var partial []string
	for _, l := range strings.Split(string(raw), "\n") {
		if !strings.HasSuffix(l, "etcdutl") {
			partial = append(partial, l)
		}
	}
	noEtcdutl := write("partial", strings.Join(partial, "\n"))
	badSums := write("bad", "not-a-hash  bin/etcdadm\n")
	notCreds := write("notcreds", "[default]\nregion = eu-west-1\n")
	otherProfile := write("prod", "[prod]\naws_access_key_id = A\naws_secret_access_key = S\n")

	ok := Options{Variant: Flatcar, Store: "file:///srv/store", EtcdVersion: "3.6.16", Binaries: BinariesBaked}
	with := func(f func(*Options)) Options { o := ok; f(&o); return o }
	withURL := func(f func(*Options)) Options {
		o := ok
		o.Binaries, o.BinariesBaseURL, o.SHA256File = BinariesURL, "https://example.com/b", sums
		f(&o)
		return o
	}

	withSysext := func(f func(*Options)) Options {
		o := ok
		o.Binaries, o.BinariesBaseURL, o.SHA256File = BinariesSysext, "https://example.com/sysext", sysextSums
		f(&o)
		return o
	}
	raw, _ = os.ReadFile(sysextSums)
	twoEtcdadm := write("two", string(raw)+strings.Repeat("ab", 32)+"  etcdadm-1.0.1-x86-64.raw\n")

	for _, tc := range []struct {
		name string
		opts Options
		want string // in the message: names what to fix
	}{
		{"unknown variant", with(func(o *Options) { o.Variant = "coreos" }), "--variant flatcar or --variant fcos"},
		{"no variant", with(func(o *Options) { o.Variant = "" }), "--variant"},
		{"no etcd version", with(func(o *Options) { o.EtcdVersion = "" }), "--etcd-version"},
		{"v prefix", with(func(o *Options) { o.EtcdVersion = "v3.6.16" }), "no leading v"},
		{"unsupported minor", with(func(o *Options) { o.EtcdVersion = "3.4.26" }), "3.5.x, 3.6.x or 3.7.x"},
		{"short version", with(func(o *Options) { o.EtcdVersion = "3.6" }), "--etcd-version"},
		{"no store", with(func(o *Options) { o.Store = "" }), "--store file:///path"},
		{"manual with a store", with(func(o *Options) { o.Manual = true }), "drop --store and --enable, or drop --manual"},
		{"http store", with(func(o *Options) { o.Store = "http://example.com/x" }), "unsupported scheme"},
		{"file store with host", with(func(o *Options) { o.Store = "file://srv/store" }), "three slashes"},
		{"relative file store", with(func(o *Options) { o.Store = "file:srv/store" }), "absolute directory"},
		{"s3 without bucket", with(func(o *Options) { o.Store, o.S3CredentialsFile = "s3:///prefix", creds }), "no bucket"},
		{"s3 credentials in URL", with(func(o *Options) { o.Store, o.S3CredentialsFile = "s3://AKIA:secret@bucket/p", creds }), "do not belong in the URL"},
		{"s3 bad endpoint", with(func(o *Options) { o.Store, o.S3CredentialsFile = "s3://bucket/p?endpoint=minio:9000", creds }), "endpoint"},
		{"s3 without credentials", with(func(o *Options) { o.Store = s3URL }), "--s3-credentials-file"},
		{"unreadable credentials", with(func(o *Options) { o.S3CredentialsFile = filepath.Join(dir, "missing") }), "--s3-credentials-file"},
		{"not a credentials file", with(func(o *Options) { o.S3CredentialsFile = notCreds }), "aws_access_key_id"},
		{"no default profile", with(func(o *Options) { o.S3CredentialsFile = otherProfile }), "[default]"},
		{"no binaries mode", with(func(o *Options) { o.Binaries = "" }), "--binaries url"},
		{"unknown binaries mode", with(func(o *Options) { o.Binaries = "oci" }), "--binaries sysext (as systemd-sysext images)"},
		{"url without base", with(func(o *Options) { o.Binaries, o.SHA256File = BinariesURL, sums }), "--binaries-base-url"},
		{"url without sums", with(func(o *Options) { o.Binaries, o.BinariesBaseURL = BinariesURL, "https://example.com" }), "--sha256-file"},
		{"missing hash", withURL(func(o *Options) { o.SHA256File = noEtcdutl }), "no sha256 for etcd/v3.6.16/etcdutl"},
		{"hashes for another etcd", withURL(func(o *Options) { o.EtcdVersion = "3.7.3" }), "no sha256 for etcd/v3.7.3/etcd,"},
		{"unreadable sums", withURL(func(o *Options) { o.SHA256File = filepath.Join(dir, "missing") }), "--sha256-file"},
		{"malformed sums", withURL(func(o *Options) { o.SHA256File = badSums }), "sha256sum's format"},
		{"ftp base", withURL(func(o *Options) { o.BinariesBaseURL = "ftp://example.com" }), "http(s)://"},
		{"base with query", withURL(func(o *Options) { o.BinariesBaseURL = "https://example.com/b?x=1" }), "no query"},
		{"baked with sums", with(func(o *Options) { o.SHA256File = sums }), "--binaries baked downloads nothing"},
		{"sysext without base", withSysext(func(o *Options) { o.BinariesBaseURL = "" }), "--binaries sysext needs --binaries-base-url URL and --sha256-file SUMS"},
		{"sysext without sums", withSysext(func(o *Options) { o.SHA256File = "" }), "or --sysext-baked when the images are in /etc/extensions"},
		{"sysext baked with url", withSysext(func(o *Options) { o.SysextBaked = true }), "--sysext-baked downloads nothing"},
		{"sysext flags without sysext", with(func(o *Options) { o.SysextEtcdVersions = []string{"3.7.3"} }), "are for --binaries sysext"},
		{"sysext ftp base", withSysext(func(o *Options) { o.BinariesBaseURL = "ftp://example.com" }), "http(s)://"},
		{"sysext unreadable sums", withSysext(func(o *Options) { o.SHA256File = filepath.Join(dir, "missing") }), "--sha256-file"},
		{"sysext image not built", withSysext(func(o *Options) { o.EtcdVersion = "3.6.15" }), "no sha256 for etcd-v3.6.15-x86-64.raw"},
		{"sysext extra image not built", withSysext(func(o *Options) { o.SysextEtcdVersions = []string{"3.5.26"} }), "no sha256 for etcd-v3.5.26-x86-64.raw"},
		{"sysext extra of the same minor", withSysext(func(o *Options) { o.SysextEtcdVersions = []string{"3.6.15"} }), "etcd 3.6 comes from --etcd-version 3.6.16 already; one image a minor"},
		{"sysext extra twice", withSysext(func(o *Options) { o.SysextEtcdVersions = []string{"3.7.3", "3.7.2"} }), "comes from --sysext-etcd-version 3.7.3 already"},
		{"sysext extra unsupported", withSysext(func(o *Options) { o.SysextEtcdVersions = []string{"3.4.26"} }), "--sysext-etcd-version: etcdVersion \"3.4.26\""},
		{"sysext sums of the url mode", withSysext(func(o *Options) { o.SHA256File = sums }), "names no etcdadm image"},
		{"sysext several etcdadm images", withSysext(func(o *Options) { o.SHA256File = twoEtcdadm }), "pick the hosts' with --sysext-etcdadm-version"},
		{"sysext etcdadm version not built", withSysext(func(o *Options) { o.SysextEtcdadmVersion = "9.9.9" }), "no sha256 for etcdadm-9.9.9-x86-64.raw"},
		{"bad name", with(func(o *Options) { o.Name = "Etcd_A" }), "--name"},
		{"bad ip", with(func(o *Options) { o.IPs = []string{"10.0.0.300"} }), "--ip"},
		{"bad host", with(func(o *Options) { o.Host = "a b" }), "--host"},
		{"bad log level", with(func(o *Options) { o.LogLevel = "loud" }), "--host-log-level"},
		{"secret in env", with(func(o *Options) { o.Env = map[string]string{"AWS_SECRET_ACCESS_KEY": "x"} }), "--s3-credentials-file"},
		{"reserved env", with(func(o *Options) { o.Env = map[string]string{"ETCDADM_STORE": "file:///x"} }), "--store"},
		{"per-host env", with(func(o *Options) { o.Env = map[string]string{"ETCDADM_MEMBER_NAME": "etcd-a"} }), "--name"},
		{"newline in env", with(func(o *Options) { o.Env = map[string]string{"ETCDADM_X": "a\nETCDADM_STORE=evil"} }), "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bu, ign, err := Render(tc.opts)
			if err == nil {
				t.Fatal("rendered; want an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if bu != nil || ign != nil {
				t.Errorf("output despite the error")
			}
		})
	}
}

func TestRenderErrorsAllAtOnce(t *testing.T) {
	_, _, err := Render(Options{Variant: "x", Store: "ftp://x", Binaries: "y"})
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"--variant", "--etcd-version", "--store", "--binaries"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

func TestStrictTranslation(t *testing.T) {
	// A Butane warning (an unknown key) fails translation, with its place.
	_, err := Translate([]byte("variant: flatcar\nversion: 1.1.0\nstorage:\n  filez: []\n"))
	if !errors.Is(err, ErrTranslate) || !strings.Contains(err.Error(), "filez") || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("unknown key: err %v, want a strict failure naming storage.filez at line 4", err)
	}
	if _, err := Translate([]byte("variant: flatcar\nversion: 1.1\n")); !errors.Is(err, ErrTranslate) {
		t.Errorf("version 1.1 (not full semver): err %v", err)
	}
	if _, err := Parse([]byte(`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"relative"}]}}`)); !errors.Is(err, ErrTranslate) {
		t.Errorf("Parse accepted a relative path: %v", err)
	}
}

func TestParseSums(t *testing.T) {
	h := strings.Repeat("ab", 32)
	got, err := parseSums([]byte("# comment\n\n" + h + "  ./bin/etcdadm\n" + strings.ToUpper(h) + " *etcd/v3.6.16/etcd\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got["bin/etcdadm"] != h || got["etcd/v3.6.16/etcd"] != h || len(got) != 2 {
		t.Errorf("got %v", got)
	}
	if _, err := parseSums([]byte(h + "  a\n" + strings.Repeat("cd", 32) + "  a\n")); err == nil {
		t.Errorf("conflicting hashes accepted")
	}
}

// TestBackupInterval: --backup-interval becomes the snapshot timer's
// schedule (a drop-in systemd accepts); an interval that would drift off
// wall-clock marks is refused, naming the ones that work.
func TestBackupInterval(t *testing.T) {
	dropin := func(d time.Duration) (string, error) {
		return timerDropin(Options{BackupInterval: d}, "etcd-snapshot-uploader.timer")
	}
	analyze := systemdAnalyze(t)
	for d, want := range map[time.Duration]string{5 * time.Minute: "OnCalendar=*:0/5", 30 * time.Minute: "OnCalendar=*:0/30", 6 * time.Hour: "OnCalendar=0/6:00"} {
		got, err := dropin(d)
		if err != nil || !strings.Contains(got, "OnCalendar=\n"+want+"\n") {
			t.Errorf("%v: drop-in %q, err %v; want it to reset the schedule and set %s", d, got, err, want)
			continue
		}
		if out, err := exec.Command(analyze, "calendar", strings.TrimPrefix(want, "OnCalendar=")).CombinedOutput(); err != nil {
			t.Errorf("%v: systemd does not accept %s: %v\n%s", d, want, err, out)
		}
	}
	if got, err := dropin(0); err != nil || got != "" {
		t.Errorf("no interval: drop-in %q, err %v; want the unit's own 15 min", got, err)
	}
	for _, bad := range []time.Duration{7 * time.Minute, 90 * time.Minute, 30 * time.Second, 48 * time.Hour} {
		if _, err := dropin(bad); err == nil || !strings.Contains(err.Error(), "divide an hour") {
			t.Errorf("%v: %v; want a refusal naming the intervals that work", bad, err)
		}
	}
}

// timerDropin renders a baked flatcar config with o's extra settings and
// returns the first drop-in of unit ("" when it has none).
func timerDropin(o Options, unit string) (string, error) {
	o.Variant, o.Store, o.EtcdVersion, o.Binaries = Flatcar, "file:///var/lib/etcdadm/store", "3.6.16", BinariesBaked
	_, ign, err := Render(o)
	if err != nil {
		return "", err
	}
	cfg, err := Parse(ign)
	if err != nil {
		return "", err
	}
	for _, u := range cfg.Systemd.Units {
		if u.Name == unit && len(u.Dropins) > 0 {
			return *u.Dropins[0].Contents, nil
		}
	}
	return "", nil
}

// TestSysextUnitsVerify: systemd accepts a sysext host's units as it will
// see them: the etcdadm image's (as build.sh installs them, programs in
// /usr/bin) under /usr/lib, the config's target and drop-ins under /etc.
func TestSysextUnitsVerify(t *testing.T) {
	analyze := systemdAnalyze(t)
	for _, tc := range goldenCases {
		if tc.opts.Binaries != BinariesSysext {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			cfg := renderConfig(t, tc.opts)
			root := t.TempDir()
			image, etc := filepath.Join(root, "usr/lib/systemd/system"), filepath.Join(root, "etc/systemd/system")
			bin := filepath.Join(root, "usr/bin")
			for _, n := range units.Names() {
				b, _ := units.Read(n)
				b = bytes.ReplaceAll(b, []byte(BinDir+"/"), []byte(bin+"/"))
				b = bytes.ReplaceAll(b, []byte(EtcdCurrent+"/"), []byte(bin+"/"))
				writeFile(t, filepath.Join(image, n), string(b), 0o644)
			}
			for _, p := range append(units.Programs(), "etcd") {
				writeFile(t, filepath.Join(bin, p), "#!/bin/sh\n", 0o755)
			}
			args := []string{"verify"}
			for _, u := range cfg.Systemd.Units {
				if u.Contents != nil {
					writeFile(t, filepath.Join(etc, u.Name), *u.Contents, 0o644)
				}
				for _, d := range u.Dropins {
					writeFile(t, filepath.Join(etc, u.Name+".d", d.Name), *d.Contents, 0o644)
				}
				args = append(args, u.Name)
			}
			cmd := exec.Command(analyze, args...)
			// The trailing colon keeps systemd's own paths (multi-user.target).
			cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+etc+":"+image+":")
			out, err := cmd.CombinedOutput()
			if err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Fatalf("systemd-analyze verify %v: %v\n%s", args[1:], err, out)
			}
		})
	}
}

// renderConfig renders o and parses the Ignition config.
func renderConfig(t *testing.T, o Options) types.Config {
	t.Helper()
	_, ign, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(ign)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: install the systemd package (make components does)")
	}
	return p
}

func writeFile(t *testing.T, path, s string, m os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), m); err != nil {
		t.Fatal(err)
	}
}

// TestSysextChoices: the etcdadm image named when SHA256SUMS lists
// several; a master built by hand keeps its member-join drop-in on the
// image's unit, and starts only member join and certificate renewal.
func TestSysextChoices(t *testing.T) {
	raw, err := os.ReadFile(sysextSums)
	if err != nil {
		t.Fatal(err)
	}
	two := filepath.Join(t.TempDir(), "SHA256SUMS")
	writeFile(t, two, string(raw)+strings.Repeat("ab", 32)+"  etcdadm-1.0.1-x86-64.raw\n", 0o644)
	o := Options{Variant: Flatcar, Store: "file:///srv/store", EtcdVersion: "3.6.16",
		Binaries: BinariesSysext, BinariesBaseURL: "https://example.com/sysext", SHA256File: two, SysextEtcdadmVersion: "1.0.1"}
	bu, _, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(bu), "/opt/extensions/etcdadm/etcdadm-1.0.1-x86-64.raw") || strings.Contains(string(bu), "etcdadm-1.0.0") {
		t.Errorf("--sysext-etcdadm-version 1.0.1 does not install etcdadm-1.0.1-x86-64.raw alone:\n%s", bu)
	}

	cfg := renderConfig(t, Options{Variant: FCOS, EtcdVersion: "3.6.16", Manual: true, Binaries: BinariesSysext, SysextBaked: true})
	checkSysextUnits(t, cfg, FCOS, units.ManualEnabled())
	for _, u := range cfg.Systemd.Units {
		if u.Name == "etcd-member-join.service" && (len(u.Dropins) != 2 || u.Dropins[0].Name != "10-manual.conf" || u.Dropins[1].Name != "10-store.conf") {
			t.Errorf("etcd-member-join.service drop-ins %+v, want the manual one and the store's", u.Dropins)
		}
	}
}

// With a file:// store every unit that writes the store may write its
// directory (ProtectSystem=strict makes it read-only otherwise: member join
// crash-looped on "read-only file system"), tmpfiles makes it root's 0700,
// and the uploader runs as root reading etcd's client certificate as
// credentials. An S3 store adds none of it.
func TestFileStoreWritable(t *testing.T) {
	writers := []string{"etcd-member-join.service", "etcd-version-switcher.service", "etcd-reconcile.service",
		"etcd-sysupdate.service", "etcd-pki-renew.service", "etcd-snapshot-uploader.service",
		"etcd-volume-attach.service", "etcd-volume-renew.service", "etcd-dns-registrar.service"}
	for _, tc := range []struct {
		store string
		dir   string
	}{{"file:///srv/etcd%20store", ""}, {"file:///srv/etcd-store/", "/srv/etcd-store"}, {"s3://bucket/prefix?endpoint=https://minio:9000", ""}} {
		o := Options{Variant: Flatcar, Store: tc.store, EtcdVersion: "3.6.16", Binaries: BinariesBaked}
		if strings.HasPrefix(tc.store, "s3:") {
			o.S3CredentialsFile = filepath.Join(t.TempDir(), "creds")
			writeFile(t, o.S3CredentialsFile, "[default]\naws_access_key_id = a\naws_secret_access_key = b\n", 0o600)
		}
		bu, _, err := Render(o)
		if strings.Contains(tc.store, "%20") {
			if err == nil || !strings.Contains(err.Error(), "without spaces, %") {
				t.Errorf("%s: err %v, want a refusal of the path", tc.store, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		cfg := renderConfig(t, o)
		for _, n := range writers {
			var got string
			for _, u := range cfg.Systemd.Units {
				if u.Name == n {
					for _, d := range u.Dropins {
						if d.Contents != nil {
							got += *d.Contents
						}
					}
				}
			}
			has := strings.Contains(got, "\nReadWritePaths="+tc.dir+"\n")
			if tc.dir != "" && !has {
				t.Errorf("%s: %s may not write the store's directory %s; drop-ins:\n%s", tc.store, n, tc.dir, got)
			}
			if tc.dir == "" && got != "" {
				t.Errorf("%s: %s has drop-ins with an S3 store:\n%s", tc.store, n, got)
			}
			if n == "etcd-snapshot-uploader.service" && tc.dir != "" && (!strings.Contains(got, "User=root") || !strings.Contains(got, "ETCDADM_KEY=%d/etcd-client.key")) {
				t.Errorf("%s: the uploader cannot write a store of root's or read its key:\n%s", tc.store, got)
			}
		}
		if want := "d " + tc.dir + " 0700 root root -"; tc.dir != "" && !strings.Contains(string(bu), want) {
			t.Errorf("%s: tmpfiles does not make the store directory (%q):\n%s", tc.store, want, bu)
		}
	}
}

// ETCDADM_CERT_VALIDITY: a short lifetime gets a renewal timer that runs
// every twelfth of it; a lifetime the renewal could not keep up with, or
// no duration at all, is refused before anything is written.
func TestCertValidity(t *testing.T) {
	o := Options{Variant: Flatcar, Store: "file:///srv/store", EtcdVersion: "3.6.16", Binaries: BinariesBaked,
		Env: map[string]string{"ETCDADM_CERT_VALIDITY": "12m"}}
	bu, _, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ETCDADM_CERT_VALIDITY=12m", "name: 10-validity.conf", "OnUnitActiveSec=1m0s"} {
		if !strings.Contains(string(bu), want) {
			t.Errorf("12m certificates: no %q in\n%s", want, bu)
		}
	}
	o.Env["ETCDADM_CERT_VALIDITY"] = "8760h"
	if bu, _, err := Render(o); err != nil || strings.Contains(string(bu), "10-validity.conf") {
		t.Errorf("a year's certificates keep the daily timer: %v", err)
	}
	for _, bad := range []string{"1m", "lots", "200000h"} {
		o.Env["ETCDADM_CERT_VALIDITY"] = bad
		if _, _, err := Render(o); err == nil || !strings.Contains(err.Error(), "ETCDADM_CERT_VALIDITY="+bad) {
			t.Errorf("ETCDADM_CERT_VALIDITY=%s: err %v, want a refusal naming it", bad, err)
		}
	}
}
