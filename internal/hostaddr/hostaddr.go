// Package hostaddr is the one rule for this host's own addresses: which
// ones etcd's certificates name and peers reach (internal/memberflags),
// and which one the DNS registrar publishes. Standard library only, so
// every binary may import it (the registrar must not link etcd).
package hostaddr

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
)

// HostIPs are this host's global unicast addresses, IPv4 first, in the
// order the kernel lists them.
func HostIPs() ([]net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list this host's addresses: %w", err)
	}
	return order(addrs), nil
}

func order(addrs []net.Addr) []net.IP {
	var v4, v6 []net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || !ipn.IP.IsGlobalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			v4 = append(v4, ipn.IP)
		} else {
			v6 = append(v6, ipn.IP)
		}
	}
	return append(v4, v6...)
}

// ErrNoAddress: the host has no global unicast address (yet: at boot the
// network may still be coming up).
var ErrNoAddress = errors.New("this host has no global unicast address")

// Primary is the address that stands for this host where one is needed
// (member join's peer URL without a DNS suffix, the registrar's record):
// the first of ips (--ip, ETCDADM_IPS) when given, else the first of
// HostIPs.
func Primary(ips []net.IP) (netip.Addr, error) {
	if len(ips) == 0 {
		var err error
		if ips, err = HostIPs(); err != nil {
			return netip.Addr{}, err
		}
	}
	for _, ip := range ips {
		if a, ok := netip.AddrFromSlice(ip); ok {
			return a.Unmap(), nil
		}
	}
	return netip.Addr{}, ErrNoAddress
}

// MemberName is the one rule for this host's member name: the name given
// (from identity.env, written by etcd-volume-attach, or a flag); else,
// where a volume provider (local, pool) names the member, an error, since
// the hostname would name a member whose data is not on the volume; else
// the short hostname.
func MemberName(name, volumeProvider string) (string, error) {
	if name != "" {
		return name, nil
	}
	if volumeProvider != "" && volumeProvider != "none" {
		return "", fmt.Errorf("no member identity: the %s volume provider names this member, and /run/etcdadm/identity.env is missing; etcd-volume-attach has not attached this host's volume yet (systemctl status etcd-volume-attach; it restarts on failure)", volumeProvider)
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("no member name and no hostname: %w", err)
	}
	short, _, _ := strings.Cut(h, ".")
	return short, nil
}
