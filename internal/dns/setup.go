package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/hostaddr"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Provider kinds (--provider).
const (
	ProviderHosts   = "hosts"
	ProviderRFC2136 = "rfc2136"
)

// ProviderConfig chooses the provider and holds its settings (the
// --provider and --rfc2136-* flags).
type ProviderConfig struct {
	Kind string // ProviderHosts or ProviderRFC2136
	// Root prefixes /etc/hosts (tests).
	Root string
	// Server (host:port), Zone (default: the DNS suffix), TSIGFile
	// (hmac-sha256:NAME:SECRET) and TTL (seconds): rfc2136 only.
	Server, Zone, TSIGFile string
	TTL                    uint32
}

// New builds the provider; suffix is the zone when Zone is empty.
func (pc ProviderConfig) New(suffix string) (Provider, error) {
	switch pc.Kind {
	case ProviderHosts:
		return &HostsFile{Path: filepath.Join(pc.Root, "etc", "hosts")}, nil
	case ProviderRFC2136:
		if pc.Server == "" || pc.TSIGFile == "" {
			return nil, fmt.Errorf("%w: --provider rfc2136 needs --rfc2136-server and --rfc2136-tsig-file", ErrInvalid)
		}
		if _, _, err := net.SplitHostPort(pc.Server); err != nil {
			return nil, fmt.Errorf("%w: --rfc2136-server %q: want host:port: %w", ErrInvalid, pc.Server, err)
		}
		key, err := ReadTSIGFile(pc.TSIGFile)
		if err != nil {
			return nil, err
		}
		zone := pc.Zone
		if zone == "" {
			zone = suffix
		}
		return &RFC2136{Server: pc.Server, Zone: zone, Key: key, TTL: pc.TTL}, nil
	default:
		return nil, fmt.Errorf("%w: --provider %q: want hosts or rfc2136", ErrInvalid, pc.Kind)
	}
}

// Defaults fills what the flags left out: the name by member join's rule
// (hostaddr.MemberName), the suffix from the store's settings.
func (c *Config) Defaults(ctx context.Context, st store.Store) error {
	name, err := hostaddr.MemberName(c.Name, c.VolumeProvider)
	if err != nil {
		return err
	}
	c.Name = name
	if c.Suffix == "" {
		var err error
		if c.Suffix, err = SuffixFromStore(ctx, st); err != nil {
			return err
		}
	}
	return nil
}

// SuffixFromStore reads dnsSuffix from the cluster settings; the store may
// be slow at boot, so it retries within a bound.
func SuffixFromStore(ctx context.Context, st store.Store) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	backoff := time.Second
	for {
		cl, err := clusterspec.Load(ctx, st)
		if err == nil {
			if cl.Settings.DNSSuffix == "" {
				return "", fmt.Errorf("--dns-suffix not set and %s in %s has no dnsSuffix", clusterspec.SettingsKey, st)
			}
			return cl.Settings.DNSSuffix, nil
		}
		if errors.Is(err, clusterspec.ErrNotSeeded) || errors.Is(err, clusterspec.ErrInvalid) {
			return "", fmt.Errorf("--dns-suffix not set: %w", err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("--dns-suffix not set and the store did not answer: %w", err)
		case <-time.After(backoff):
			backoff = min(2*backoff, 15*time.Second)
		}
	}
}

// Addresses are what to publish: --address (address, comma separated)
// when set, else the first of --ip (ips, ETCDADM_IPS: the addresses
// member join puts in the certificates), else this host's first address
// by member join's rule (hostaddr.Primary).
func Addresses(address string, ips []string) ([]netip.Addr, error) {
	if address != "" {
		var out []netip.Addr
		for _, s := range strings.Split(address, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("%w: --address: %w", ErrInvalid, err)
			}
			out = append(out, a.Unmap())
		}
		return out, nil
	}
	var given []net.IP
	for _, s := range ips {
		ip := net.ParseIP(strings.TrimSpace(s))
		if ip == nil {
			return nil, fmt.Errorf("%w: --ip %q is not an IP address", ErrInvalid, s)
		}
		given = append(given, ip)
	}
	a, err := hostaddr.Primary(given)
	if err != nil {
		return nil, fmt.Errorf("--address and --ip not set: %w", err)
	}
	return []netip.Addr{a}, nil
}
