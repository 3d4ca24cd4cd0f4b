// Package dnsflags holds etcd-dns-registrar's flags, each with its
// ETCDADM_* variable, so the binary and 'etcdadm render --env'
// (internal/settings) read them from one definition. Imported by
// cmd/etcd-dns-registrar and internal/settings; it links no etcd code.
package dnsflags

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/dns"
)

// Flags are the registrar's flags, new values on every call.
func Flags() []cli.Flag {
	return []cli.Flag{
		cliflags.Store(),
		&cli.StringFlag{Name: "name", EnvVars: []string{"ETCDADM_MEMBER_NAME"}, Usage: "this host's member name (etcd-volume-attach writes it to /run/etcdadm/identity.env; default: the short hostname)"},
		&cli.StringFlag{Name: "volume-provider", EnvVars: []string{"ETCDADM_VOLUME_PROVIDER"}, Usage: "etcd-volume-attach's provider: with local or pool, the name must come from the attached volume (identity.env); without it the registrar exits and is restarted"},
		&cli.StringFlag{Name: "address", EnvVars: []string{"ETCDADM_ADDRESS"}, Usage: "address(es) to publish, comma separated (default: the first --ip, else this host's first global unicast address, IPv4 first: what etcd-member-join uses)"},
		&cli.StringSliceFlag{Name: "ip", EnvVars: []string{"ETCDADM_IPS"}, Usage: "this host's addresses as etcd-member-join has them (host.env, from 'etcdadm render --ip'); the first is published"},
		&cli.StringFlag{Name: "dns-suffix", EnvVars: []string{"ETCDADM_DNS_SUFFIX"}, Usage: "member NAME resolves as NAME.SUFFIX (default: dnsSuffix from the store's etcdadm/settings.json)"},
		&cli.StringFlag{Name: "provider", Value: dns.ProviderHosts, EnvVars: []string{"ETCDADM_DNS_PROVIDER"}, Usage: "hosts or rfc2136"},
		&cli.StringFlag{Name: "root", Value: "/", EnvVars: []string{"ETCDADM_ROOT"}, Usage: "prefix of host paths (tests)"},
		&cli.StringFlag{Name: "rfc2136-server", EnvVars: []string{"ETCDADM_RFC2136_SERVER"}, Usage: "authoritative server host:port"},
		&cli.StringFlag{Name: "rfc2136-zone", EnvVars: []string{"ETCDADM_RFC2136_ZONE"}, Usage: "zone to update (default: the DNS suffix)"},
		&cli.StringFlag{Name: "rfc2136-tsig-file", EnvVars: []string{"ETCDADM_RFC2136_TSIG_FILE"}, Usage: "file holding hmac-sha256:KEYNAME:BASE64SECRET"},
		&cli.UintFlag{Name: "rfc2136-ttl", Value: 60, EnvVars: []string{"ETCDADM_RFC2136_TTL"}, Usage: "TTL of the records, seconds"},
		&cli.DurationFlag{Name: "interval", Value: time.Minute, EnvVars: []string{"ETCDADM_DNS_INTERVAL"}, Usage: "how often to read the registry: a name that moves resolves everywhere within this"},
		&cli.DurationFlag{Name: "lease", Value: 30 * time.Minute, EnvVars: []string{"ETCDADM_DNS_LEASE"}, Usage: "how long a record stays valid without renewal (>= 6 x interval; renewed when a third is left)"},
		&cli.StringFlag{Name: "metrics-file", EnvVars: []string{"ETCDADM_DNS_METRICS_FILE"}, Usage: "write Prometheus metrics here for node_exporter's textfile collector"},
		cliflags.LogLevel(),
	}
}
