package adm

import (
	"bufio"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
)

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "restore the WHOLE cluster from a backup (every member), healthy or not",
		ArgsUsage: "BACKUP|latest",
		Description: `Verifies the backup (sha256 and the snapshot's own hash), then writes
etcd-manager's restore command (control/<time>-000000/_command.json), which
etcd-manager would also act on. Every host's etcd-member-join then, on its
next run (systemctl start etcd-member-join to act now): stops etcd, moves
its data directory aside (kept, never deleted), restores the backup with the
cluster's membership, a NEW cluster token and a revision bump of 1e9 marked
compacted (clients re-list instead of seeing revisions go back; leases are
kept), and starts etcd. When every member is back the command is removed.

Everything written after the backup is lost. For Kubernetes: stop every
kube-apiserver before, restart them and the controllers after.

Refused, writing nothing: a missing or corrupt backup, a backup from a newer
etcd minor than the cluster runs, a restore already pending.
Exit codes: 0 requested, 1 failure, 2 refused or not confirmed.`,
		Flags: []cli.Flag{cliflags.Store(), &cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation (scripts)"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("restore: name one BACKUP (see 'etcdadm backup list') or 'latest'", 2)
			}
			st, err := cliflags.OpenStore(c)
			if err != nil {
				return err
			}
			name := c.Args().First()
			b, err := backup.Get(c.Context, st, name)
			if err != nil {
				return cli.Exit(fmt.Sprintf("restore: %v\nNothing was changed.", err), 2)
			}
			w := c.App.Writer
			fmt.Fprintf(w, "This replaces the data of EVERY member with backup %s (%s, etcd %s).\nEverything written after it is lost. Kubernetes: stop every kube-apiserver first; restart them and the controllers after.\n", b.Name, b.Time.Format(time.RFC3339), b.Meta.EtcdVersion)
			if !c.Bool("yes") {
				fmt.Fprint(w, "Type 'restore' to go on: ")
				line, _ := bufio.NewReader(c.App.Reader).ReadString('\n')
				if strings.TrimSpace(line) != "restore" {
					return cli.Exit("restore: not confirmed. Nothing was changed.", 2)
				}
			}
			p, rep, err := recovery.Request(c.Context, st, b.Name, "", time.Now())
			if errors.Is(err, recovery.ErrPending) || errors.Is(err, recovery.ErrTooNew) || errors.Is(err, backup.ErrCorrupt) {
				return cli.Exit(fmt.Sprintf("restore: %v\nNothing was changed.", err), 2)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "backup %s verified (%s gzip, %s snapshot)\nrestore requested: %s\nevery host acts on it on its next etcd-member-join run ('systemctl start etcd-member-join' on each master to act now); 'etcdadm status --store ...' shows the progress\n",
				rep.Backup.Name, humanBytes(rep.GzipSize), humanBytes(rep.SnapshotSize), p.Key)
			return nil
		},
	}
}

func teardownCommand() *cli.Command {
	return &cli.Command{
		Name:  "teardown",
		Usage: "retire the cluster: every host stops etcd and our units and moves its data aside",
		Description: `Marks the store torn down (etcdadm/teardown.json). Each host's etcd-member-join,
at its next run (or 'systemctl start etcd-member-join'), stops etcd and the
units that could start it again, and moves /var/lib/etcd/member aside (kept,
never deleted). Backups, the PKI, the spec and the peer registry stay. No host
runs or founds etcd on this store until 'etcdadm seed --force' declares a new
cluster. Take a last backup first ('etcdadm backup now').`,
		Flags: []cli.Flag{cliflags.Store(), &cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation (scripts)"}},
		Action: func(c *cli.Context) error {
			st, err := cliflags.OpenStore(c)
			if err != nil {
				return err
			}
			w := c.App.Writer
			if !c.Bool("yes") {
				fmt.Fprint(w, "Every host will stop etcd and move its data aside. Type 'teardown' to go on: ")
				line, _ := bufio.NewReader(c.App.Reader).ReadString('\n')
				if strings.TrimSpace(line) != "teardown" {
					return cli.Exit("teardown: not confirmed. Nothing was changed.", 2)
				}
			}
			if err := recovery.RequestTeardown(c.Context, st, time.Now()); err != nil {
				return err
			}
			fmt.Fprintf(w, "%s is torn down: each host stops etcd at its next etcd-member-join run ('systemctl start etcd-member-join' to act now); 'etcdadm seed --force' declares a new cluster\n", st)
			return nil
		},
	}
}
