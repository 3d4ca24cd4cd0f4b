//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// crash is one armed crash point: on host (its short hostname, or "*" for
// whichever host gets there), the process is killed with SIGKILL at the
// point, or, with powerCut, it stops there and the test cuts the host's
// power.
type crash struct {
	host, point string
	powerCut    bool
}

func (k crash) String() string {
	how := "kill -9"
	if k.powerCut {
		how = "power cut"
	}
	return fmt.Sprintf("%s on %s (%s)", k.point, k.host, how)
}

// sweep drives crash points in hosts booted from binaries built with
// -tags crashpoints: it writes the arm file (bound read-only into every
// host at crashpoint.ArmFile), watches the hosts' journals for the point
// being reached, then disarms it, arms the next point of that host's
// chain, and for a power cut crashes the host and powers it on again. The
// units are left to run again by themselves (Restart=, timers, boot); the
// test starts a timer's service where the timer would take minutes.
type sweep struct {
	c      *cluster
	file   string
	hosts  map[string]*harness.Host // by hostname
	all    []*harness.Host          // every host booted, by machine
	extra  map[string][]string      // by hostname: its nspawn arguments
	active []crash
	chains map[string][]crash // by hostname: armed one after another
	seen   map[string]int     // hostname+point: CRASHPOINT lines this boot
	fired  []string
}

func newSweep(t *testing.T, o clusterOptions) *sweep {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	o.tags = "crashpoints"
	o.binds = append(o.binds, harness.Bind{Source: dir, Target: filepath.Dir(crashpoint.ArmFile), ReadOnly: true})
	s := &sweep{c: newClusterWith(t, o), file: filepath.Join(dir, filepath.Base(crashpoint.ArmFile)),
		hosts: map[string]*harness.Host{}, extra: map[string][]string{}, chains: map[string][]crash{}, seen: map[string]int{}}
	s.write(t)
	return s
}

// boot boots a host; hostname is its short hostname (extra may set it).
// The host lives as long as t: pass the whole test's, not a subtest's.
func (s *sweep) boot(t *testing.T, machine, hostname string, extra ...string) *harness.Host {
	t.Helper()
	opts := s.c.hostOptions(extra...)
	// Units that run during boot (a oneshot holds the boot until it is
	// done) are swept while the host boots.
	opts.WhileBooting = func(h *harness.Host) { s.hosts[hostname] = h; s.tick(t) }
	s.extra[hostname] = extra
	h := s.c.n.Boot(t, machine, opts)
	s.hosts[hostname] = h
	s.all = append(s.all, h)
	for k := range s.seen {
		if strings.HasPrefix(k, hostname+" ") {
			delete(s.seen, k)
		}
	}
	return h
}

// arm arms the first crash of each chain at once and the rest of a
// chain one after another, each when the one before it was reached.
func (s *sweep) arm(t *testing.T, chains ...[]crash) {
	t.Helper()
	for _, ch := range chains {
		s.active = append(s.active, ch[0])
		s.chains[ch[0].host] = append(s.chains[ch[0].host], ch[1:]...)
	}
	s.write(t)
}

func (s *sweep) write(t *testing.T) {
	t.Helper()
	var b strings.Builder
	for _, k := range s.active {
		fmt.Fprintf(&b, "%s %s", k.host, k.point)
		if k.powerCut {
			b.WriteString(" hang")
		}
		b.WriteString("\n")
	}
	tmp := s.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.file); err != nil {
		t.Fatal(err)
	}
}

// tick handles every armed point some host reached since the last tick.
func (s *sweep) tick(t *testing.T) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(s.hosts)) {
		h := s.hosts[name]
		if !h.Running() || !s.armedOn(name) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, _, err := h.Exec(t, ctx, "sh", "-c", "journalctl -b -o cat --no-pager | grep '^CRASHPOINT ' || true")
		cancel()
		if err != nil {
			continue // the host may be going down; next tick
		}
		counts := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if p, ok := strings.CutPrefix(line, "CRASHPOINT "); ok {
				counts[p]++
			}
		}
		for i := 0; i < len(s.active); i++ {
			k := s.active[i]
			if (k.host != name && k.host != "*") || counts[k.point] <= s.seen[name+" "+k.point] {
				continue
			}
			s.seen[name+" "+k.point] = counts[k.point]
			s.active = slices.Delete(s.active, i, i+1)
			if next := s.chains[k.host]; len(next) > 0 {
				s.active, s.chains[k.host] = append(s.active, next[0]), next[1:]
			}
			s.write(t)
			s.fired = append(s.fired, fmt.Sprintf("%s reached on %s", k, name))
			t.Logf("crash sweep: %s reached on %s", k, name)
			if k.powerCut {
				h.Crash(t)
				h.PowerOn(t, s.c.hostOptions(s.extra[name]...))
				for p := range counts {
					delete(s.seen, name+" "+p)
				}
			}
			break // the journal changed; read it again next tick
		}
	}
}

func (s *sweep) armedOn(name string) bool {
	for _, k := range s.active {
		if k.host == name || k.host == "*" {
			return true
		}
	}
	return false
}

// until runs the sweep until every armed point was reached and ok says
// the cluster converged; kick runs each round (starting a timer's
// service, as the timer would).
func (s *sweep) until(t *testing.T, what string, timeout time.Duration, kick func(), ok func() (bool, string)) {
	t.Helper()
	start := time.Now()
	var last string
	for round := 0; time.Since(start) < timeout; round++ {
		s.tick(t)
		if kick != nil && round%3 == 0 {
			kick() // under systemd's start limit (5 in 10 s)
		}
		done, why := ok()
		if done && len(s.active) == 0 {
			t.Logf("FIGURE crash sweep %s: converged %v after the first crash point was armed", what, time.Since(start).Round(100*time.Millisecond))
			return
		}
		last = why
		time.Sleep(time.Second)
	}
	var journals strings.Builder
	for name, h := range s.hosts {
		if h.Running() {
			fmt.Fprintf(&journals, "--- %s:\n%s\n", name, journal(t, h))
		}
	}
	t.Fatalf("crash sweep %s: not converged after %v; points not reached: %v; last: %s\n%s", what, timeout, s.active, last, journals.String())
}

// healthy is ok once h sees exactly names as healthy voting members.
func healthy(t *testing.T, h *harness.Host, names []string) func() (bool, string) {
	return func() (bool, string) {
		st, err := status(t, h)
		if err != nil {
			return false, err.Error()
		}
		var got []string
		for _, m := range st.Members {
			if m.Healthy && !m.Learner {
				got = append(got, m.Name)
			}
		}
		slices.Sort(got)
		return slices.Equal(got, names) && len(st.Members) == len(names), fmt.Sprintf("members %+v", st.Members)
	}
}

// dataDirs lists the inode of every data directory on the live hosts
// (member/ and what was moved aside: member.*): a rename keeps it.
func (s *sweep) dataDirs(t *testing.T) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for _, h := range s.all {
		if !h.Running() {
			continue
		}
		out := h.MustExec(t, "sh", "-c", "stat -c '%i %n' /var/lib/etcd/member* 2>/dev/null || true")
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if ino, path, ok := strings.Cut(line, " "); ok {
				dirs[h.Name()+" inode "+ino] = path
			}
		}
	}
	return dirs
}

// checkKept: every data directory listed before is still there (in its
// place or moved aside), on every host still running.
func (s *sweep) checkKept(t *testing.T, before map[string]string) {
	t.Helper()
	after := s.dataDirs(t)
	running := map[string]bool{}
	for _, h := range s.all {
		running[h.Name()] = h.Running()
	}
	for k, path := range before {
		if _, ok := after[k]; !ok && running[strings.Fields(k)[0]] {
			t.Errorf("data directory %s (%s) is gone: %v", path, k, after)
		}
	}
}

// checkBackups: every backup the store lists restores (verify), so none
// is incomplete.
func (s *sweep) checkBackups(t *testing.T) []string {
	t.Helper()
	names := backupNames(t, s.c)
	for _, n := range names {
		if out, err := s.c.adm(t, "backup", "verify", n, "--store", s.c.storeURL); err != nil {
			t.Errorf("listed backup %s does not verify: %v\n%s", n, err, out)
		}
	}
	return names
}

// TestCrashPointSweep kills our binaries at every step that changes
// state (crashpoint's list) on real hosts, some with a power cut instead,
// and lets the units run again. After each phase: the cluster is healthy
// at the spec's size with no member twice, every data directory is still
// there (moved aside at most), every listed backup verifies, and a client
// writing throughout lost no acknowledged write and missed no watch event.
// docs/reliability.md has the table.
func TestCrashPointSweep(t *testing.T) {
	outer := t // hosts live as long as the whole test, not one subtest
	vs := []string{e2eVersion, "3.7.3"}
	s := newSweep(t, clusterOptions{members: 3, versions: vs, env: map[string]string{
		// Every uploader run keeps only the newest backup, so retention
		// deletes one each run.
		"ETCDADM_RETAIN_ALL": "1s", "ETCDADM_RETAIN_HOURLY_DAYS": "0", "ETCDADM_RETAIN_DAILY_DAYS": "0",
	}})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	every := func(unit string) func() {
		return func() {
			for _, h := range s.hosts {
				if h.Running() {
					h.Exec(t, context.Background(), "systemctl", "start", "--no-block", unit)
				}
			}
		}
	}

	// Founding: each founder crashes at a different step, one by a power
	// cut. Whichever founder sees them all registered first writes the
	// plan, and each marks the cluster created.
	s.arm(t,
		[]crash{{"*", crashpoint.FoundPlan, false}, {"*", crashpoint.FoundCreated, false}},
		[]crash{{"etcd-b", crashpoint.EnvWritten, true}},
		[]crash{{"etcd-c", crashpoint.EtcdStarted, false}},
	)
	for _, n := range names {
		s.boot(t, n, n)
	}
	a := s.hosts["etcd-a"]
	s.until(t, "found", 4*time.Minute, nil, healthy(t, a, names))
	before := s.dataDirs(t)

	var eps []string
	for _, n := range names {
		eps = append(eps, "https://"+s.hosts[n].IP().String()+":2379")
	}
	load := startClientLoad(t, s.c, eps)

	t.Run("backup", func(t *testing.T) {
		s.arm(t, []crash{{"*", crashpoint.BackupData, false}, {"*", crashpoint.BackupRecord, false}, {"*", crashpoint.BackupMeta, false}, {"*", crashpoint.RetentionGone, false}})
		s.until(t, "backup", 3*time.Minute, every("etcd-snapshot-uploader.service"), func() (bool, string) { return true, "" })
		// The runs the sweep started end (a start joins a running one);
		// a second later (the retention keeps what is younger than 1 s:
		// names count seconds) the timer's next run, on every host.
		for range 2 {
			for _, h := range s.hosts {
				h.MustExec(t, "systemctl", "start", "etcd-snapshot-uploader.service")
			}
			time.Sleep(1100 * time.Millisecond)
		}
		listed := s.checkBackups(t)
		if len(listed) != 1 {
			t.Errorf("backups listed after retention: %v, want the newest only", listed)
		}
		s.checkKept(t, before)
	})

	t.Run("replace", func(t *testing.T) {
		s.hosts["etcd-c"].PowerOff(t)
		s.arm(t, []crash{
			{"etcd-c", crashpoint.ReplaceBackup, false}, {"etcd-c", crashpoint.ReplaceRemoved, true},
			{"etcd-c", crashpoint.LearnerAdded, false}, {"etcd-c", crashpoint.Promoted, false},
		})
		s.boot(outer, "etcd-c-new", "etcd-c", "--hostname=etcd-c")
		s.until(t, "replace", 5*time.Minute, nil, healthy(t, a, names))
		s.checkKept(t, before)
		s.checkBackups(t)
	})

	t.Run("upgrade", func(t *testing.T) {
		if out, err := s.c.adm(t, "upgrade", "--to", vs[1], "--store", s.c.storeURL); err != nil {
			t.Fatalf("etcdadm upgrade: %v\n%s", err, out)
		}
		s.arm(t, []crash{{"etcd-a", crashpoint.SwitchBinary, false}}, []crash{{"etcd-b", crashpoint.SwitchDone, true}})
		var hosts []*harness.Host
		for _, n := range names {
			hosts = append(hosts, s.hosts[n])
		}
		s.until(t, "upgrade", 8*time.Minute, every("etcd-version-switcher.service"), func() (bool, string) {
			st, err := status(t, a)
			if err != nil {
				return false, err.Error()
			}
			for _, m := range st.Members {
				if !m.Healthy || !strings.HasPrefix(m.Version, "3.7") {
					return false, fmt.Sprintf("members %+v", st.Members)
				}
			}
			return len(st.Members) == 3, fmt.Sprintf("members %+v", st.Members)
		})
		waitRolled(t, hosts, vs[1], 3*time.Minute)
		s.checkKept(t, before)
	})

	r := load.finish(t)
	t.Logf("client load through the backup, replace and upgrade crashes: %+v", r)
	if r.Acked == 0 || r.Lost != 0 || r.WatchMissed != 0 || len(r.WatchErrors) != 0 || r.OutOfOrder != 0 {
		t.Fatalf("client load: %+v", r)
	}

	t.Run("restore", func(t *testing.T) {
		ctl := func(args ...string) string {
			t.Helper()
			return a.MustExec(t, append(strings.Fields(etcdctl), args...)...)
		}
		ctl("put", "/sweep/before", "kept")
		for _, h := range s.hosts {
			h.MustExec(t, "systemctl", "start", "etcd-snapshot-uploader.service")
		}
		ctl("put", "/sweep/after", "gone after the restore")
		if out, err := s.c.adm(t, "restore", "latest", "--yes", "--store", s.c.storeURL); err != nil {
			t.Fatalf("etcdadm restore: %v\n%s", err, out)
		}
		s.arm(t,
			// Whoever finds no plan yet checks the backup first.
			[]crash{{"*", crashpoint.RestoreStaged, false}},
			[]crash{{"etcd-a", crashpoint.RestoreStarted, false}},
			[]crash{{"etcd-b", crashpoint.RestoreAside, true}},
			[]crash{{"etcd-c", crashpoint.RestoreData, false}},
		)
		restored := func() (bool, string) {
			ok, why := healthy(t, a, names)()
			if !ok {
				return false, why
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, _, _ := storeStatus(t, ctx, a, "-o", "json")
			var st restoreReport
			json.Unmarshal([]byte(out), &st)
			return st.restoreDone(), out
		}
		s.until(t, "restore", 5*time.Minute, every("etcd-member-join.service"), restored)
		if got := ctl("get", "--print-value-only", "/sweep/before"); !strings.Contains(got, "kept") {
			t.Errorf("/sweep/before after the restore: %q", got)
		}
		if got := strings.TrimSpace(ctl("get", "/sweep/after")); got != "" {
			t.Errorf("/sweep/after (written after the backup) is there: %q", got)
		}
		s.checkKept(t, before)
	})

	t.Run("shrink", func(t *testing.T) {
		if out, err := s.c.adm(t, "spec", "set", "--members", "1", "--store", s.c.storeURL); err != nil {
			t.Fatalf("spec set --members 1: %v\n%s", err, out)
		}
		s.arm(t, []crash{{"*", crashpoint.ReconcileGone, false}})
		s.until(t, "reconcile", 4*time.Minute, every("etcd-reconcile.service"), func() (bool, string) {
			for _, n := range names {
				st, err := status(t, s.hosts[n])
				if err == nil && len(st.Members) == 1 && st.Members[0].Healthy && !st.Members[0].Learner {
					return true, ""
				}
			}
			return false, "not one healthy member yet"
		})
		s.checkKept(t, before)
		s.checkBackups(t)
	})
	t.Logf("crash points reached: %d\n%s", len(s.fired), strings.Join(s.fired, "\n"))
}

// TestCrashPointSweepVolumes: the pool volume provider's steps, killed on
// three masters booting from one config (one point each, a chain on the
// first); volume attach runs again by itself (Restart=on-failure) and
// member join waits for its identity. The cluster converges with each
// volume held by exactly one host.
func TestCrashPointSweepVolumes(t *testing.T) {
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	s := newSweep(t, poolOptions(len(names)))
	poolVolumes(t, s.c)
	s.arm(t,
		[]crash{{"master-1", crashpoint.VolumeClaimed, false}, {"master-1", crashpoint.VolumeIdentity, false}},
		[]crash{{"master-2", crashpoint.VolumeFormat, false}},
		[]crash{{"master-3", crashpoint.VolumeMounted, false}},
	)
	var hosts []*harness.Host
	for i := range names {
		m := fmt.Sprintf("master-%d", i+1)
		hosts = append(hosts, s.boot(t, m, m))
	}
	s.until(t, "volumes", 4*time.Minute, nil, healthy(t, hosts[0], names))
	held := map[string]string{}
	for _, h := range hosts {
		v := identity(t, h)
		if other, dup := held[v]; dup {
			t.Errorf("volume %s is held by %s and %s", v, other, h.Name())
		}
		held[v] = h.Name()
		if out := h.MustExec(t, "findmnt", "-n", "-o", "SOURCE", "/var/lib/etcd"); !strings.HasPrefix(out, "/dev/loop") {
			t.Errorf("%s: /var/lib/etcd is on %q, not its volume", h.Name(), strings.TrimSpace(out))
		}
		assertUnitsWork(t, h)
	}
	if got := slices.Sorted(maps.Keys(held)); !slices.Equal(got, names) {
		t.Errorf("volumes held: %v, want %v", held, names)
	}
}

// TestRecoverFromOneMember: two of three masters lose power (one its disk
// too); etcdadm status on the survivor says the majority is lost and names
// both ways out; 'etcdadm recover --from-member' rebuilds the cluster from
// it, by the units, with what it had. The survivor's member join is killed
// once etcd runs forced alone (crashpoint recover.forced), and etcd is
// killed too: systemd restarts it without --force-new-cluster (it applied
// to one start). Member join finishes the recovery when it runs again, and
// the other two come back as new members when their hosts boot, the one
// with its old disk keeping that data aside.
func TestRecoverFromOneMember(t *testing.T) {
	s := newSweep(t, clusterOptions{members: 3})
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	for _, n := range names {
		s.boot(t, n, n)
	}
	a, b, c := s.hosts["etcd-a"], s.hosts["etcd-b"], s.hosts["etcd-c"]
	waitHealthy(t, a, names, 3*time.Minute)
	ctl := func(args ...string) string {
		t.Helper()
		return a.MustExec(t, append(strings.Fields(etcdctl), args...)...)
	}
	ctl("put", "/registry/before-the-loss", "kept")
	b.Crash(t)
	c.Crash(t)
	if err := os.RemoveAll(filepath.Join(b.Root(), "var/lib/etcd/member")); err != nil {
		t.Fatal(err)
	}
	// etcd-a drops its leader at its next election timeout: until then
	// status rightly says the members still see one.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		// etcdctl's JSON leaves out a leader of 0.
		if out, _, err := a.Exec(t, context.Background(), append(strings.Fields(etcdctl), "endpoint", "status", "-w", "json")...); err == nil && !strings.Contains(out, `"leader":`) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("etcd-a still reports a leader 30 s after the majority went: %s %v", out, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	out, _, _ := storeStatus(t, ctx, a)
	cancel()
	for _, want := range []string{"QUORUM LOST: 1 of 3", "etcdadm recover --from-member etcd-a"} {
		if !strings.Contains(out, want) {
			t.Fatalf("etcdadm status does not say %q:\n%s", want, out)
		}
	}
	recoverCmd := `. /etc/etcdadm/etcdadm.env && AWS_SHARED_CREDENTIALS_FILE=/etc/etcdadm/s3-credentials exec /opt/etcdadm/bin/etcdadm recover --from-member etcd-a --yes --store "$ETCDADM_STORE"`
	a.MustExec(t, "sh", "-c", recoverCmd)

	s.arm(t, []crash{{"etcd-a", crashpoint.RecoverForced, false}})
	s.until(t, "recover", 3*time.Minute, func() {
		a.Exec(t, context.Background(), "systemctl", "start", "--no-block", "etcd-member-join.service")
	},
		func() (bool, string) { return true, "" })
	// Killed with the member forced alone: etcd restarts by itself. Member
	// join (its Restart= and its timer) is held back meanwhile, so what
	// restarts etcd is systemd alone.
	a.MustExec(t, "systemctl", "stop", "etcd-member-join.timer", "etcd-member-join.service")
	pid := strings.TrimSpace(a.MustExec(t, "systemctl", "show", "-P", "MainPID", "etcd.service"))
	a.MustExec(t, "systemctl", "kill", "-s", "SIGKILL", "etcd.service")
	var env string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		now := strings.TrimSpace(a.MustExec(t, "systemctl", "show", "-P", "MainPID", "etcd.service"))
		if now != pid && now != "0" {
			env = a.MustExec(t, "sh", "-c", "tr '\\0' '\\n' </proc/"+now+"/environ")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd did not restart etcd within a minute of the kill (MainPID %s)", now)
		}
	}
	if strings.Contains(env, "ETCD_FORCE_NEW_CLUSTER") {
		t.Fatalf("etcd restarted after a crash with --force-new-cluster again: it must apply to one start only")
	}
	if strings.Contains(a.MustExec(t, "cat", "/etc/etcd/etcd.env"), "FORCE_NEW_CLUSTER") {
		t.Fatal("etcd.env holds --force-new-cluster")
	}

	a.MustExec(t, "systemctl", "start", "etcd-member-join.service", "etcd-member-join.timer")
	waitHealthy(t, a, []string{"etcd-a"}, 3*time.Minute)
	ctl("put", "/registry/after-the-recovery", "new")
	for i, h := range []*harness.Host{b, c} { // one learner at a time: the second boots once the first votes
		h.PowerOn(t, s.c.hostOptions())
		waitHealthy(t, a, names[:i+2], 4*time.Minute)
	}
	if got := strings.TrimSpace(ctl("get", "--print-value-only", "/registry/before-the-loss")); got != "kept" {
		t.Errorf("after recovery: %q, want the survivor's data", got)
	}
	if aside := a.MustExec(t, "sh", "-c", "ls -d /var/lib/etcd/member.before-recover-*"); strings.Count(aside, "\n") != 1 {
		t.Errorf("no copy of the survivor's data kept: %q", aside)
	}
	if aside := c.MustExec(t, "sh", "-c", "ls -d /var/lib/etcd/member.before-recover-* || true"); strings.Count(aside, "\n") != 1 {
		t.Errorf("etcd-c came back with its old disk: its data from before the recovery is not kept aside: %q", aside)
	}
}
