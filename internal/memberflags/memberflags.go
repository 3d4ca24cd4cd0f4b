// Package memberflags turns the flags of the binaries that act as this
// host's member (etcd-member-join, etcd-version-switcher) into one
// member.Config: name, addresses, ports, root, the etcd user. Imported by
// those commands only (it links the etcd client; the DNS registrar and the
// uploader must not import it).
package memberflags

import (
	"fmt"
	"net"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/hostaddr"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
)

// Flags are the member's identity and host settings. They are new values
// on every call: urfave/cli keeps parse state in them, so two commands
// must not share one.
func Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "name", EnvVars: []string{"ETCDADM_MEMBER_NAME"}, Usage: "this host's member name (etcd-volume-attach writes it to /run/etcdadm/identity.env; default: the short hostname)"},
		&cli.StringFlag{Name: "host", EnvVars: []string{"ETCDADM_HOST"}, Usage: "how peers reach this host: address or DNS name (default: NAME.<dnsSuffix>, else this host's first address)"},
		&cli.StringFlag{Name: "listen-host", EnvVars: []string{"ETCDADM_LISTEN_HOST"}, Usage: "address etcd listens on (default: all)"},
		&cli.StringSliceFlag{Name: "ip", EnvVars: []string{"ETCDADM_IPS"}, Usage: "this host's addresses, for the certificates' SANs"},
		&cli.IntFlag{Name: "client-port", EnvVars: []string{"ETCDADM_CLIENT_PORT"}, Usage: "override the cluster's client port"},
		&cli.IntFlag{Name: "peer-port", EnvVars: []string{"ETCDADM_PEER_PORT"}, Usage: "override the cluster's peer port"},
		&cli.StringFlag{Name: "root", Value: "/", EnvVars: []string{"ETCDADM_ROOT"}, Usage: "prefix of every host path"},
		&cli.StringFlag{Name: "etcd-user", Value: "etcd", EnvVars: []string{"ETCDADM_ETCD_USER"}, Usage: "user that owns keys and data (from sysusers.d); empty: leave ownership alone"},
		&cli.StringFlag{Name: "unit", Value: "etcd.service", EnvVars: []string{"ETCDADM_ETCD_UNIT"}, Usage: "the etcd unit to start"},
		&cli.DurationFlag{Name: "cert-validity", EnvVars: []string{"ETCDADM_CERT_VALIDITY"}, Usage: "lifetime of the member's certificates (default a year; etcd-pki-renew.timer renews them with a third left; render sets its schedule from this)",
			Action: func(_ *cli.Context, d time.Duration) error {
				if err := pki.CheckLeafValidity(d); err != nil {
					return cli.Exit(fmt.Errorf("--cert-validity: %w", err), cliflags.ExitUsage)
				}
				return nil
			}},
		&cli.StringFlag{Name: "volume-provider", EnvVars: []string{"ETCDADM_VOLUME_PROVIDER"}, Usage: "etcd-volume-attach's provider: with local or pool, the member name must come from the attached volume (identity.env)"},
	}
}

// Join are etcd-member-join's flags (the boot run and reconcile alike),
// with store as its --store flag.
func Join(store cli.Flag) []cli.Flag {
	return append(append([]cli.Flag{store}, Flags()...),
		&cli.DurationFlag{Name: "found-grace", Value: time.Minute, EnvVars: []string{"ETCDADM_FOUND_GRACE"}, Usage: "how long founders wait for every planned member before founding with a quorum"},
		&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, EnvVars: []string{"ETCDADM_JOIN_TIMEOUT"}, Usage: "bound on every wait (founders, health, promotion)"},
		&cli.DurationFlag{Name: "replace-after", Value: member.DefaultReplaceAfter, EnvVars: []string{"ETCDADM_REPLACE_AFTER"},
			Usage: "a standby host replaces a voting member of the full cluster that stays unreachable this long (a master lost for good, replaced under a new name); longer than a reboot takes, at least 2m; 0: never",
			Action: func(_ *cli.Context, d time.Duration) error {
				if err := member.CheckReplaceAfter(d); err != nil {
					return cli.Exit(fmt.Errorf("--replace-after: %w", err), cliflags.ExitUsage)
				}
				return nil
			}},
		cliflags.LogLevel(),
	)
}

// Reconcile are the flags of etcd-member-join reconcile: Join's and
// its metrics file.
func Reconcile(store cli.Flag) []cli.Flag {
	return append(Join(store), &cli.StringFlag{Name: "metrics-file", EnvVars: []string{"ETCDADM_MEMBER_METRICS_FILE"},
		Usage: "write Prometheus metrics here for node_exporter's textfile collector: each voting member's health as this host sees it, and whether a standby host watches it to replace it"})
}

// Switcher are etcd-version-switcher's flags.
func Switcher() []cli.Flag {
	return append(Flags(),
		cliflags.Store(),
		&cli.DurationFlag{Name: "timeout", Value: 30 * time.Minute, EnvVars: []string{"ETCDADM_SWITCH_TIMEOUT"}, Usage: "give up waiting (for turns, for the cluster version) after this long"},
		&cli.DurationFlag{Name: "health-timeout", Value: 2 * time.Minute, EnvVars: []string{"ETCDADM_SWITCH_HEALTH_TIMEOUT"}, Usage: "how long a switched member has to be healthy and caught up before it is rolled back"},
		&cli.StringFlag{Name: "metrics-file", EnvVars: []string{"ETCDADM_SWITCH_METRICS_FILE"}, Usage: "write Prometheus metrics here for node_exporter's textfile collector"},
		cliflags.LogLevel(),
	)
}

// Config reads the flags. Without --ip it waits up to a minute for the
// host's network to bring up an address (at boot it may still be coming).
func Config(c *cli.Context) (member.Config, error) {
	name, err := hostaddr.MemberName(c.String("name"), c.String("volume-provider"))
	if err != nil {
		return member.Config{}, cli.Exit(err, 1)
	}
	cfg := member.Config{
		Name: name, Host: c.String("host"), ListenHost: c.String("listen-host"),
		ClientPort: c.Int("client-port"), PeerPort: c.Int("peer-port"),
		Root: c.String("root"), Owner: pki.Owner{UID: -1, GID: -1},
		CertValidity: c.Duration("cert-validity"),
	}
	for _, s := range c.StringSlice("ip") {
		ip := net.ParseIP(s)
		if ip == nil {
			return cfg, cli.Exit(fmt.Sprintf("--ip %q is not an IP address", s), 2)
		}
		cfg.IPs = append(cfg.IPs, ip)
	}
	for deadline := time.Now().Add(time.Minute); len(cfg.IPs) == 0 && time.Now().Before(deadline); {
		var err error
		if cfg.IPs, err = hostaddr.HostIPs(); err != nil {
			return cfg, cli.Exit(fmt.Sprintf("reading this host's addresses: %v", err), 1)
		}
		if len(cfg.IPs) == 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if len(cfg.IPs) == 0 && cfg.Host == "" {
		return cfg, cli.Exit("this host has no global address after 1 min: bring up the network, or set --host (ETCDADM_HOST) to how peers reach this host", 1)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, cli.Exit(err, 2)
	}
	if u := c.String("etcd-user"); u != "" {
		owner, err := LookupOwner(u)
		if err != nil {
			return cfg, cli.Exit(err, 2)
		}
		cfg.Owner = owner
	}
	return cfg, nil
}

// LookupOwner resolves the etcd user.
func LookupOwner(name string) (pki.Owner, error) {
	owner, err := pki.ParseOwner(name)
	if err != nil {
		return pki.Owner{}, fmt.Errorf("--etcd-user: %w (the user comes from sysusers.d/etcd.conf; or pass --etcd-user= to leave ownership alone)", err)
	}
	return owner, nil
}
