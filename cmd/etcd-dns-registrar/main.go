// Command etcd-dns-registrar makes every etcd member name resolve to the
// host that runs it: it publishes this host's address for its member name
// in the store (a renewed lease), learns the others' and keeps a managed
// /etc/hosts block or an RFC 2136 zone current. A long-running Type=notify
// service with a watchdog. It links no etcd server code (see deps_test.go).
package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/dns"
	"github.com/etcdadm/etcdadm-immutable/internal/dnsflags"
)

// Exit codes.
const (
	exitFailed = 1
	exitConfig = 2
)

const description = `Runs until stopped. Every --interval it reads the registry
(<store>/etcdadm/dns/registry.json: each member name, its addresses and its
lease's expiry; one GET) and makes <name>.<dns-suffix> resolve for every live
record. It writes this host's record (compare-and-swap) only when the record
is missing, its addresses changed, or a third of its --lease is left:

  --provider hosts     a managed block in <root>/etc/hosts (lines outside it
                       are never touched)
  --provider rfc2136   dynamic updates signed with TSIG (hmac-sha256) to an
                       authoritative server; the key comes from
                       --rfc2136-tsig-file, one line hmac-sha256:NAME:SECRET

Records whose lease expired are removed: a name nobody renews (its host is
gone and no other host took its volume) stops resolving within --lease; a
name that moves to another host follows at the others' next round. When the store or the DNS server is
unreachable it retries with a bounded backoff, says "degraded" in its
systemd status and in --metrics-file, and keeps running.`

func main() {
	app := &cli.App{
		Name:            "etcd-dns-registrar",
		Usage:           "make every etcd member name resolve to the host that runs it",
		Description:     description,
		Flags:           dnsflags.Flags(),
		Action:          run,
		HideHelpCommand: true,
	}
	os.Exit(cliflags.Run(app, os.Args, cliflags.Always(exitConfig)))
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
		Name:           c.String("name"),
		VolumeProvider: c.String("volume-provider"),
		Suffix:         c.String("dns-suffix"),
		Interval:       c.Duration("interval"),
		Lease:          c.Duration("lease"),
		MetricsFile:    c.String("metrics-file"),
	}
	if cfg.Addresses, err = dns.Addresses(c.String("address"), c.StringSlice("ip")); err != nil {
		return cli.Exit(err, exitConfig)
	}
	if err := cfg.Defaults(ctx, st); err != nil {
		return cli.Exit(err, exitConfig)
	}
	if err := cfg.Validate(); err != nil {
		return cli.Exit(err, exitConfig)
	}
	p, err := dns.ProviderConfig{
		Kind: c.String("provider"), Root: c.String("root"),
		Server: c.String("rfc2136-server"), Zone: c.String("rfc2136-zone"),
		TSIGFile: c.String("rfc2136-tsig-file"), TTL: uint32(c.Uint("rfc2136-ttl")),
	}.New(cfg.Suffix)
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
