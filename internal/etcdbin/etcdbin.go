// Package etcdbin manages the etcd binaries on a host: versions side by
// side in /opt/etcd/vX.Y.Z/{etcd,etcdctl,etcdutl}, /opt/etcd/current
// pointing at the one this member runs, and the release manifests in the
// store from which a host fetches a version it was not baked with (every
// file checked against its sha256 before it can run). Used by the version
// switcher, member join and etcdadm release.
package etcdbin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
)

// Programs are the files of one version.
func Programs() []string { return []string{"etcd", "etcdctl", "etcdutl"} }

// Errors.
var (
	ErrMissing  = errors.New("etcd version not on this host")
	ErrChecksum = errors.New("sha256 mismatch")
)

// Dir is a host's /opt/etcd (under a root prefix in tests).
type Dir string

// HostDir is root/opt/etcd.
func HostDir(root string) Dir { return Dir(filepath.Join(root, "opt/etcd")) }

// ExtensionDir is where the etcd sysext images (make images) put each
// version, under /usr: root/usr/lib/etcdadm/etcd/vX.Y.Z while merged.
const ExtensionDir = "usr/lib/etcdadm/etcd"

// extension is d's host's ExtensionDir (d is root/opt/etcd).
func (d Dir) extension() Dir {
	return Dir(filepath.Join(filepath.Dir(filepath.Dir(string(d))), ExtensionDir))
}

// VersionDir is where version v lives.
func (d Dir) VersionDir(v etcdversion.Version) string {
	return filepath.Join(string(d), "v"+v.String())
}

func (d Dir) current() string { return filepath.Join(string(d), "current") }

// CurrentLink is the link naming the version etcd runs; only
// localetcd.Use moves it.
func (d Dir) CurrentLink() string { return d.current() }

// Has reports whether every program of v is present and executable.
func (d Dir) Has(v etcdversion.Version) bool {
	for _, p := range Programs() {
		fi, err := os.Stat(filepath.Join(d.VersionDir(v), p))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// Local lists the complete versions on this host, oldest first: those in
// d and those a merged sysext image offers.
func (d Dir) Local() ([]etcdversion.Version, error) {
	out, err := d.complete()
	if err != nil {
		return nil, err
	}
	ext, err := d.extension().complete()
	if err != nil {
		return nil, err
	}
	for _, v := range ext {
		if !slices.ContainsFunc(out, func(o etcdversion.Version) bool { return etcdversion.Compare(o, v) == 0 }) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, etcdversion.Compare)
	return out, nil
}

// complete lists the complete versions in d.
func (d Dir) complete() ([]etcdversion.Version, error) {
	des, err := os.ReadDir(string(d))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("etcdbin: %w", err)
	}
	var out []etcdversion.Version
	for _, de := range des {
		if v, err := etcdversion.Parse(de.Name()); err == nil && strings.HasPrefix(de.Name(), "v") && d.Has(v) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, etcdversion.Compare)
	return out, nil
}

// Current is the version /opt/etcd/current points at.
func (d Dir) Current() (etcdversion.Version, error) {
	target, err := os.Readlink(d.current())
	if err != nil {
		return etcdversion.Version{}, fmt.Errorf("etcdbin: %w", err)
	}
	v, err := etcdversion.Parse(filepath.Base(target))
	if err != nil {
		return etcdversion.Version{}, fmt.Errorf("etcdbin: %s points at %s: %w", d.current(), target, err)
	}
	return v, nil
}

// Install places v's programs from open, each checked against sums before
// the version becomes visible: they are written to vX.Y.Z.partial, then
// the directory is renamed. A crash leaves at most a .partial directory,
// which the next Install replaces.
func (d Dir) Install(v etcdversion.Version, sums map[string]string, open func(program string) (io.ReadCloser, error)) error {
	if d.Has(v) {
		return nil
	}
	final := d.VersionDir(v)
	tmp := final + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("etcdbin: install %s: %w", v, err)
	}
	// Readable and runnable by the etcd user whatever the umask (member
	// join runs with 0077).
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("etcdbin: install %s: %w", v, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("etcdbin: install %s: %w", v, err)
	}
	for _, p := range Programs() {
		if err := installOne(filepath.Join(tmp, p), sums[p], func() (io.ReadCloser, error) { return open(p) }); err != nil {
			return fmt.Errorf("etcdbin: install %s: %s: %w", v, p, err)
		}
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return err
	}
	if _, err := os.Stat(final); err == nil {
		// An incomplete directory of that name (not ours): keep it aside.
		if err := os.Rename(final, final+".incomplete"); err != nil {
			return fmt.Errorf("etcdbin: install %s: %w", v, err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("etcdbin: install %s: %w", v, err)
	}
	return atomicfile.SyncDir(string(d))
}

func installOne(path, want string, open func() (io.ReadCloser, error)) error {
	if want == "" {
		return fmt.Errorf("no sha256 recorded")
	}
	r, err := open()
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	h := sha256.New()
	err = f.Chmod(0o755)
	if err == nil {
		_, err = io.Copy(io.MultiWriter(f, h), r)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		os.Remove(path)
		return fmt.Errorf("%w: got %s, the release says %s", ErrChecksum, got, want)
	}
	return nil
}

// FileSHA256 hashes one file.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// EnsureCurrent makes the version current names present before etcd
// runs it: a host given its etcd as a sysext image (etcdadm render
// --binaries sysext) has the link from Ignition and the programs only in
// the merged image, until Ensure copies them. Without a current link there
// is nothing to do (a test running a fixed binary).
func (d Dir) EnsureCurrent(ctx context.Context, rel Releases) error {
	v, err := d.Current()
	if err != nil || d.Has(v) {
		return nil
	}
	if err := d.Ensure(ctx, v, rel); err != nil {
		return fmt.Errorf("etcdbin: %s names etcd %s: %w", d.current(), v, err)
	}
	return nil
}

// Ensure makes v present on this host: baked or installed already, copied
// from a merged sysext image, or fetched from its release in the store.
// A version from an image is copied, not linked: sysupdate may replace
// the image with the next patch while etcd runs, and a rollback must
// still find the binary it left.
func (d Dir) Ensure(ctx context.Context, v etcdversion.Version, rel Releases) error {
	if d.Has(v) {
		return nil
	}
	if ext := d.extension(); ext.Has(v) {
		sums := map[string]string{}
		for _, p := range Programs() {
			sum, err := FileSHA256(filepath.Join(ext.VersionDir(v), p))
			if err != nil {
				return fmt.Errorf("etcdbin: %s from the sysext image: %w", v, err)
			}
			sums[p] = sum
		}
		if err := os.MkdirAll(string(d), 0o755); err != nil {
			return fmt.Errorf("etcdbin: %w", err)
		}
		return d.Install(v, sums, func(p string) (io.ReadCloser, error) { return os.Open(filepath.Join(ext.VersionDir(v), p)) })
	}
	m, err := rel.Get(ctx, v)
	if err != nil {
		return fmt.Errorf("etcdbin: %s is not on this host and %w", v, err)
	}
	if err := os.MkdirAll(string(d), 0o755); err != nil {
		return fmt.Errorf("etcdbin: %w", err)
	}
	return d.Install(v, m.sums(), func(p string) (io.ReadCloser, error) { return rel.Open(ctx, m, p) })
}
