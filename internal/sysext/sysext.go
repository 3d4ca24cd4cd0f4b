// Package sysext names etcdadm's systemd-sysext images (what
// images/sysext/build.sh builds) and writes their systemd-sysupdate
// transfer definitions. It is the one source of that text: build.sh writes
// its sysupdate.d/ through images/sysext/sysupdate, and etcdadm render
// --binaries sysext puts the same files on the hosts. Pure: no I/O.
package sysext

import (
	"strings"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
)

// Arch is the architecture in the image names and their
// extension-release (build.sh builds x86-64 only).
const Arch = "x86-64"

// Host directories, by the Flatcar sysext-bakery convention: the images
// are kept in StoreDir/<name>/ (sysupdate's target, holding a few
// versions) and activated as ActiveDir/<name>.raw, a symlink to one.
const (
	StoreDir  = "/opt/extensions"
	ActiveDir = "/etc/extensions"
)

// Image is one version of one extension.
type Image struct {
	// Name is the extension's: its extension-release.NAME, the NAME.raw it
	// is activated as, and its sysupdate component.
	Name string
	// File is this version's image file, as build.sh names it.
	File string
	// Pattern is sysupdate's MatchPattern for every version the name
	// stands for (@v the version, %a the architecture).
	Pattern string
}

// Etcd is the image of etcd v. Its extension is named for the minor
// (etcd-3.6), so images of different minors merge side by side while
// sysupdate moves each minor through its patches only.
func Etcd(v etcdversion.Version) Image {
	return Image{
		Name:    "etcd-" + v.MinorString(),
		File:    "etcd-v" + v.String() + "-" + Arch + ".raw",
		Pattern: "etcd-v" + v.MinorString() + ".@v-%a.raw",
	}
}

// Etcdadm is the image of our binaries and units at version (build.sh's
// ETCDADM_VERSION).
func Etcdadm(version string) Image {
	return Image{Name: "etcdadm", File: "etcdadm-" + version + "-" + Arch + ".raw", Pattern: "etcdadm-@v-%a.raw"}
}

// EtcdadmVersion is the version in an etcdadm image's file name, for a
// name Etcdadm gives; ok is false for any other name.
func EtcdadmVersion(file string) (version string, ok bool) {
	v, ok := strings.CutPrefix(file, "etcdadm-")
	if !ok {
		return "", false
	}
	v, ok = strings.CutSuffix(v, "-"+Arch+".raw")
	return v, ok && v != ""
}

// Path is where a host keeps the image file.
func (i Image) Path() string { return StoreDir + "/" + i.Name + "/" + i.File }

// Link is the path that activates the extension.
func (i Image) Link() string { return ActiveDir + "/" + i.Name + ".raw" }

// TransferDir is the image's sysupdate component directory. Each image is
// a component of its own: the transfers of one directory share a version,
// and etcd's patches and etcdadm's versions have nothing in common
// (systemd-sysupdate -C NAME update).
func (i Image) TransferDir() string { return "/etc/sysupdate." + i.Name + ".d" }

// TransferFiles are the names the transfer is written under in
// TransferDir: NAME.transfer for systemd 257 and later, NAME.conf for
// older ones (257 reads .conf only where a directory has no .transfer).
func (i Image) TransferFiles() []string { return []string{i.Name + ".transfer", i.Name + ".conf"} }

// Transfer is the sysupdate definition keeping the extension current from
// url, the directory serving the images and their SHA256SUMS.
func (i Image) Transfer(url string) string {
	return `# systemd-sysupdate: ` + i.Name + ` from ` + url + `
[Transfer]
# SHA256SUMS is not signed: sysupdate checks each image's hash against it.
Verify=false

[Source]
Type=url-file
Path=` + url + `
MatchPattern=` + i.Pattern + `

[Target]
Type=regular-file
Path=` + StoreDir + `/` + i.Name + `
MatchPattern=` + i.Pattern + `
CurrentSymlink=` + i.Link() + `
InstancesMax=3
`
}

// Ours reports whether a sysupdate component is one of these images':
// etcdadm, or etcd-X.Y.
func Ours(component string) bool {
	if component == "etcdadm" {
		return true
	}
	minor, ok := strings.CutPrefix(component, "etcd-")
	if !ok {
		return false
	}
	v, err := etcdversion.Parse(minor + ".0")
	return err == nil && v.MinorString() == minor
}

// Components are the sysupdate components whose transfer directories
// (TransferDir) names lists: ours, sorted as given.
func Components(names []string) []string {
	var out []string
	for _, n := range names {
		c, ok := strings.CutPrefix(n, "sysupdate.")
		if !ok {
			continue
		}
		if c, ok = strings.CutSuffix(c, ".d"); ok && Ours(c) {
			out = append(out, c)
		}
	}
	return out
}
