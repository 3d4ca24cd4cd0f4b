//go:build linux

package harness

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Network is a test "switch": a network namespace holding a bridge that
// every host's veth is plugged into. Its subnet exists only inside the
// namespaces the harness made.
type Network struct {
	id       string
	ns       string // the switch's network namespace
	prefix   netip.Prefix
	switchIP netip.Addr
	work     string // per-run directory: host overlays, logs
	rootfs   string
	cgroups  []string // cgroup hierarchies a host gets a node in

	mu    sync.Mutex
	next  netip.Addr
	names map[string]bool
	addrs map[netip.Addr]bool
	ports int
	hold  sync.Once
}

// NewNetwork makes a switch for the IPv4 subnet (CIDR, e.g. "10.77.0.0/24",
// at most /30): hosts get addresses from the first one up, the bridge
// itself the last one (SwitchIP). It first sweeps what dead runs left
// (Sweep) and removes everything it makes in t.Cleanup, after the hosts.
func NewNetwork(t testing.TB, subnet string) *Network {
	t.Helper()
	requireHost(t)
	prefix, err := netip.ParsePrefix(subnet)
	if err != nil || !prefix.Addr().Is4() || prefix.Bits() < 8 || prefix.Bits() > 30 || prefix.Masked() != prefix {
		t.Fatalf("harness: NewNetwork: want an IPv4 subnet like 10.77.0.0/24 (/8 to /30, host bits zero), got %q", subnet)
	}
	rootfs := rootfsDir(t, "bookworm")
	hier, err := cgroupHierarchies()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	Sweep(t)

	id, err := newID()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := writeOwner(id); err != nil {
		t.Fatalf("harness: %v", err)
	}
	base := binary.BigEndian.Uint32(prefix.Addr().AsSlice())
	last := base | (1<<(32-prefix.Bits()) - 1) // broadcast
	n := &Network{
		id:       id,
		ns:       "e2e-" + id + "-sw",
		prefix:   prefix,
		switchIP: addr4(last - 1),
		work:     filepath.Join(os.TempDir(), workPrefix+id),
		rootfs:   rootfs,
		cgroups:  hier,
		next:     addr4(base + 1),
		names:    map[string]bool{},
		addrs:    map[netip.Addr]bool{},
	}
	t.Cleanup(func() { n.destroy(t) })

	if err := os.Mkdir(n.work, 0o700); err != nil {
		t.Fatalf("harness: %v", err)
	}
	plen := strconv.Itoa(prefix.Bits())
	for _, args := range [][]string{
		{"netns", "add", n.ns},
		{"-n", n.ns, "link", "set", "lo", "up"},
		{"-n", n.ns, "link", "add", "br0", "type", "bridge"},
		{"-n", n.ns, "addr", "add", n.switchIP.String() + "/" + plen, "dev", "br0"},
		{"-n", n.ns, "link", "set", "br0", "up"},
	} {
		if err := run("ip", args...); err != nil {
			t.Fatalf("harness: network switch: %v", err)
		}
	}
	t.Logf("harness: network %s: subnet %s, switch namespace %s (bridge br0 %s), work dir %s", id, prefix, n.ns, n.switchIP, n.work)
	return n
}

func addr4(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// ID is the random ID in the names of everything this network made
// (see Leftovers).
func (n *Network) ID() string { return n.id }

// Namespace is the name of the switch's network namespace (under /run/netns).
func (n *Network) Namespace() string { return n.ns }

// SwitchIP is the bridge's own address, where a server started with
// Command is reachable from the hosts.
func (n *Network) SwitchIP() netip.Addr { return n.switchIP }

// Command prepares a command that runs in the switch's network namespace,
// for a server every host reaches at SwitchIP (an S3 store, a DNS server).
// The caller starts it and must stop it before the test ends (t.Cleanup);
// it is killed if the test binary dies.
func (n *Network) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.NamespacePath(), "--", name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// NamespacePath is the switch namespace's path (for nsenter --net=).
func (n *Network) NamespacePath() string { return filepath.Join(netnsDir, n.ns) }

// reserve claims a host name, an address (a zero want picks the next free
// one) and a bridge port.
func (n *Network) reserve(name string, want netip.Addr) (netip.Addr, int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.names[name] {
		return netip.Addr{}, 0, fmt.Errorf("host %q already booted on this network", name)
	}
	ip := want
	if !ip.IsValid() {
		for ip = n.next; n.addrs[ip] && n.prefix.Contains(ip); ip = ip.Next() {
		}
		n.next = ip.Next()
	}
	if !n.prefix.Contains(ip) || ip == n.switchIP || ip == n.prefix.Addr() || n.addrs[ip] || ip.Compare(n.switchIP) > 0 {
		return netip.Addr{}, 0, fmt.Errorf("no free address %s in %s (the switch is %s)", ip, n.prefix, n.switchIP)
	}
	n.names[name] = true
	n.addrs[ip] = true
	n.ports++
	return ip, n.ports, nil
}

// holdIfFailed keeps the hosts of a failed test up for a look, when
// ETCDADM_E2E_HOLD says how long (once per network).
func (n *Network) holdIfFailed(t testing.TB) {
	if !t.Failed() {
		return
	}
	d, err := time.ParseDuration(os.Getenv("ETCDADM_E2E_HOLD"))
	if err != nil || d <= 0 {
		return
	}
	n.hold.Do(func() {
		f := filepath.Join(n.work, "hold")
		if err := os.WriteFile(f, []byte("remove this file to let the test clean up\n"), 0o644); err != nil {
			return
		}
		t.Logf("harness: test failed: hosts stay up for %s, or until you `rm %s`", d, f)
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(f); err != nil {
				return
			}
			time.Sleep(time.Second)
		}
	})
}

// destroy removes everything of this network still on the machine (the
// hosts' own cleanups ran before), then the owner record.
func (n *Network) destroy(t testing.TB) {
	found, err := scan()
	if err != nil {
		t.Errorf("harness: cleanup of network %s: %v", n.id, err)
	}
	if err := removeAll(found[n.id]); err != nil {
		t.Errorf("harness: cleanup of network %s: %v", n.id, err)
	}
}
