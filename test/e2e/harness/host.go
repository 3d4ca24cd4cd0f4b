//go:build linux

package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// defaultBootTimeout bounds how long a host may take from starting
	// nspawn until its systemd reports running or degraded (~0.5 s here).
	defaultBootTimeout = 60 * time.Second
	// powerOffTimeout bounds a clean shutdown before the host is killed.
	powerOffTimeout = 30 * time.Second
	// defaultExecTimeout bounds Exec when its context has no deadline.
	defaultExecTimeout = 2 * time.Minute
)

// hostEnv is the environment of commands run inside a host.
var hostEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LANG=C.UTF-8", "TERM=dumb", "SYSTEMD_COLORS=0", "SYSTEMD_PAGER=", "PAGER=cat",
}

var hostNameRe = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)

// HostOptions is how to boot a host.
type HostOptions struct {
	// Ignition is an Ignition config (JSON, spec 3.x) applied to the host's
	// root with the real ignition-apply before it boots, followed by
	// `systemctl --root preset-all`. Nil boots the plain rootfs.
	// ignition-apply cannot create users (use sysusers.d files) and does not
	// overwrite existing files unless the config says `overwrite: true`.
	Ignition []byte
	// FetchRemote lets ignition-apply download the config's remote sources
	// (from a server on the test machine's loopback: it runs there);
	// otherwise it is run --offline and a remote source is an error.
	FetchRemote bool
	// Binds are files or directories of the test machine bound into the
	// host, e.g. a directory of binaries read-only at /opt/etcdadm/bin.
	Binds []Bind
	// Devices are device nodes of the test machine (a losetup'd
	// /dev/loopN) bound into the host from boot on, at the same path or
	// as "node:path in the host" (what LoopDevices returns).
	Devices []string
	// Addr is the host's address in the network's subnet; the zero value
	// picks the next free one.
	Addr netip.Addr
	// NspawnArgs are extra systemd-nspawn arguments.
	NspawnArgs []string
	// Rootfs is the images/hostroot variant the host boots ("sysupdate":
	// systemd 254 with systemd-sysupdate); "" is bookworm's systemd 252.
	Rootfs string
	// BootTimeout bounds the boot; zero means 60 s.
	BootTimeout time.Duration
	// WhileBooting, if set, is called on the caller's goroutine at every
	// poll while the host boots, once its systemd runs (it may Exec in
	// the host): a test can act on what a unit does during boot.
	WhileBooting func(*Host)
}

// Bind is a bind mount from the test machine into a host.
type Bind struct {
	Source   string // path on the test machine
	Target   string // path in the host; "" means Source
	ReadOnly bool
}

// Host is one booted systemd host: a systemd-nspawn container.
type Host struct {
	name, machine string
	ns, veth      string // its network namespace, its bridge port in the switch
	ip            netip.Addr
	net           *Network
	dir, root     string
	console       string
	cgroups       []string // this host's node in each cgroup hierarchy
	bootTime      time.Duration

	mu      sync.Mutex
	mounted bool
	cmd     *exec.Cmd     // systemd-nspawn
	exited  chan struct{} // closed when nspawn exited
	pid1    int           // the host's systemd, as seen from the test
}

// Boot boots a host named name (a hostname: lower case letters, digits,
// dashes) on the network and waits, bounded, until its systemd reports
// running or degraded. The host is powered off and everything of it
// removed in t.Cleanup.
func (n *Network) Boot(t testing.TB, name string, opts HostOptions) *Host {
	t.Helper()
	if !hostNameRe.MatchString(name) || name == "sw" {
		t.Fatalf("harness: Boot: bad host name %q (want [a-z][a-z0-9-]{0,30}, not \"sw\")", name)
	}
	var ignition string
	if opts.Ignition != nil {
		ignition = ignitionApply(t)
	}
	ip, port, err := n.reserve(name, opts.Addr)
	if err != nil {
		t.Fatalf("harness: Boot %s: %v", name, err)
	}
	h := &Host{
		name:    name,
		machine: "e2e-" + n.id + "-" + name,
		ns:      "e2e-" + n.id + "-" + name,
		veth:    "vh" + strconv.Itoa(port),
		ip:      ip,
		net:     n,
		dir:     filepath.Join(n.work, name),
		exited:  make(chan struct{}),
	}
	h.root = filepath.Join(h.dir, "root")
	h.console = filepath.Join(h.dir, "console.log")
	for _, c := range n.cgroups {
		h.cgroups = append(h.cgroups, filepath.Join(c, h.machine))
	}
	t.Cleanup(func() { h.destroy(t) })
	t.Cleanup(func() { n.holdIfFailed(t) }) // runs first: before any teardown

	rootfs := n.rootfs
	if opts.Rootfs != "" {
		rootfs = rootfsDir(t, opts.Rootfs)
	}
	if err := h.makeRoot(rootfs); err != nil {
		t.Fatalf("harness: Boot %s: %v", name, err)
	}
	if err := h.plugIn(); err != nil {
		t.Fatalf("harness: Boot %s: network: %v", name, err)
	}
	if opts.Ignition != nil {
		start := time.Now()
		if err := h.applyIgnition(ignition, opts.Ignition, opts.FetchRemote); err != nil {
			t.Fatalf("harness: Boot %s: %v", name, err)
		}
		t.Logf("harness: host %q: Ignition config applied in %s", name, time.Since(start).Round(time.Millisecond))
	}
	timeout := opts.BootTimeout
	if timeout <= 0 {
		timeout = defaultBootTimeout
	}
	start := time.Now()
	if err := h.start(opts); err != nil {
		t.Fatalf("harness: Boot %s: %v", name, err)
	}
	state, err := h.waitBooted(start.Add(timeout), opts.WhileBooting)
	if err != nil {
		t.Fatalf("harness: Boot %s: %v\nconsole (%s):\n%s", name, err, h.console, tail(h.console, 40))
	}
	h.bootTime = time.Since(start)
	t.Logf("harness: host %q (%s) %s after %s; enter it with: nsenter -t %d -a /bin/bash",
		name, ip, state, h.bootTime.Round(time.Millisecond), h.pid1)
	if state == "degraded" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, _, _ := h.exec(ctx, "systemctl", "--failed", "--no-legend")
		cancel()
		t.Logf("harness: host %q failed units:\n%s", name, out)
	}
	return h
}

// makeRoot mounts the host's root: an overlay with the shared rootfs below
// and the host's own upper directory.
func (h *Host) makeRoot(rootfs string) error {
	upper, work := filepath.Join(h.dir, "upper"), filepath.Join(h.dir, "work")
	for _, d := range []string{upper, work, h.root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	data := "lowerdir=" + rootfs + ",upperdir=" + upper + ",workdir=" + work
	if err := syscall.Mount("overlay", h.root, "overlay", 0, data); err != nil {
		return fmt.Errorf("mount overlay on %s (%s): %w", h.root, data, err)
	}
	h.mu.Lock()
	h.mounted = true
	h.mu.Unlock()
	// nspawn locks the image directory with a file named after its device
	// and inode; record the name so a sweep can remove it after a crash.
	var st syscall.Stat_t
	if err := syscall.Stat(h.root, &st); err != nil {
		return err
	}
	lock := fmt.Sprintf("inode-%d:%d\n", st.Dev, st.Ino)
	return os.WriteFile(filepath.Join(h.dir, lockRecord), []byte(lock), 0o644)
}

// plugIn makes the host's network namespace with eth0, the far end of a
// veth whose near end is a port of the switch's bridge.
func (h *Host) plugIn() error {
	sw := h.net.ns
	plen := strconv.Itoa(h.net.prefix.Bits())
	for _, args := range [][]string{
		{"netns", "add", h.ns},
		{"-n", sw, "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"-n", sw, "link", "set", h.veth, "master", "br0", "up"},
		{"-n", h.ns, "link", "set", "lo", "up"},
		{"-n", h.ns, "addr", "add", h.ip.String() + "/" + plen, "dev", "eth0"},
		{"-n", h.ns, "link", "set", "eth0", "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// applyIgnition runs ignition-apply on the host's root, then presets the
// units, as Ignition and systemd's first boot would on a real host.
func (h *Host) applyIgnition(bin string, config []byte, fetch bool) error {
	// Flatcar and Fedora CoreOS keep systemd's default preset, "disable *":
	// a unit the config does not enable stays off. Debian ships "enable *";
	// the same file name under /etc overrides it, as it would there.
	presets := filepath.Join(h.root, "etc/systemd/system-preset")
	if err := os.MkdirAll(presets, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(presets, "99-default.preset"), []byte("disable *\n"), 0o644); err != nil {
		return err
	}
	cfg := filepath.Join(h.dir, "config.ign")
	if err := os.WriteFile(cfg, config, 0o600); err != nil {
		return err
	}
	// ignition-apply refuses to run unless it believes it is in a
	// container; it is: it writes a container's root.
	args := []string{"--root", h.root, "--ignore-unsupported", cfg}
	if !fetch {
		args = append([]string{"--offline"}, args...)
	}
	out, err := output([]string{"container=etcdadm-e2e"}, bin, args...)
	_ = os.WriteFile(filepath.Join(h.dir, "ignition.log"), []byte(out), 0o644)
	if err != nil {
		return fmt.Errorf("ignition-apply: %w", err)
	}
	// preset-all also reports the image's masked units; only failure counts.
	// enable-only: the image's own units stay as its packages set them;
	// ours follow Ignition's preset and the distribution default below.
	if _, err := output(nil, "systemctl", "--root="+h.root, "preset-all", "--preset-mode=enable-only"); err != nil {
		return fmt.Errorf("preset after Ignition: %w", err)
	}
	return nil
}

// start runs systemd-nspawn in the host's own cgroups (nspawn without
// systemd as PID 1 of the machine needs a cgroup of its own), its console
// going to console.log.
func (h *Host) start(opts HostOptions) error {
	var procs []string
	for _, c := range h.cgroups {
		if err := os.Mkdir(c, 0o755); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		procs = append(procs, filepath.Join(c, "cgroup.procs"))
	}
	args := []string{
		"--boot", "--register=no", "--keep-unit",
		"-D", h.root, "-M", h.machine, "--hostname=" + h.name,
		"--network-namespace-path=" + filepath.Join(netnsDir, h.ns),
		"--console=read-only", "--resolv-conf=off", "--timezone=off", "--link-journal=no",
	}
	for _, b := range opts.Binds {
		target := b.Target
		if target == "" {
			target = b.Source
		}
		flag := "--bind="
		if b.ReadOnly {
			flag = "--bind-ro="
		}
		args = append(args, flag+b.Source+":"+target)
	}
	for _, d := range opts.Devices {
		args = append(args, "--bind="+d)
	}
	args = append(args, opts.NspawnArgs...)

	con, err := os.OpenFile(h.console, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer con.Close()
	// The shell moves itself into the host's cgroups, then becomes nspawn.
	script := `for f in $E2E_CGROUP_PROCS; do echo $$ >"$f" || exit 125; done; unset E2E_CGROUP_PROCS; exec "$@"`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh", "systemd-nspawn"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TERM=dumb", "E2E_CGROUP_PROCS=" + strings.Join(procs, " ")}
	cmd.Stdout, cmd.Stderr = con, con
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start systemd-nspawn: %w", err)
	}
	h.mu.Lock()
	h.cmd = cmd
	h.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(h.exited)
	}()
	return nil
}

// waitBooted finds the host's PID 1 and polls its state until systemd
// reports running or degraded, nspawn exits, or the deadline passes.
func (h *Host) waitBooted(deadline time.Time, while func(*Host)) (string, error) {
	nspawn := h.cmd.Process.Pid
	for h.pid1 == 0 {
		if pid := systemdChild(nspawn); pid != 0 {
			h.mu.Lock()
			h.pid1 = pid
			h.mu.Unlock()
			break
		}
		if err := h.waitTick(deadline, 20*time.Millisecond); err != nil {
			return "", fmt.Errorf("no systemd started under systemd-nspawn: %w", err)
		}
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, errOut, err := h.exec(ctx, "systemctl", "is-system-running")
		cancel()
		// is-system-running exits non-zero until the state is "running".
		state := strings.TrimSpace(out)
		if state == "running" || state == "degraded" {
			return state, nil
		}
		if while != nil {
			while(h)
		}
		if werr := h.waitTick(deadline, 50*time.Millisecond); werr != nil {
			return "", fmt.Errorf("systemd not running (last state %q: %v %s): %w", state, err, strings.TrimSpace(errOut), werr)
		}
	}
}

// waitTick sleeps one poll interval, or says why waiting is over.
func (h *Host) waitTick(deadline time.Time, d time.Duration) error {
	if time.Now().After(deadline) {
		return errors.New("timed out")
	}
	select {
	case <-h.exited:
		return fmt.Errorf("systemd-nspawn exited (%v)", h.cmd.ProcessState)
	case <-time.After(d):
		return nil
	}
}

// systemdChild is the child of pid that runs systemd, or 0.
func systemdChild(pid int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, c := range strings.Fields(string(b)) {
			comm, err := os.ReadFile("/proc/" + c + "/comm")
			if err == nil && strings.TrimSpace(string(comm)) == "systemd" {
				n, _ := strconv.Atoi(c)
				return n
			}
		}
	}
	return 0
}

// Name is the host's name (and hostname).
func (h *Host) Name() string { return h.name }

// IP is the host's address in the network's subnet.
func (h *Host) IP() netip.Addr { return h.ip }

// PID is the host's systemd (its PID 1) as the test machine sees it, for
// `nsenter -t PID -a`.
func (h *Host) PID() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pid1
}

// Root is the host's root directory as the test machine sees it (the
// overlay mount), for looking at files from outside.
func (h *Host) Root() string { return h.root }

// BootTime is how long the host took from starting nspawn to running.
func (h *Host) BootTime() time.Duration { return h.bootTime }

// Running reports whether the host's systemd-nspawn still runs.
func (h *Host) Running() bool {
	h.mu.Lock()
	started := h.cmd != nil
	h.mu.Unlock()
	if !started {
		return false
	}
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

// Exec runs a command inside the host (in all its namespaces, like a
// login shell) and returns its output. Without a deadline in ctx it is
// bounded by two minutes; when ctx ends, the command is killed.
func (h *Host) Exec(t testing.TB, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("harness: Exec on %s: no command", h.name)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultExecTimeout)
		defer cancel()
	}
	return h.exec(ctx, args...)
}

// MustExec runs a command inside the host, bounded by two minutes, and
// fails the test unless it succeeds. It returns the command's stdout.
func (h *Host) MustExec(t testing.TB, args ...string) string {
	t.Helper()
	out, errOut, err := h.Exec(t, context.Background(), args...)
	if err != nil {
		t.Fatalf("harness: on %s: %v\nstdout:\n%s\nstderr:\n%s", h.name, err, out, errOut)
	}
	return out
}

func (h *Host) exec(ctx context.Context, args ...string) (string, string, error) {
	pid := h.PID()
	// A dead host's PID may be reused: never nsenter into it.
	if pid == 0 || !h.Running() {
		return "", "", fmt.Errorf("harness: %s: %s: host is not running", h.name, strings.Join(args, " "))
	}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-a", "--"}, args...)...)
	cmd.Env = hostEnv
	// nsenter forks the command into the host's PID namespace and does not
	// pass signals on: when ctx ends, kill its whole process group, which
	// the command inside belongs to.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), errOut.String(), fmt.Errorf("harness: %s: %s: %w", h.name, strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), nil
}

// PowerOff shuts the host down as a power button would (SIGTERM to nspawn:
// systemd stops its units), bounded by 30 s, then kills what is left, and
// unplugs its port of the switch (Partition(t, false) would plug it back
// in). Its network namespace, root and cgroups stay until the test's
// cleanup.
func (h *Host) PowerOff(t testing.TB) {
	t.Helper()
	start := time.Now()
	if err := h.stop(); err != nil {
		t.Fatalf("harness: PowerOff %s: %v", h.name, err)
	}
	t.Logf("harness: host %q powered off in %s", h.name, time.Since(start).Round(time.Millisecond))
}

// Crash stops the host at once, as a power cut would: everything in it is
// killed, nothing is shut down in order, and its port is unplugged.
func (h *Host) Crash(t testing.TB) {
	t.Helper()
	if err := h.halt(false); err != nil {
		t.Fatalf("harness: Crash %s: %v", h.name, err)
	}
	t.Logf("harness: host %q crashed", h.name)
}

// Reprovision applies an Ignition config (opts.Ignition) to the root of
// a host that is powered off, as a reprovisioning that keeps the disk
// would (the host's files stay, the config's are added), then powers it on
// with opts.
func (h *Host) Reprovision(t testing.TB, opts HostOptions) {
	t.Helper()
	if h.Running() {
		t.Fatalf("harness: Reprovision %s: still running; power it off first", h.name)
	}
	if opts.Ignition == nil {
		t.Fatalf("harness: Reprovision %s: no Ignition config", h.name)
	}
	if err := h.applyIgnition(ignitionApply(t), opts.Ignition, opts.FetchRemote); err != nil {
		t.Fatalf("harness: Reprovision %s: %v", h.name, err)
	}
	t.Logf("harness: host %q: Ignition config applied to its disk", h.name)
	h.PowerOn(t, opts)
}

// PowerOn boots a host that was powered off or crashed again, on the same
// root (its disk) and address, with the same options it first booted
// with: the port is plugged back in and systemd starts from scratch.
func (h *Host) PowerOn(t testing.TB, opts HostOptions) {
	t.Helper()
	if h.Running() {
		t.Fatalf("harness: PowerOn %s: still running", h.name)
	}
	if err := removeCgroups(h.cgroups); err != nil {
		t.Fatalf("harness: PowerOn %s: %v", h.name, err)
	}
	if err := run("ip", "-n", h.net.ns, "link", "set", h.veth, "up"); err != nil {
		t.Fatalf("harness: PowerOn %s: %v", h.name, err)
	}
	h.mu.Lock()
	h.exited, h.pid1 = make(chan struct{}), 0
	h.mu.Unlock()
	timeout := opts.BootTimeout
	if timeout <= 0 {
		timeout = defaultBootTimeout
	}
	start := time.Now()
	if err := h.start(opts); err != nil {
		t.Fatalf("harness: PowerOn %s: %v", h.name, err)
	}
	state, err := h.waitBooted(start.Add(timeout), opts.WhileBooting)
	if err != nil {
		t.Fatalf("harness: PowerOn %s: %v\nconsole (%s):\n%s", h.name, err, h.console, tail(h.console, 40))
	}
	t.Logf("harness: host %q powered on again: %s after %s", h.name, state, time.Since(start).Round(time.Millisecond))
}

func (h *Host) stop() error { return h.halt(true) }

func (h *Host) halt(clean bool) error {
	if clean && h.Running() {
		if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("signal systemd-nspawn: %w", err)
		}
		select {
		case <-h.exited:
		case <-time.After(powerOffTimeout):
		}
	}
	// nspawn runs in the host's cgroups: this kills it and everything it
	// left behind.
	if err := killCgroups(h.cgroups); err != nil {
		return err
	}
	h.mu.Lock()
	started := h.cmd != nil
	h.mu.Unlock()
	if started {
		select {
		case <-h.exited:
		case <-time.After(killTimeout):
			return fmt.Errorf("systemd-nspawn (pid %d) still running %s after SIGKILL", h.cmd.Process.Pid, killTimeout)
		}
	}
	// The kernel of the host's network namespace would still answer for
	// its address: unplug it, as a powered-off machine's NIC goes dark.
	if _, err := os.Stat(filepath.Join(netnsDir, h.ns)); err == nil {
		if err := run("ip", "-n", h.net.ns, "link", "set", h.veth, "down"); err != nil {
			return err
		}
	}
	return nil
}

// Partition cuts the host off the network (on) or plugs it back in (off),
// by setting its port of the switch down or up. The host does not notice
// beyond a lost carrier.
func (h *Host) Partition(t testing.TB, on bool) {
	t.Helper()
	state := "up"
	if on {
		state = "down"
	}
	if err := run("ip", "-n", h.net.ns, "link", "set", h.veth, state); err != nil {
		t.Fatalf("harness: Partition %s: %v", h.name, err)
	}
}

// destroy stops the host and removes its namespace, mount, cgroups and
// directory; on failure it first logs what the host has to say.
func (h *Host) destroy(t testing.TB) {
	if t.Failed() {
		if h.Running() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			failed, _, _ := h.exec(ctx, "systemctl", "--failed", "--no-legend")
			journal, _, _ := h.exec(ctx, "journalctl", "-b", "--no-pager", "-n", "60")
			cancel()
			t.Logf("harness: host %q failed units:\n%s\njournal (last 60 lines):\n%s", h.name, failed, journal)
		}
		if _, err := os.Stat(h.console); err == nil {
			t.Logf("harness: host %q console (%s), last lines:\n%s", h.name, h.console, tail(h.console, 30))
		}
	}
	var errs []error
	if err := h.stop(); err != nil {
		errs = append(errs, err)
	}
	// The veth goes with the namespace that holds its far end.
	if err := deleteNetns(h.ns); err != nil {
		errs = append(errs, err)
	}
	h.mu.Lock()
	mounted := h.mounted
	h.mu.Unlock()
	if mounted {
		if err := unmount(h.root); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeCgroups(h.cgroups); err != nil {
		errs = append(errs, err)
	}
	removeNspawnLock(h.dir)
	if err := removeTree(filepath.Join(nspawnPropagate, h.machine)); err != nil {
		errs = append(errs, err)
	}
	if err := removeTree(h.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("harness: cleanup of host %s: %v", h.name, err)
	}
}

// tail is the last n lines of a file, or why it cannot be read.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
