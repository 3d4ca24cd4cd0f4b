// Package volumeflags holds etcd-volume-attach's flags, each with its
// ETCDADM_* variable, and the range rules of the values that have one
// (internal/volume's), so the binary and 'etcdadm render --env'
// (internal/settings) read them from one definition. For
// cmd/etcd-volume-attach, internal/settings and ignition (the lease rule).
package volumeflags

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
	"github.com/etcdadm/etcdadm-immutable/internal/volume"
)

// Flags are etcd-volume-attach's flags (attach and renew alike). They are
// new values on every call: urfave/cli keeps parse state in them.
func Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "store", EnvVars: []string{"ETCDADM_STORE"}, Usage: "the shared store (pool provider): " + storeurl.Help},
		&cli.StringFlag{Name: "provider", Value: volume.ProviderNone, EnvVars: []string{"ETCDADM_VOLUME_PROVIDER"}, Usage: "none, local or pool", Action: usage(CheckProvider)},
		&cli.StringFlag{Name: "name", EnvVars: []string{"ETCDADM_VOLUME_NAME"}, Usage: "local: this host's member name"},
		&cli.StringFlag{Name: "device", EnvVars: []string{"ETCDADM_VOLUME_DEVICE"}, Usage: "local: the data device (/dev/vdb, /dev/disk/by-label/..., /dev/disk/by-partlabel/...)"},
		&cli.StringFlag{Name: "volumes", EnvVars: []string{"ETCDADM_VOLUMES"}, Usage: "pool: volume names, comma separated (default: etcd-a, etcd-b, ... for the spec's memberCount)"},
		&cli.StringFlag{Name: "driver", Value: volume.DriverLoopfile, EnvVars: []string{"ETCDADM_VOLUME_DRIVER"}, Usage: "pool: how volumes are attached: loopfile"},
		&cli.StringFlag{Name: "loopfile-dir", Value: "/var/lib/etcdadm/volumes", EnvVars: []string{"ETCDADM_LOOPFILE_DIR"}, Usage: "loopfile: directory (shared by all hosts) of the <volume>.img files"},
		&cli.StringFlag{Name: "size", Value: "8G", EnvVars: []string{"ETCDADM_VOLUME_SIZE"}, Usage: "loopfile: size of new images (K, M, G, T suffixes, powers of 1024); smaller ones are grown", Action: usage(CheckSize)},
		&cli.DurationFlag{Name: "lease", Value: volume.DefaultLease, EnvVars: []string{"ETCDADM_VOLUME_LEASE"}, Usage: "pool: how long a claim lasts without renewal (etcd-volume-renew.timer renews at a third of it: 'etcdadm render' sets the timer from ETCDADM_VOLUME_LEASE)", Action: usage(CheckLease)},
		&cli.StringFlag{Name: "host-id", EnvVars: []string{"ETCDADM_HOST_ID"}, Usage: "pool: this host's id in claims (default: /etc/machine-id, else the hostname)"},
		&cli.StringFlag{Name: "root", Value: "/", EnvVars: []string{"ETCDADM_ROOT"}, Usage: "prefix of every host path (tests)"},
		&cli.StringFlag{Name: "mounter", Value: volume.MounterSystemd, EnvVars: []string{"ETCDADM_MOUNTER"}, Usage: "systemd (a transient var-lib-etcd.mount over D-Bus) or plain (mount(2) in this process's namespace)"},
		&cli.BoolFlag{Name: "wait", Value: true, EnvVars: []string{"ETCDADM_VOLUME_WAIT"}, Usage: "pool: when every volume is held, wait (up to --timeout) for the first lease to run out; --wait=false exits 4 at once"},
		&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, EnvVars: []string{"ETCDADM_VOLUME_TIMEOUT"}, Usage: "give up after this long (store failures are retried until then)"},
		&cli.StringFlag{Name: "metrics-file", EnvVars: []string{"ETCDADM_VOLUME_METRICS_FILE"}, Usage: "pool: write the lease's Prometheus metrics here after every claim and renewal, for node_exporter's textfile collector (e.g. /var/lib/node_exporter/textfile/etcd_volume.prom)"},
		&cli.StringFlag{Name: "etcd-env", Value: "/etc/etcd/etcd.env", EnvVars: []string{"ETCDADM_VOLUME_ETCD_ENV"}, Usage: "renew: member join's etcd.env, whose ETCD_ADVERTISE_CLIENT_URLS reach this host's member (missing: the claim is renewed in the store only)"},
		&cli.StringFlag{Name: "etcd-cacert", Value: "/etc/etcd/pki/ca.crt", EnvVars: []string{"ETCDADM_VOLUME_ETCD_CACERT"}, Usage: "renew: CA bundle of etcd's server certificates"},
		&cli.StringFlag{Name: "etcd-cert", Value: "/etc/etcd/pki/client.crt", EnvVars: []string{"ETCDADM_VOLUME_ETCD_CERT"}, Usage: "renew: client certificate for this host's member"},
		&cli.StringFlag{Name: "etcd-key", Value: "/etc/etcd/pki/client.key", EnvVars: []string{"ETCDADM_VOLUME_ETCD_KEY"}, Usage: "renew: its key (the unit passes it as a credential)"},
		cliflags.LogLevel(),
	}
}

// usage makes a value rule a flag action: a refused value is a usage
// error (exit 2) naming the flag's value.
func usage[T any](check func(T) error) func(*cli.Context, T) error {
	return func(_ *cli.Context, v T) error {
		if err := check(v); err != nil {
			return cli.Exit(err, cliflags.ExitUsage)
		}
		return nil
	}
}

// valid is a pool configuration volume.Config.Validate accepts; each
// check below changes one field of it, so the error is that field's rule.
func valid() volume.Config {
	return volume.Config{Provider: volume.ProviderPool, Volumes: []string{"etcd-a"}, Lease: volume.DefaultLease, HostID: "host", Name: "etcd-a", Device: "/dev/null"}
}

// CheckProvider is volume.Config.Validate's rule for --provider.
func CheckProvider(p string) error {
	c := valid()
	c.Provider = p
	return c.Validate()
}

// CheckLease is volume.Config.Validate's rule for the pool's --lease.
func CheckLease(d time.Duration) error {
	c := valid()
	c.Lease = d
	return c.Validate()
}

// CheckSize is volume.ParseSize's rule for --size.
func CheckSize(s string) error {
	_, err := volume.ParseSize(s)
	return err
}
