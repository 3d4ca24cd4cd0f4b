package adm

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/restore"
)

func restoreLocalCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore-local",
		Usage:     "restore a backup into a new etcd data directory on this host (offline)",
		ArgsUsage: "NAME|latest",
		Description: `Downloads and verifies the backup, then restores it with etcdutl's snapshot
library into --data-dir, keeping revisions and leases. The data directory must
be empty or absent: etcdadm never overwrites one; move the old one aside first.
For a multi-member cluster, run it on every member with the same
--initial-cluster and --initial-cluster-token, then start each etcd on its
restored directory: the directory already holds the new membership.`,
		Flags: []cli.Flag{
			cliflags.Store(),
			&cli.StringFlag{Name: "data-dir", Required: true, Usage: "where to create the restored data directory (must be empty or absent)"},
			&cli.StringFlag{Name: "name", Required: true, Usage: "this member's name"},
			&cli.StringFlag{Name: "initial-cluster", Required: true, Usage: "the restored cluster's members: name=https://host:2380,..."},
			&cli.StringSliceFlag{Name: "initial-advertise-peer-urls", Usage: "this member's peer URLs (default: its entry in --initial-cluster)"},
			&cli.StringFlag{Name: "initial-cluster-token", Value: "etcd-cluster", Usage: "token of the restored cluster"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("usage: etcdadm restore-local NAME|latest --data-dir DIR --name NAME --initial-cluster ...", 2)
			}
			st, err := cliflags.OpenStore(c)
			if err != nil {
				return err
			}
			res, err := restore.Local(c.Context, st, restore.Config{
				Backup:              c.Args().First(),
				DataDir:             c.String("data-dir"),
				Name:                c.String("name"),
				InitialCluster:      c.String("initial-cluster"),
				PeerURLs:            c.StringSlice("initial-advertise-peer-urls"),
				InitialClusterToken: c.String("initial-cluster-token"),
			}, cliflags.Logger(c).With("component", "restore"))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "restored backup %s into %s: revision %d, %d keys, %d leases\nstart etcd with --data-dir=%s --name=%s\n",
				res.Report.Backup.Name, c.String("data-dir"), res.Stats.Revision, res.Stats.LiveKeys, res.Stats.Leases, c.String("data-dir"), c.String("name"))
			return nil
		},
	}
}
