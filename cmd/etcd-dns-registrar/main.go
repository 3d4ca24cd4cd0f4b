// Command etcd-dns-registrar makes every etcd member name resolve to the
// host that runs it: it publishes this host's address for its member name
// in the store (a renewed lease), learns the others' and keeps a managed
// /etc/hosts block or an RFC 2136 zone current. A long-running Type=notify
// service with a watchdog. It links no etcd server code (see deps_test.go).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/dns"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Exit codes.
const (
	exitFailed = 1
	exitConfig = 2
)

const description = `Runs until stopped. Every --interval it renews this host's record
(<store>/etcdadm/dns/<name>.json: name, addresses, lease expiry), reads the
others' and makes <name>.<dns-suffix> resolve for every live record:

  --provider hosts     a managed block in <root>/etc/hosts (lines outside it
                       are never touched)
  --provider rfc2136   dynamic updates signed with TSIG (hmac-sha256) to an
                       authoritative server; the key comes from
                       --rfc2136-tsig-file, one line hmac-sha256:NAME:SECRET

Records whose lease expired are removed. When the store or the DNS server is
unreachable it retries with a bounded backoff, says "degraded" in its
systemd status and in --metrics-file, and keeps running.`

func main() {
	app := &cli.App{
		Name:        "etcd-dns-registrar",
		Usage:       "make every etcd member name resolve to the host that runs it",
		Description: description,
		Flags: []cli.Flag{
			cliflags.Store(),
			&cli.StringFlag{Name: "name", EnvVars: []string{"ETCDADM_MEMBER_NAME"}, Usage: "this host's member name (etcd-volume-attach writes it to /run/etcdadm/identity.env; default: the short hostname)"},
			&cli.StringFlag{Name: "address", EnvVars: []string{"ETCDADM_ADDRESS"}, Usage: "address(es) to publish, comma separated (default: the first global unicast address, IPv4 first)"},
			&cli.StringFlag{Name: "dns-suffix", EnvVars: []string{"ETCDADM_DNS_SUFFIX"}, Usage: "member NAME resolves as NAME.SUFFIX (default: dnsSuffix from the store's etcdadm/settings.json)"},
			&cli.StringFlag{Name: "provider", Value: "hosts", EnvVars: []string{"ETCDADM_DNS_PROVIDER"}, Usage: "hosts or rfc2136"},
			&cli.StringFlag{Name: "root", Value: "/", EnvVars: []string{"ETCDADM_ROOT"}, Usage: "prefix of host paths (tests)"},
			&cli.StringFlag{Name: "rfc2136-server", EnvVars: []string{"ETCDADM_RFC2136_SERVER"}, Usage: "authoritative server host:port"},
			&cli.StringFlag{Name: "rfc2136-zone", EnvVars: []string{"ETCDADM_RFC2136_ZONE"}, Usage: "zone to update (default: the DNS suffix)"},
			&cli.StringFlag{Name: "rfc2136-tsig-file", EnvVars: []string{"ETCDADM_RFC2136_TSIG_FILE"}, Usage: "file holding hmac-sha256:KEYNAME:BASE64SECRET"},
			&cli.UintFlag{Name: "rfc2136-ttl", Value: 60, EnvVars: []string{"ETCDADM_RFC2136_TTL"}, Usage: "TTL of the records, seconds"},
			&cli.DurationFlag{Name: "interval", Value: 30 * time.Second, EnvVars: []string{"ETCDADM_DNS_INTERVAL"}, Usage: "how often to renew and resync"},
			&cli.DurationFlag{Name: "lease", Value: 3 * time.Minute, EnvVars: []string{"ETCDADM_DNS_LEASE"}, Usage: "how long a record stays valid without renewal (>= 2 x interval)"},
			&cli.StringFlag{Name: "metrics-file", EnvVars: []string{"ETCDADM_DNS_METRICS_FILE"}, Usage: "write Prometheus metrics here for node_exporter's textfile collector"},
			cliflags.LogLevel(),
		},
		Action:          run,
		HideHelpCommand: true,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-dns-registrar:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(exitConfig)
	}
}

func run(c *cli.Context) error {
	log := cliflags.Logger(c).With("component", "dns-registrar")
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	st, err := cliflags.OpenStore(c)
	if err != nil {
		return cli.Exit(err, exitConfig)
	}
	cfg := dns.Config{
		Name:        c.String("name"),
		Suffix:      c.String("dns-suffix"),
		Interval:    c.Duration("interval"),
		Lease:       c.Duration("lease"),
		MetricsFile: c.String("metrics-file"),
	}
	if cfg.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return cli.Exit(fmt.Errorf("--name not set and no hostname: %w", err), exitConfig)
		}
		cfg.Name, _, _ = strings.Cut(h, ".")
	}
	if cfg.Addresses, err = addresses(c.String("address")); err != nil {
		return cli.Exit(err, exitConfig)
	}
	if cfg.Suffix == "" {
		cfg.Suffix, err = suffixFromStore(ctx, st)
		if err != nil {
			return cli.Exit(err, exitConfig)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cli.Exit(err, exitConfig)
	}
	p, err := provider(c, cfg.Suffix)
	if err != nil {
		return cli.Exit(err, exitConfig)
	}
	watchdog, _ := daemon.SdWatchdogEnabled(false)
	notify := dns.NotifyFunc(func(state string) {
		if _, err := daemon.SdNotify(false, state); err != nil {
			log.Debug("sd_notify", "err", err)
		}
	})
	log.Info("starting", "name", cfg.Name, "addresses", cfg.Addresses, "suffix", cfg.Suffix, "provider", p.Name(), "store", st.String())
	if err := dns.Run(ctx, cfg, st, p, notify, log, watchdog, time.Now); err != nil {
		return cli.Exit(err, exitFailed)
	}
	notify.Notify("STOPPING=1")
	return nil
}

// suffixFromStore reads dnsSuffix from the cluster settings; the store may
// be slow at boot, so it retries within a bound.
func suffixFromStore(ctx context.Context, st store.Store) (string, error) {
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

func provider(c *cli.Context, suffix string) (dns.Provider, error) {
	switch c.String("provider") {
	case "hosts":
		return &dns.HostsFile{Path: filepath.Join(c.String("root"), "etc", "hosts")}, nil
	case "rfc2136":
		server, tsigFile := c.String("rfc2136-server"), c.String("rfc2136-tsig-file")
		if server == "" || tsigFile == "" {
			return nil, errors.New("--provider rfc2136 needs --rfc2136-server and --rfc2136-tsig-file")
		}
		if _, _, err := net.SplitHostPort(server); err != nil {
			return nil, fmt.Errorf("--rfc2136-server %q: want host:port: %w", server, err)
		}
		key, err := dns.ReadTSIGFile(tsigFile)
		if err != nil {
			return nil, err
		}
		zone := c.String("rfc2136-zone")
		if zone == "" {
			zone = suffix
		}
		return &dns.RFC2136{Server: server, Zone: zone, Key: key, TTL: uint32(c.Uint("rfc2136-ttl"))}, nil
	default:
		return nil, fmt.Errorf("--provider %q: want hosts or rfc2136", c.String("provider"))
	}
}

// addresses parses --address, or picks the first global unicast address
// of an up, non-loopback interface (IPv4 before IPv6).
func addresses(flag string) ([]netip.Addr, error) {
	if flag != "" {
		var out []netip.Addr
		for _, s := range strings.Split(flag, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("--address: %w", err)
			}
			out = append(out, a.Unmap())
		}
		return out, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("--address not set: list interfaces: %w", err)
	}
	var v6 []netip.Addr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok || !ip.Unmap().IsGlobalUnicast() {
				continue
			}
			if ip = ip.Unmap(); ip.Is4() {
				return []netip.Addr{ip}, nil
			}
			v6 = append(v6, ip)
		}
	}
	if len(v6) > 0 {
		return v6[:1], nil
	}
	return nil, errors.New("--address not set and this host has no global unicast address")
}
