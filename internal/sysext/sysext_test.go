package sysext

import (
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/unit"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
)

// matches is sysupdate's MatchPattern on one file name (@v a version,
// %a this architecture).
func matches(pattern, file string) bool {
	re := regexp.QuoteMeta(pattern)
	re = strings.ReplaceAll(re, "@v", `[A-Za-z0-9.+~_-]+`)
	re = strings.ReplaceAll(re, "%a", Arch)
	return regexp.MustCompile("^" + re + "$").MatchString(file)
}

func TestNames(t *testing.T) {
	etcd := Etcd(etcdversion.MustParse("3.6.16"))
	if etcd.Name != "etcd-3.6" || etcd.File != "etcd-v3.6.16-x86-64.raw" || etcd.Path() != "/opt/extensions/etcd-3.6/etcd-v3.6.16-x86-64.raw" ||
		etcd.Link() != "/etc/extensions/etcd-3.6.raw" || etcd.TransferDir() != "/etc/sysupdate.etcd-3.6.d" {
		t.Errorf("etcd 3.6.16: %+v %s %s %s", etcd, etcd.Path(), etcd.Link(), etcd.TransferDir())
	}
	// The minor's pattern takes its patches, never another minor's.
	for file, want := range map[string]bool{
		"etcd-v3.6.16-x86-64.raw": true, "etcd-v3.6.17-x86-64.raw": true,
		"etcd-v3.7.3-x86-64.raw": false, "etcd-v3.60.1-x86-64.raw": false, "etcd-v3.6.16-arm64.raw": false,
	} {
		if got := matches(etcd.Pattern, file); got != want {
			t.Errorf("%s matches %s: %v, want %v", etcd.Pattern, file, got, want)
		}
	}
	adm := Etcdadm("0.0.0-git37bbd3a0c0de")
	if adm.Name != "etcdadm" || adm.File != "etcdadm-0.0.0-git37bbd3a0c0de-x86-64.raw" || !matches(adm.Pattern, adm.File) || adm.Link() != "/etc/extensions/etcdadm.raw" {
		t.Errorf("etcdadm image: %+v", adm)
	}
	if v, ok := EtcdadmVersion(adm.File); !ok || v != "0.0.0-git37bbd3a0c0de" {
		t.Errorf("EtcdadmVersion(%s) = %q, %v", adm.File, v, ok)
	}
	for _, file := range []string{etcd.File, "etcdadm--x86-64.raw", "etcdadm-1.0.0-arm64.raw"} {
		if v, ok := EtcdadmVersion(file); ok {
			t.Errorf("EtcdadmVersion(%s) = %q: not an etcdadm image", file, v)
		}
	}
}

// The transfer parses as a unit-style file with what sysupdate needs: the
// URL as source, the image's directory as target, its link as current.
func TestTransfer(t *testing.T) {
	img := Etcd(etcdversion.MustParse("3.7.3"))
	opts, err := unit.DeserializeOptions(strings.NewReader(img.Transfer("https://example.com/sysext")))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range opts {
		got[o.Section+"."+o.Name] = o.Value
	}
	for k, want := range map[string]string{
		"Transfer.Verify": "false", "Source.Type": "url-file", "Source.Path": "https://example.com/sysext",
		"Source.MatchPattern": "etcd-v3.7.@v-%a.raw", "Target.Type": "regular-file", "Target.Path": "/opt/extensions/etcd-3.7",
		"Target.MatchPattern": "etcd-v3.7.@v-%a.raw", "Target.CurrentSymlink": "/etc/extensions/etcd-3.7.raw", "Target.InstancesMax": "3",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	if f := img.TransferFiles(); len(f) != 2 || f[0] != "etcd-3.7.transfer" || f[1] != "etcd-3.7.conf" {
		t.Errorf("transfer files %v", f)
	}
}

func TestComponents(t *testing.T) {
	got := Components([]string{"sysupdate.d", "sysupdate.etcd-3.6.d", "sysupdate.etcdadm.d", "sysupdate.kubernetes.d", "sysupdate.etcd-3.x.d", "sysupdate.etcd-3.6", "sysupdate.etcd-03.6.d"})
	want := []string{"etcd-3.6", "etcdadm"}
	if !slices.Equal(got, want) {
		t.Errorf("Components = %v, want %v", got, want)
	}
	for _, v := range []string{"3.5.35", "3.7.3"} {
		img := Etcd(etcdversion.MustParse(v))
		if c := Components([]string{path.Base(img.TransferDir())}); len(c) != 1 || c[0] != img.Name {
			t.Errorf("Components(%s) = %v, want [%s]", img.TransferDir(), c, img.Name)
		}
	}
}
