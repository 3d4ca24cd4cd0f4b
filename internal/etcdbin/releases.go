package etcdbin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// releasesPrefix holds one folder per version: the programs (pushed) and
// manifest.json, written last, so a release is listed only when complete.
const releasesPrefix = "etcdadm/releases/"

// ErrNoRelease: the store has no release of that version.
var ErrNoRelease = errors.New("the store has no release of it")

// File is one program of a release.
type File struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size,omitempty"`
	// URL to download it from; empty: the program is in the store beside
	// the manifest.
	URL string `json:"url,omitempty"`
}

// Manifest describes one release.
type Manifest struct {
	Version string          `json:"version"`
	Files   map[string]File `json:"files"`
	Added   time.Time       `json:"added"`
}

func (m Manifest) sums() map[string]string {
	s := map[string]string{}
	for p, f := range m.Files {
		s[p] = f.SHA256
	}
	return s
}

// Releases are the release manifests in a store.
type Releases struct {
	Store store.Store
	// HTTP downloads releases recorded with a URL (nil: a client with a
	// 10-minute timeout).
	HTTP *http.Client
}

func manifestKey(v etcdversion.Version) string { return releasesPrefix + v.String() + "/manifest.json" }

// Get reads v's manifest.
func (r Releases) Get(ctx context.Context, v etcdversion.Version) (Manifest, error) {
	b, _, err := store.GetBytes(ctx, r.Store, manifestKey(v), 1<<16)
	if errors.Is(err, store.ErrNotFound) {
		return Manifest{}, fmt.Errorf("%w (push it with 'etcdadm release push %s --from DIR')", ErrNoRelease, v)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("release %s: %w", v, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("release %s: %s: %w", v, manifestKey(v), err)
	}
	for _, p := range Programs() {
		if len(m.Files[p].SHA256) != 64 {
			return Manifest{}, fmt.Errorf("release %s: %s has no sha256 for %s; record the release again", v, manifestKey(v), p)
		}
	}
	return m, nil
}

// List returns the versions with a complete release in the store.
func (r Releases) List(ctx context.Context) ([]etcdversion.Version, error) {
	es, err := r.Store.List(ctx, releasesPrefix)
	if err != nil {
		return nil, fmt.Errorf("releases: %w", err)
	}
	var out []etcdversion.Version
	for _, e := range es {
		v, err := etcdversion.Parse(e.Name)
		if err != nil || !e.Dir {
			continue
		}
		if _, err := r.Store.Stat(ctx, manifestKey(v)); err == nil {
			out = append(out, v)
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("releases: %w", err)
		}
	}
	return out, nil
}

// Known reports nil for a version a cluster may be declared at: a
// release this build knows (etcdversion.Released), or one whose binaries
// are in the store (a newer etcd patch, pushed first).
func (r Releases) Known(ctx context.Context, v etcdversion.Version) error {
	relErr := etcdversion.Released(v)
	if relErr == nil || !errors.Is(relErr, etcdversion.ErrUnreleased) {
		return relErr
	}
	if _, err := r.Store.Stat(ctx, manifestKey(v)); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("releases: %w", err)
	}
	return fmt.Errorf("%w: a typo? If it is a newer release, push it first ('etcdadm release push %s --from DIR')", relErr, v)
}

// Open streams one program of a release.
func (r Releases) Open(ctx context.Context, m Manifest, program string) (io.ReadCloser, error) {
	f := m.Files[program]
	if f.URL == "" {
		rc, _, err := r.Store.Get(ctx, releasesPrefix+m.Version+"/"+program)
		return rc, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL, nil)
	if err != nil {
		return nil, err
	}
	c := r.HTTP
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Minute}
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", f.URL, resp.Status)
	}
	return resp.Body, nil
}

// Push uploads the programs of v from dir into the store, then its
// manifest. Each program that runs here must say it is etcd v.
func (r Releases) Push(ctx context.Context, v etcdversion.Version, dir string, now time.Time) (Manifest, error) {
	m := Manifest{Version: v.String(), Files: map[string]File{}, Added: now.UTC()}
	for _, p := range Programs() {
		src := filepath.Join(dir, p)
		if err := checkReports(ctx, src, v); err != nil {
			return Manifest{}, err
		}
		sum, err := FileSHA256(src)
		if err != nil {
			return Manifest{}, fmt.Errorf("release push: %w", err)
		}
		f, err := os.Open(src)
		if err != nil {
			return Manifest{}, fmt.Errorf("release push: %w", err)
		}
		info, err := r.Store.Put(ctx, releasesPrefix+v.String()+"/"+p, f, store.PutOptions{})
		f.Close()
		if err != nil {
			return Manifest{}, fmt.Errorf("release push: upload %s: %w", p, err)
		}
		m.Files[p] = File{SHA256: sum, Size: info.Size}
	}
	return m, r.putManifest(ctx, v, m)
}

// Add records where to download v, with the sha256 of each program from
// sumsFile (sha256sum's format: "<hex>  <name>" per line).
func (r Releases) Add(ctx context.Context, v etcdversion.Version, base, sumsFile string, now time.Time) (Manifest, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return Manifest{}, fmt.Errorf("release add: --url %q: want an http(s) URL of the directory holding etcd, etcdctl and etcdutl", base)
	}
	sums, err := readSums(sumsFile)
	if err != nil {
		return Manifest{}, fmt.Errorf("release add: %w", err)
	}
	m := Manifest{Version: v.String(), Files: map[string]File{}, Added: now.UTC()}
	for _, p := range Programs() {
		s, ok := sums[p]
		if !ok {
			return Manifest{}, fmt.Errorf("release add: %s has no sha256 for %s (want lines like '<sha256>  %s')", sumsFile, p, p)
		}
		pu := *u
		pu.Path = path.Join(u.Path, p)
		m.Files[p] = File{SHA256: s, URL: pu.String()}
	}
	return m, r.putManifest(ctx, v, m)
}

func (r Releases) putManifest(ctx context.Context, v etcdversion.Version, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if _, err := store.PutBytes(ctx, r.Store, manifestKey(v), b, store.PutOptions{}); err != nil {
		return fmt.Errorf("release %s: write manifest: %w", v, err)
	}
	return nil
}

func readSums(file string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 || len(f[0]) != 64 {
			return nil, fmt.Errorf("%s:%d: not '<sha256>  <name>'", file, n)
		}
		out[filepath.Base(strings.TrimPrefix(f[1], "*"))] = strings.ToLower(f[0])
	}
	return out, nil
}

// checkReports refuses a program that runs here and names another version
// (a directory of the wrong release). A program that cannot run here
// (another architecture) is taken on its checksum alone.
func checkReports(ctx context.Context, prog string, v etcdversion.Version) error {
	if _, err := os.Stat(prog); err != nil {
		return fmt.Errorf("release push: %w: --from must be the directory holding etcd, etcdctl and etcdutl of %s (an unpacked release tarball)", err, v)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	args := []string{"--version"}
	if filepath.Base(prog) != "etcd" {
		args = []string{"version"}
	}
	out, err := exec.CommandContext(cctx, prog, args...).Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return nil
	}
	if !strings.Contains(string(out), " "+v.String()) {
		return fmt.Errorf("release push: %s does not report version %s (it says %q): push the directory of that release", prog, v, strings.TrimSpace(firstLine(string(out))))
	}
	return nil
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }
