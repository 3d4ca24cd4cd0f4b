package adm

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
)

func seedCommand() *cli.Command {
	return &cli.Command{
		Name:  "seed",
		Usage: "declare a new cluster in the store: member count, etcd version, settings",
		Description: `Writes control/etcd-cluster-spec (etcd-manager's format) and our settings
(etcdadm/settings.json). Hosts booting with this store then found the cluster.
Re-running with the same values changes nothing; a different existing spec is
kept unless --force (use 'etcdadm spec set' to resize or change versions).
Run 'etcdadm pki init' too, unless the cluster uses --tls=insecure.`,
		Flags: []cli.Flag{
			cliflags.Store(),
			&cli.IntFlag{Name: "members", Required: true, Usage: "number of voting members: 1, 3 or 5 (1 to 7 allowed)"},
			&cli.StringFlag{Name: "version", Required: true, Usage: "etcd version, e.g. 3.6.16 (3.5.x, 3.6.x, 3.7.x; a release this etcdadm knows, or one pushed with 'etcdadm release push')"},
			&cli.StringFlag{Name: "cluster-name", Value: "etcd", Usage: "cluster name (prefix of the initial cluster token): a DNS label, 1 to 63 of a-z, 0-9 and inner '-'"},
			&cli.StringFlag{Name: "dns-suffix", Usage: "members are reached as NAME.SUFFIX (a DNS name, e.g. internal.prod.example.com); empty: by host address"},
			&cli.IntFlag{Name: "client-port", Value: 2379},
			&cli.IntFlag{Name: "peer-port", Value: 2380},
			&cli.StringFlag{Name: "tls", Value: "mtls", Usage: "mtls, or insecure (plaintext; test clusters only)"},
			&cli.BoolFlag{Name: "force", Usage: "replace a different existing spec (the cluster token is kept)"},
		},
		Action: func(c *cli.Context) error {
			st, err := cliflags.OpenStore(c)
			if err != nil {
				return err
			}
			cl := clusterspec.Cluster{
				Spec: etcdmanager.ClusterSpec{MemberCount: int32(c.Int("members")), EtcdVersion: c.String("version")},
				Settings: clusterspec.Settings{
					ClusterName: c.String("cluster-name"), DNSSuffix: c.String("dns-suffix"),
					ClientPort: c.Int("client-port"), PeerPort: c.Int("peer-port"),
					TLS: c.String("tls"),
				},
			}
			if err := cl.Defaults(); err != nil {
				return err
			}
			// Every problem at once, before anything is written.
			warnings, err := cl.ValidateNew()
			if v, perr := etcdversion.Parse(cl.Spec.EtcdVersion); perr == nil && etcdversion.Supported(v) == nil {
				err = errors.Join(err, etcdbin.Releases{Store: st}.Known(c.Context, v))
			}
			if err != nil {
				return cli.Exit(fmt.Sprintf("%v\nNothing was written.", err), 2)
			}
			for _, w := range warnings {
				fmt.Fprintln(c.App.ErrWriter, "warning:", w)
			}
			if cl.Settings.TLS == "insecure" {
				fmt.Fprintln(c.App.ErrWriter, "warning: --tls=insecure: etcd traffic will be plaintext and unauthenticated")
			}
			torn, err := recovery.TornDown(c.Context, st)
			if err != nil {
				return err
			}
			if torn != nil && !c.Bool("force") {
				return cli.Exit(fmt.Sprintf("seed: %s was torn down at %s; pass --force to declare a new cluster on it\nNothing was written.", st, torn.At.Format(time.RFC3339)), 2)
			}
			if err := clusterspec.Seed(c.Context, st, cl, c.Bool("force")); err != nil {
				return err
			}
			if torn != nil {
				// A new cluster: its own token, founded afresh.
				if err := clusterspec.SetToken(c.Context, st, cl.Settings.ClusterToken); err != nil {
					return err
				}
				if err := recovery.ClearForNewCluster(c.Context, st); err != nil {
					return err
				}
				fmt.Fprintln(c.App.Writer, "the torn-down cluster's marks are cleared: booting hosts found a new cluster")
			}
			fmt.Fprintf(c.App.Writer, "seeded %s: %d members, etcd %s\n", st, cl.Spec.MemberCount, cl.Spec.EtcdVersion)
			return nil
		},
	}
}

func specCommand() *cli.Command {
	return &cli.Command{
		Name:  "spec",
		Usage: "show or change the cluster spec",
		Subcommands: []*cli.Command{
			{
				Name:  "show",
				Usage: "print the spec and settings, and whether the automation is paused",
				Description: `Prints the spec (member count, etcd version) and the settings. When the
automation is paused ('etcdadm pause') it says so, by whom, since when and
why: the hosts act on no change of the spec until 'etcdadm resume'.`,
				Flags: []cli.Flag{cliflags.Store(), outputFlag()},
				Action: func(c *cli.Context) error {
					st, err := cliflags.OpenStore(c)
					if err != nil {
						return err
					}
					cl, err := clusterspec.Load(c.Context, st)
					if err != nil {
						return err
					}
					p, err := pause.Get(c.Context, st)
					if err != nil {
						return err
					}
					if c.String("output") == "json" {
						return writeJSON(c.App.Writer, struct {
							clusterspec.Cluster
							Paused *pause.Pause `json:"paused,omitempty"`
						}{cl, p})
					}
					s := cl.Settings
					fmt.Fprintf(c.App.Writer, "members:         %d\netcd version:    %s\ncluster name:    %s\ndns suffix:      %s\nports:           client %d, peer %d\ntls:             %s\n",
						cl.Spec.MemberCount, cl.Spec.EtcdVersion, s.ClusterName, s.DNSSuffix, s.ClientPort, s.PeerPort, s.TLS)
					if p != nil {
						fmt.Fprintf(c.App.Writer, "\n%s\nthe hosts act on no change of this spec until then\n", pausedLine(p))
					}
					return nil
				},
			},
			{
				Name:  "set",
				Usage: "change the member count or the etcd version",
				Description: `Hosts converge on the new spec: more members join from standby hosts on their
next member-join run; fewer are removed by the reconcile timer, one at a time
after a backup.`,
				Flags: []cli.Flag{
					cliflags.Store(),
					&cli.IntFlag{Name: "members", Usage: "new member count"},
					&cli.StringFlag{Name: "version", Usage: "new etcd version: the same plan and checks as 'etcdadm upgrade --to'"},
				},
				Action: func(c *cli.Context) error {
					if c.Int("members") == 0 && c.String("version") == "" {
						return cli.Exit("nothing to change: pass --members and/or --version", 2)
					}
					st, err := cliflags.OpenStore(c)
					if err != nil {
						return err
					}
					if v := c.String("version"); v != "" {
						// The same plan and checks as 'etcdadm upgrade --to'.
						to, err := etcdversion.Parse(v)
						if err != nil {
							return cli.Exit(fmt.Sprintf("%v\nNothing was changed.", err), 2)
						}
						if err := declare(c, st, to, false); err != nil || c.Int("members") == 0 {
							return err
						}
					}
					cl, warnings, err := clusterspec.SetSpec(c.Context, st, int32(c.Int("members")), "")
					for _, w := range warnings {
						fmt.Fprintln(c.App.ErrWriter, "warning:", w)
					}
					if err != nil {
						return cli.Exit(fmt.Sprintf("%v\nNothing was changed.", err), 2)
					}
					fmt.Fprintf(c.App.Writer, "spec: %d members, etcd %s\n", cl.Spec.MemberCount, cl.Spec.EtcdVersion)
					return nil
				},
			},
		},
	}
}
