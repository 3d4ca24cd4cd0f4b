// Command etcd-member-join decides, every time the host starts, what the
// local etcd member must do (found, join, rejoin, replace or stand by),
// writes etcd's environment file and starts etcd.service over D-Bus.
// "etcd-member-join reconcile" shrinks the cluster to the spec.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/service/systemd"
)

const description = `Runs as a oneshot before etcd.service. From the store (spec, settings, peer
registry, initial plan), the data directory and etcd itself it decides:

  found    no cluster yet: register, wait for a quorum of founders, agree on one
           initial member plan, start etcd with state "new"
  join     the cluster has room: add this member as a learner, start, promote
  rejoin   the data directory holds this member: start
  replace  this member exists but its data is gone: back up, remove it, join
  standby  the cluster is full: leave membership alone (exit 0; re-run later)

Membership changes take a lock in etcd; one learner at a time; never a removal
that loses quorum. Safe to re-run at any point. Exit codes: 0 done or standby,
1 failed, 2 bad configuration.`

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-member-join:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

// newApp is the command: the boot run as its action, reconcile as a
// subcommand. Each gets its own copy of the flags: urfave/cli reads a
// subcommand's flags from its own flag set, and checks the app's required
// flags before it runs a subcommand, so the app's --store cannot be
// Required ("reconcile --store URL" would fail); run checks it instead.
func newApp() *cli.App {
	appStore := cliflags.Store().(*cli.StringFlag)
	appStore.Required = false
	return &cli.App{
		Name:        "etcd-member-join",
		Usage:       "bring this host's etcd member into the cluster",
		Description: description,
		Flags:       memberFlags(appStore),
		Action:      func(c *cli.Context) error { return run(c, false) },
		Commands: []*cli.Command{{
			Name:        "reconcile",
			Usage:       "shrink the cluster to the spec's member count (timer; one host acts at a time)",
			Description: "Removes surplus members one at a time after a backup: unhealthy first, then the highest names; moves leadership away before removing the leader; refuses anything that would lose quorum.",
			Flags:       memberFlags(cliflags.Store()),
			Action:      func(c *cli.Context) error { return run(c, true) },
		}},
		HideHelpCommand: true,
	}
}

// memberFlags returns new flag values on every call: urfave/cli keeps
// parse state in them, so two commands must not share one.
func memberFlags(store cli.Flag) []cli.Flag {
	return []cli.Flag{
		store,
		&cli.StringFlag{Name: "name", EnvVars: []string{"ETCDADM_MEMBER_NAME"}, Usage: "this host's member name (etcd-volume-attach writes it to /run/etcdadm/identity.env; default: the short hostname)"},
		&cli.StringFlag{Name: "host", EnvVars: []string{"ETCDADM_HOST"}, Usage: "how peers reach this host: address or DNS name (default: NAME.<dnsSuffix>, else this host's first address)"},
		&cli.StringFlag{Name: "listen-host", EnvVars: []string{"ETCDADM_LISTEN_HOST"}, Usage: "address etcd listens on (default: all)"},
		&cli.StringSliceFlag{Name: "ip", EnvVars: []string{"ETCDADM_IPS"}, Usage: "this host's addresses, for the certificates' SANs"},
		&cli.IntFlag{Name: "client-port", EnvVars: []string{"ETCDADM_CLIENT_PORT"}, Usage: "override the cluster's client port"},
		&cli.IntFlag{Name: "peer-port", EnvVars: []string{"ETCDADM_PEER_PORT"}, Usage: "override the cluster's peer port"},
		&cli.StringFlag{Name: "root", Value: "/", EnvVars: []string{"ETCDADM_ROOT"}, Usage: "prefix of every host path"},
		&cli.StringFlag{Name: "etcd-user", Value: "etcd", EnvVars: []string{"ETCDADM_ETCD_USER"}, Usage: "user that owns keys and data (from sysusers.d); empty: leave ownership alone"},
		&cli.StringFlag{Name: "unit", Value: "etcd.service", EnvVars: []string{"ETCDADM_ETCD_UNIT"}, Usage: "the etcd unit to start"},
		&cli.DurationFlag{Name: "found-grace", Value: time.Minute, EnvVars: []string{"ETCDADM_FOUND_GRACE"}, Usage: "how long founders wait for every planned member before founding with a quorum"},
		&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, EnvVars: []string{"ETCDADM_TIMEOUT"}, Usage: "bound on every wait (founders, health, promotion)"},
		cliflags.LogLevel(),
	}
}

func run(c *cli.Context, reconcile bool) error {
	if c.String("store") == "" {
		return cli.Exit(`Required flag "store" not set: pass --store URL or set ETCDADM_STORE`, 2)
	}
	log := cliflags.Logger(c).With("component", "member-join")
	name := c.String("name")
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return cli.Exit(fmt.Sprintf("no --name and no hostname: %v", err), 2)
		}
		name, _, _ = strings.Cut(h, ".")
	}
	cfg := member.Config{
		Name: name, Host: c.String("host"), ListenHost: c.String("listen-host"),
		ClientPort: c.Int("client-port"), PeerPort: c.Int("peer-port"),
		Root: c.String("root"), Timeout: c.Duration("timeout"), FoundGrace: c.Duration("found-grace"),
		Owner: pki.Owner{UID: -1, GID: -1},
	}
	for _, s := range c.StringSlice("ip") {
		ip := net.ParseIP(s)
		if ip == nil {
			return cli.Exit(fmt.Sprintf("--ip %q is not an IP address", s), 2)
		}
		cfg.IPs = append(cfg.IPs, ip)
	}
	if len(cfg.IPs) == 0 {
		// At boot the network may still be coming up: wait for an address
		// rather than advertise a name nobody can resolve.
		for deadline := time.Now().Add(time.Minute); len(cfg.IPs) == 0 && time.Now().Before(deadline); {
			var err error
			if cfg.IPs, err = hostIPs(); err != nil {
				return cli.Exit(fmt.Sprintf("reading this host's addresses: %v", err), 1)
			}
			if len(cfg.IPs) == 0 {
				time.Sleep(500 * time.Millisecond)
			}
		}
		if len(cfg.IPs) == 0 && cfg.Host == "" {
			return cli.Exit("this host has no global address after 1 min: bring up the network, or set --host (ETCDADM_HOST) to how peers reach this host", 1)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cli.Exit(err, 2)
	}
	if u := c.String("etcd-user"); u != "" {
		owner, err := lookupOwner(u)
		if err != nil {
			return cli.Exit(err, 2)
		}
		cfg.Owner = owner
	}
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return cli.Exit(err, 2)
	}
	ctx, cancel := context.WithTimeout(c.Context, cfg.Timeout+time.Minute)
	defer cancel()
	svc, err := systemd.New(ctx, c.String("unit"))
	if err != nil {
		return err
	}
	defer svc.Conn.Close()
	deps := member.Deps{Store: st, Service: svc, Log: log, Now: time.Now}
	if reconcile {
		removed, err := member.Reconcile(ctx, cfg, deps)
		if err != nil {
			return err
		}
		log.Info(fmt.Sprintf("reconciled: removed %d surplus members %v", len(removed), removed))
		return nil
	}
	res, err := member.Run(ctx, cfg, deps)
	if err != nil {
		return err
	}
	logResult(log, res)
	return nil
}

func logResult(log *slog.Logger, res member.Result) {
	log.Info(fmt.Sprintf("%s: %s", res.Action, res.Reason), "peerURL", res.Member.PeerURL, "clientURL", res.Member.ClientURL)
}

func lookupOwner(name string) (pki.Owner, error) {
	owner, err := pki.ParseOwner(name)
	if err != nil {
		return pki.Owner{}, fmt.Errorf("--etcd-user: %w (the user comes from sysusers.d/etcd.conf; or pass --etcd-user= to leave ownership alone)", err)
	}
	return owner, nil
}

// hostIPs are this host's global unicast addresses, IPv4 first: the
// default for certificate SANs and, without a DNS suffix, for how peers
// reach this member.
func hostIPs() ([]net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
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
	return append(v4, v6...), nil
}
