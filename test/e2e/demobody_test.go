//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// demo is `make demo`'s cluster while TestDemo keeps it: its hosts by host
// name, each with its PID in dir/hosts/NAME for test/demo/cluster.sh.
type demo struct {
	c       *cluster
	kp      *kubePlane
	dir     string
	etcd    []string // the apiservers' etcd servers
	hosts   map[string]*harness.Host
	booted  int // hosts booted so far: the next is master-(booted+1)
	upgrade string
}

// bootDemo is what `make demo` shows: three masters booted from one
// Ignition config, each member on a pool volume and every member name
// resolving on every host, a kube-apiserver on each, real keys written
// through Kubernetes and etcdctl, and a backup; no unit it enabled failed
// or restarting. It writes dir/howto.txt (what make demo prints: where to
// look, and the next things an operator does, each as it works on the
// demo) and dir/master.ign.
func bootDemo(t *testing.T, dir string) *demo {
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	o := poolOptions(len(names))
	o.kube, o.versions = true, testenv.EtcdVersions()
	start := time.Now()
	c, _, byName := newPoolClusterWith(t, names, o)
	d := &demo{c: c, dir: dir, etcd: memberURLs(names, volSuffix), hosts: map[string]*harness.Host{}, upgrade: o.versions[len(o.versions)-1]}
	if err := os.MkdirAll(filepath.Join(dir, "hosts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "requests"), 0o700); err != nil {
		t.Fatal(err)
	}
	var hosts []*harness.Host // in the order they booted
	for _, h := range byName {
		hosts = append(hosts, h)
	}
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].Name() < hosts[j].Name() })
	for _, h := range hosts {
		d.add(t, h)
	}
	healthy := time.Since(start)
	for _, from := range hosts {
		for _, to := range names {
			waitResolves(t, from, to, byName[to].IP().String())
		}
	}
	d.kp = newKubePlane(t, c)
	d.kp.startAll(t, hosts, d.etcd)
	a := hosts[0]
	for _, args := range [][]string{{"create", "namespace", "demo"}, {"create", "configmap", "hello", "-n", "demo", "--from-literal=greeting=hello"}} {
		if out, err := kubectl(t, a, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	a.MustExec(t, append(strings.Fields(etcdctl), "put", "/demo/hello", "world")...)
	for _, h := range hosts { // the timer's job, run now: the leader uploads
		h.MustExec(t, "systemctl", "start", "etcd-snapshot-uploader.service")
	}
	for _, h := range hosts {
		assertUnitsWork(t, h)
	}
	status := a.MustExec(t, "/opt/etcdadm/bin/etcdadm", "status")
	backups := a.MustExec(t, "/opt/etcdadm/bin/etcdadm", "backup", "list")

	var b strings.Builder
	fmt.Fprintf(&b, "3 masters booted from one Ignition config; healthy %v after boot began.\n", healthy.Round(100*time.Millisecond))
	fmt.Fprintf(&b, "Each member lives on a pool volume; every member name (etcd-a.%s, ...) resolves on every host.\n", volSuffix)
	fmt.Fprintf(&b, "A kube-apiserver runs on each master, on etcd.\n\n")
	fmt.Fprintf(&b, "$ etcdadm status    (on %s)\n%s\n$ etcdadm backup list\n%s\n", a.Name(), status, backups)
	fmt.Fprintf(&b, "Kubernetes, from this machine (as root):\n  nsenter -t %d -a %s get namespaces\n\n", a.PID(), kubectlOn)
	fmt.Fprintf(&b, "Look around (as root, from this machine):\n")
	for _, h := range hosts {
		fmt.Fprintf(&b, "  enter %s (member %s, %s):  nsenter -t %d -a /bin/bash\n", h.Name(), identity(t, h), h.IP(), h.PID())
	}
	fmt.Fprintf(&b, `  then, inside a host:
    systemctl status etcd etcd-member-join etcd-snapshot-uploader.timer kube-apiserver
    journalctl -u etcd-member-join -u etcd-volume-attach -u etcd-dns-registrar
    etcdadm status; etcdadm backup list; etcdadm backup verify latest --restore-test
    getent hosts etcd-b.%s
  the Ignition config they booted from: %s

`, volSuffix, filepath.Join(dir, "master.ign"))
	b.WriteString(d.nextSteps(repoTop(t), e2eVersion))
	b.WriteString("\nRemove everything: make demo-down\n")
	os.WriteFile(filepath.Join(dir, "master.ign"), c.ign, 0o600)
	if err := os.WriteFile(filepath.Join(dir, "howto.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// demoScript is how the next steps call test/demo/cluster.sh: from the
// repository's top directory, where make demo runs.
const demoScript = "test/demo/cluster.sh"

// nextSteps are the next things an operator does, as commands that work
// on the demo when run in this order (TestMakeDemo runs them as printed).
// Each step is a title line "N. ..." and its commands, indented.
func (d *demo) nextSteps(top, from string) string {
	s := demoScript
	return fmt.Sprintf(`Next, what an operator does (as root, from %[1]s; each line works as printed, in this order):
  %[2]s on HOST CMD... runs CMD on a master (etcdadm, etcdctl and kubectl on its PATH);
  %[2]s each CMD... on every running master; boot and crash HOST stand in for your cloud.

1. Upgrade etcd %[3]s -> %[4]s, one member at a time, leader last, a verified backup first:
   %[2]s on master-1 etcdadm upgrade --to %[4]s
   %[2]s each systemctl start --no-block etcd-version-switcher   # else their timers start them
   %[2]s on master-1 etcdadm status   # until every member runs %[4]s (a minute or two)

2. Replace a host: master-2 loses its power; a new master from the same Ignition config takes over
   its volume and member name once the volume's claim lapses (30 s):
   %[2]s crash master-2
   %[2]s boot
   %[2]s on master-1 etcdadm status   # until 3 members are healthy again

3. Resize to 5 members: the spec first, then two more masters from the same Ignition config:
   %[2]s on master-1 etcdadm spec set --members 5
   %[2]s boot
   %[2]s boot
   %[2]s on master-1 etcdadm status   # until 5 members are healthy

4. Restore the latest backup (the switcher took one before the upgrade, the timer takes one every
   15 min; what was written after it is lost), Kubernetes' way:
   %[2]s on master-1 etcdctl put /demo/after-backup lost-by-the-restore
   %[2]s each systemctl stop kube-apiserver
   %[2]s on master-1 etcdadm restore latest --yes
   %[2]s each systemctl start --no-block etcd-member-join   # else their timers act
   %[2]s on master-1 etcdadm status   # until the restore is done and every member healthy
   %[2]s each systemctl start kube-apiserver
   %[2]s on master-1 etcdctl get /demo/ --prefix   # /demo/hello is back, /demo/after-backup is not
`, top, s, from, d.upgrade)
}

// repoTop is the repository's top directory (the tests run in test/e2e).
func repoTop(t testing.TB) string {
	t.Helper()
	top, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// add records h as one of the demo's hosts.
func (d *demo) add(t *testing.T, h *harness.Host) {
	t.Helper()
	d.hosts[h.Name()] = h
	d.booted++
	if err := os.WriteFile(filepath.Join(d.dir, "hosts", h.Name()), []byte(fmt.Sprintln(h.PID())), 0o644); err != nil {
		t.Fatal(err)
	}
}

// serve answers test/demo/cluster.sh's requests (dir/requests/ID.req:
// "boot" or "crash HOST"; the answer in ID.out, its exit code in ID.done)
// until make demo-down removes dir/running, for at most a day.
func (d *demo) serve(t *testing.T) {
	running := filepath.Join(d.dir, "running")
	os.WriteFile(running, nil, 0o644)
	os.WriteFile(filepath.Join(d.dir, "ready"), nil, 0o644)
	for deadline := time.Now().Add(24 * time.Hour); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := os.Stat(running); err != nil {
			return // make demo-down: the harness tears everything down
		}
		reqs, _ := filepath.Glob(filepath.Join(d.dir, "requests", "*.req"))
		slices.Sort(reqs)
		for _, r := range reqs {
			b, err := os.ReadFile(r)
			if err != nil {
				t.Fatal(err)
			}
			out, code := d.handle(t, strings.Fields(string(b)))
			base := strings.TrimSuffix(r, ".req")
			os.Remove(r)
			os.WriteFile(base+".out", []byte(out+"\n"), 0o644)
			os.WriteFile(base+".done", []byte(fmt.Sprintln(code)), 0o644)
		}
	}
}

// handle does one request and returns what to print and the exit code.
func (d *demo) handle(t *testing.T, req []string) (string, int) {
	switch {
	case len(req) == 1 && req[0] == "boot":
		name := fmt.Sprintf("master-%d", d.booted+1)
		h := d.c.boot(t, name)
		d.add(t, h)
		d.kp.install(t, h, mainAPIServer(h), d.etcd)
		return fmt.Sprintf("demo: %s booted from the same Ignition config (%s, pid %d); its etcd-volume-attach claims a free volume, etcd-member-join makes it a member, and a kube-apiserver starts once etcd is healthy", name, h.IP(), h.PID()), 0
	case len(req) == 2 && req[0] == "crash":
		h, ok := d.hosts[req[1]]
		if !ok {
			return fmt.Sprintf("demo: no running host %s (running: %s)", req[1], strings.Join(slices.Sorted(maps.Keys(d.hosts)), " ")), 1
		}
		h.Crash(t)
		delete(d.hosts, req[1])
		os.Remove(filepath.Join(d.dir, "hosts", req[1]))
		return fmt.Sprintf("demo: %s lost its power: nothing shut down in order, its network unplugged", req[1]), 0
	}
	return fmt.Sprintf("demo: unknown request %q (want boot, or crash HOST)", strings.Join(req, " ")), 2
}

// TestMakeDemo runs `make demo`'s script as a user would, then the kubectl
// line it prints and every next step it prints, exactly as printed and in
// its order, checking after each what an operator would look for; then
// `make demo-down`.
func TestMakeDemo(t *testing.T) {
	t.Parallel() // mostly waits: it runs beside the other long scenarios
	dir := filepath.Join(t.TempDir(), "demo")
	top := repoTop(t)
	run := func(line string, timeout time.Duration) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Dir, cmd.Env = top, append(os.Environ(), "DEMO_DIR="+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := run("test/demo/cluster.sh down", 5*time.Minute); err != nil || !strings.Contains(out, "removed everything") {
			t.Errorf("make demo-down: %v\n%s", err, out)
		}
	})
	out, err := run("test/demo/cluster.sh up", 15*time.Minute)
	if err != nil {
		t.Fatalf("make demo: %v\n%s", err, out)
	}
	t.Logf("make demo printed:\n%s", out)
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "kubectl") && strings.HasSuffix(l, "get namespaces") {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatalf("make demo printed no kubectl line:\n%s", out)
	}
	got, err := run(line, time.Minute)
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, got)
	}
	for _, ns := range []string{"default", "kube-system", "demo"} {
		if !strings.Contains(got, "\n"+ns+" ") {
			t.Errorf("%s lists no namespace %s:\n%s", line, ns, got)
		}
	}

	steps := demoSteps(out)
	if len(steps) != 4 {
		t.Fatalf("make demo printed %d next steps, want 4 (upgrade, replace a host, resize, restore):\n%s", len(steps), out)
	}
	status := func() (demoStatus, string) {
		out, err := run(demoScript+" on master-1 etcdadm status -o json --dial-timeout 2s", time.Minute)
		var s demoStatus
		if err == nil {
			err = json.Unmarshal([]byte(out), &s)
		}
		if err != nil {
			return s, fmt.Sprintf("%v: %s", err, out)
		}
		return s, out
	}
	upgrade := steps[0].version
	// What an operator waits for after each step before looking at its
	// status line: the members healthy, at the version, the restore done.
	waits := []struct {
		members int
		version string
		restore bool
		timeout time.Duration
	}{
		{3, upgrade, false, 6 * time.Minute},
		{3, upgrade, false, 3 * time.Minute},
		{5, upgrade, false, 4 * time.Minute},
		{5, upgrade, true, 5 * time.Minute},
	}
	memberOf := func(host string) string {
		out, err := run(demoScript+" on "+host+` sh -c '. /run/etcdadm/identity.env && echo $ETCDADM_MEMBER_NAME'`, time.Minute)
		if err != nil {
			t.Fatalf("%s's member: %v\n%s", host, err, out)
		}
		return strings.TrimSpace(out)
	}
	var replaced string // the member of the host step 2 crashes
	for i, st := range steps {
		w := waits[i]
		t.Logf("step %s", st.title)
		if i == 1 {
			replaced = memberOf("master-2")
		}
		for _, cmd := range st.commands {
			if strings.Contains(cmd, "etcdadm status") {
				start := time.Now()
				var last string
				for ok := false; !ok; time.Sleep(2 * time.Second) {
					var s demoStatus
					s, last = status()
					ok = s.healthy(w.members, w.version) && (!w.restore || s.restoreDone())
					if !ok && time.Since(start) > w.timeout {
						j, _ := run(demoScript+" each journalctl --no-pager -n 40 -u etcd-volume-attach -u etcd-member-join -u etcd -u etcd-version-switcher", 2*time.Minute)
						t.Fatalf("step %s: not %d healthy members at %s (restore done: %v) %v after %q; last status: %s\nthe hosts' journals:\n%s", st.title, w.members, w.version, w.restore, w.timeout, st.commands[0], last, j)
					}
				}
				t.Logf("step %d: done %v after its status line's wait began", i+1, time.Since(start).Round(100*time.Millisecond))
			}
			out, err := run(cmd, 5*time.Minute)
			if err != nil {
				t.Fatalf("step %s: %s: %v\n%s", st.title, cmd, err, out)
			}
			t.Logf("$ %s\n%s", cmd, out)
			switch {
			case i == 1 && strings.HasSuffix(cmd, " boot"):
				if !strings.Contains(out, "master-4 booted") {
					t.Fatalf("step %s: %s printed %q, want master-4 booted", st.title, cmd, out)
				}
			case i == 3 && strings.Contains(cmd, "etcdctl get"):
				if !strings.Contains(out, "/demo/hello\nworld") || strings.Contains(out, "after-backup") {
					t.Errorf("step %s: %s printed %q: want /demo/hello = world, from the backup, and no /demo/after-backup, written after it", st.title, cmd, out)
				}
			}
		}
	}
	// The crashed host's member lives on in the host that replaced it.
	if got := memberOf("master-4"); got != replaced {
		t.Errorf("master-4's member: %q, want %s (master-2's, whose host it replaced)", got, replaced)
	}
	// Kubernetes again on the restored etcd, through an apiserver of a
	// master booted after the backup.
	get := demoScript + " on master-6 kubectl get configmap hello -n demo -o jsonpath={.data.greeting}"
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Second) {
		got, err = run(get, time.Minute)
		if err == nil && got == "hello" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the restore: %q %v, want the configmap from the backup", get, got, err)
		}
	}
}

// demoStep is one next step make demo prints: its title line and commands.
type demoStep struct {
	title    string
	commands []string
	version  string // an upgrade's target
}

var (
	demoStepTitle = regexp.MustCompile(`^([0-9]+)\. `)
	demoUpgradeTo = regexp.MustCompile(`etcdadm upgrade --to ([0-9.]+)`)
)

// demoSteps are the next steps in make demo's output.
func demoSteps(out string) []demoStep {
	var steps []demoStep
	for _, l := range strings.Split(out, "\n") {
		switch {
		case demoStepTitle.MatchString(l):
			steps = append(steps, demoStep{title: l})
		case len(steps) > 0 && strings.HasPrefix(strings.TrimSpace(l), demoScript+" "):
			cmd := strings.TrimSpace(l)
			st := &steps[len(steps)-1]
			st.commands = append(st.commands, cmd)
			if m := demoUpgradeTo.FindStringSubmatch(cmd); m != nil {
				st.version = m[1]
			}
		}
	}
	return steps
}

// demoStatus is what the steps read of etcdadm status -o json.
type demoStatus struct {
	hostStatus
	restoreReport
}

// healthy: n voting members, every one healthy and at version.
func (s demoStatus) healthy(n int, version string) bool {
	if len(s.Members) != n {
		return false
	}
	for _, m := range s.Members {
		if !m.Healthy || m.Learner || m.Version != version {
			return false
		}
	}
	return true
}
