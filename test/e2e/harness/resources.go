//go:build linux

package harness

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/volume"
)

// Names of everything a network makes: e2e-<id>-sw (switch namespace),
// e2e-<id>-<host> (host namespaces and cgroups), <tmp>/etcdadm-e2e-<id>
// (work directory with the overlay mounts), /run/etcdadm-e2e/<id> (owner).
const (
	ownerDir = "/run/etcdadm-e2e"
	netnsDir = "/run/netns"
	// nspawn keeps a directory per machine and a lock file per image
	// directory here; a killed nspawn leaves them behind.
	nspawnPropagate = "/run/systemd/nspawn/propagate"
	nspawnLocks     = "/run/systemd/nspawn/locks"
	// lockRecord, in a host's directory, names its nspawn lock file.
	lockRecord = "nspawn-lock"
	workPrefix = "etcdadm-e2e-"
	// killTimeout bounds how long killed processes may take to leave their
	// cgroup, and how long a busy mount is retried before a lazy unmount.
	killTimeout = 10 * time.Second
)

var (
	nameRe  = regexp.MustCompile(`^e2e-([0-9a-f]{8})-`)
	mountRe = regexp.MustCompile(`/` + workPrefix + `([0-9a-f]{8})(/|$)`)
	workRe  = regexp.MustCompile(`^` + workPrefix + `([0-9a-f]{8})$`)
)

func newID() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeOwner records that this process owns the resources of id, before
// any of them exists, so that Sweep can tell a live run from a dead one.
func writeOwner(id string) error {
	start, err := procStart(os.Getpid())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(ownerDir, 0o755); err != nil {
		return fmt.Errorf("owner record: %w", err)
	}
	rec := fmt.Sprintf("%d %d\n", os.Getpid(), start)
	if err := os.WriteFile(filepath.Join(ownerDir, id), []byte(rec), 0o644); err != nil {
		return fmt.Errorf("owner record: %w", err)
	}
	return nil
}

// ownerAlive reports whether the process that recorded id still runs (same
// PID and start time, so a reused PID does not count).
func ownerAlive(id string) bool {
	b, err := os.ReadFile(filepath.Join(ownerDir, id))
	if err != nil {
		return false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil {
		return false
	}
	got, err := procStart(pid)
	return err == nil && got == start
}

// procStart is a process's start time in clock ticks after boot
// (/proc/PID/stat field 22).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64) // field 22 counting pid and comm
}

// Cgroup file system magic numbers (statfs f_type).
const (
	cgroup2Magic = 0x63677270
	cgroup1Magic = 0x27e0eb
)

// cgroupHierarchies are the cgroup trees each nspawn gets its own node in:
// the unified tree alone on a cgroup v2 machine; on a hybrid or legacy one
// (a tmpfs at /sys/fs/cgroup, as here) the name=systemd tree and, when
// mounted, the unified one.
func cgroupHierarchies() ([]string, error) {
	fsType := func(p string) int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(p, &st); err != nil {
			return 0
		}
		return int64(st.Type)
	}
	if fsType("/sys/fs/cgroup") == cgroup2Magic {
		return []string{"/sys/fs/cgroup"}, nil
	}
	var h []string
	if fsType("/sys/fs/cgroup/systemd") == cgroup1Magic {
		h = append(h, "/sys/fs/cgroup/systemd")
	}
	if fsType("/sys/fs/cgroup/unified") == cgroup2Magic {
		h = append(h, "/sys/fs/cgroup/unified")
	}
	if len(h) == 0 {
		return nil, errors.New("no cgroup v2 at /sys/fs/cgroup and no name=systemd hierarchy at /sys/fs/cgroup/systemd")
	}
	return h, nil
}

// cgroupProcs lists the processes in a cgroup and all its descendants.
func cgroupProcs(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// killCgroups kills every process in the cgroups (and their descendants)
// and waits, bounded, until they are empty.
func killCgroups(dirs []string) error {
	deadline := time.Now().Add(killTimeout)
	for {
		var left []int
		for _, d := range dirs {
			if _, err := os.Stat(d); err != nil {
				continue
			}
			// cgroup v2 kills a whole subtree at once (Linux 5.14+).
			_ = os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
			for _, pid := range cgroupProcs(d) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in %v %s after SIGKILL", left, dirs, killTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroups removes cgroup directories, children first. They must be
// empty of processes.
func removeCgroups(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		var sub []string
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				sub = append(sub, p)
			}
			return nil
		})
		for i := len(sub) - 1; i >= 0; i-- {
			if err := os.Remove(sub[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountPoints lists the mount points of this mount namespace, in mount
// order.
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mps []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			mps = append(mps, volume.UnescapeMount(fields[4]))
		}
	}
	return mps, sc.Err()
}

// mountedUnder lists mount points at or below dir, deepest first.
func mountedUnder(dir string) ([]string, error) {
	mps, err := mountPoints()
	if err != nil {
		return nil, err
	}
	var under []string
	for _, mp := range mps {
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			under = append(under, mp)
		}
	}
	sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
	return under, nil
}

// unmount unmounts p, retrying while it is busy, lazily as a last resort.
// A path that is not mounted is fine.
func unmount(p string) error {
	deadline := time.Now().Add(killTimeout)
	for {
		err := syscall.Unmount(p, 0)
		switch {
		case err == nil, errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOENT):
			return nil
		case errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline):
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err2 := syscall.Unmount(p, syscall.MNT_DETACH); err2 != nil && !errors.Is(err2, syscall.EINVAL) {
			return fmt.Errorf("unmount %s: %w (lazy: %w)", p, err, err2)
		}
		return nil
	}
}

// removeTree unmounts whatever is mounted below dir, then removes it. It
// never deletes through a mount that could not be unmounted.
func removeTree(dir string) error {
	mps, err := mountedUnder(dir)
	if err != nil {
		return err
	}
	for _, mp := range mps {
		if err := unmount(mp); err != nil {
			return err
		}
	}
	if mps, err := mountedUnder(dir); err != nil || len(mps) > 0 {
		return fmt.Errorf("remove %s: still mounted below it: %v %v", dir, mps, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

func deleteNetns(name string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	err := run("ip", "netns", "delete", name)
	if _, serr := os.Stat(filepath.Join(netnsDir, name)); errors.Is(serr, fs.ErrNotExist) {
		return nil // gone, also when someone else deleted it first
	}
	return err
}

// resource is one thing a network made, found on the machine.
type resource struct {
	kind string // netns, cgroup, mount, dir, owner
	path string // a netns name, else a path
}

func (r resource) String() string { return r.kind + " " + r.path }

// scan finds the resources of every e2e network on the machine, by ID.
func scan() (map[string][]resource, error) {
	found := map[string][]resource{}
	add := func(id, kind, p string) { found[id] = append(found[id], resource{kind, p}) }
	var errs []error
	list := func(dir string) []os.DirEntry {
		es, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		return es
	}
	for _, e := range list(netnsDir) {
		if m := nameRe.FindStringSubmatch(e.Name()); m != nil {
			add(m[1], "netns", e.Name())
		}
	}
	hier, err := cgroupHierarchies()
	if err != nil {
		errs = append(errs, err)
	}
	for _, h := range hier {
		for _, e := range list(h) {
			if m := nameRe.FindStringSubmatch(e.Name()); m != nil && e.IsDir() {
				add(m[1], "cgroup", filepath.Join(h, e.Name()))
			}
		}
	}
	mps, err := mountPoints()
	if err != nil {
		errs = append(errs, err)
	}
	for _, mp := range mps {
		if m := mountRe.FindStringSubmatch(mp); m != nil {
			add(m[1], "mount", mp)
		}
	}
	tmp := os.TempDir()
	for _, e := range list(tmp) {
		if m := workRe.FindStringSubmatch(e.Name()); m != nil {
			add(m[1], "dir", filepath.Join(tmp, e.Name()))
		}
	}
	// nspawn's per-machine directory, left when nspawn was killed.
	for _, e := range list(nspawnPropagate) {
		if m := nameRe.FindStringSubmatch(e.Name()); m != nil {
			add(m[1], "dir", filepath.Join(nspawnPropagate, e.Name()))
		}
	}
	for _, e := range list(ownerDir) {
		if len(e.Name()) == 8 && workRe.MatchString(workPrefix+e.Name()) {
			add(e.Name(), "owner", filepath.Join(ownerDir, e.Name()))
		}
	}
	return found, errors.Join(errs...)
}

// Leftovers lists what of the network with this ID (Network.ID) still
// exists on the machine: namespaces, cgroups (with their processes),
// mounts, directories, the owner record. After a test's cleanups it is empty.
func Leftovers(id string) ([]string, error) {
	found, err := scan()
	var out []string
	for _, r := range found[id] {
		s := r.String()
		if r.kind == "cgroup" {
			if pids := cgroupProcs(r.path); len(pids) > 0 {
				s += fmt.Sprintf(" (processes %v)", pids)
			}
		}
		out = append(out, s)
	}
	return out, err
}

// Sweep removes what networks of dead test runs left behind (a test
// binary killed by a timeout, say): processes in their cgroups, network
// namespaces and the veths in them, overlay mounts, cgroups, work
// directories. Networks whose owning test process still runs are left
// alone, so concurrent runs are safe. NewNetwork calls it.
func Sweep(t testing.TB) {
	t.Helper()
	found, err := scan()
	if err != nil {
		t.Fatalf("harness: sweep: %v", err)
	}
	for id, rs := range found {
		if ownerAlive(id) {
			continue
		}
		t.Logf("harness: sweeping leftovers of dead e2e run %s: %v", id, rs)
		if err := removeAll(rs); err != nil {
			t.Fatalf("harness: sweep run %s: %v", id, err)
		}
	}
}

// removeAll removes resources in dependency order: processes, namespaces,
// mounts, cgroups, directories, and the owner record last.
func removeAll(rs []resource) error {
	by := map[string][]string{}
	for _, r := range rs {
		by[r.kind] = append(by[r.kind], r.path)
	}
	var errs []error
	if err := killCgroups(by["cgroup"]); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range by["netns"] {
		if err := deleteNetns(ns); err != nil {
			errs = append(errs, err)
		}
	}
	mps := by["mount"]
	sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
	for _, mp := range mps {
		if err := unmount(mp); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeCgroups(by["cgroup"]); err != nil {
		errs = append(errs, err)
	}
	for _, d := range by["dir"] {
		removeNspawnLocks(d)
		if err := removeTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		for _, o := range by["owner"] {
			if err := os.Remove(o); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeNspawnLocks removes the nspawn lock files the hosts of a work
// directory recorded (nspawn names them by device and inode, not by machine).
func removeNspawnLocks(workDir string) {
	recs, _ := filepath.Glob(filepath.Join(workDir, "*", lockRecord))
	for _, r := range recs {
		removeNspawnLock(filepath.Dir(r))
	}
}

// removeNspawnLock removes the nspawn lock file of one host's directory.
func removeNspawnLock(hostDir string) {
	if b, err := os.ReadFile(filepath.Join(hostDir, lockRecord)); err == nil {
		_ = os.Remove(filepath.Join(nspawnLocks, filepath.Base(strings.TrimSpace(string(b)))))
	}
}
