package adm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/status"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
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
etcd minor than the cluster runs, a restore already pending, a store torn
down ('etcdadm seed --force' first), a recovery in progress (let it finish),
the automation paused ('etcdadm resume' first): each refusal says which.

'etcdadm restore --cancel' withdraws a pending restore before any host acts
on it; once a host has begun, the restore must finish.
Exit codes: 0 requested (or withdrawn), 1 failure, 2 refused or not confirmed.`,
		Flags: []cli.Flag{cliflags.Store(), &cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation (scripts)"},
			&cli.BoolFlag{Name: "cancel", Usage: "withdraw the pending restore (refused once a host has begun it)"}},
		Action: func(c *cli.Context) error {
			if c.Bool("cancel") {
				if c.NArg() != 0 {
					return cli.Exit("restore --cancel takes no BACKUP", 2)
				}
				return restoreCancel(c)
			}
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
			if err := confirm(c, "restore"); err != nil {
				return err
			}
			p, rep, err := recovery.Request(c.Context, st, b.Name, time.Now())
			if errors.Is(err, recovery.ErrPending) || errors.Is(err, recovery.ErrTooNew) || errors.Is(err, backup.ErrCorrupt) || errors.Is(err, recovery.ErrContradicts) {
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

// restoreCancel withdraws the pending restore command.
func restoreCancel(c *cli.Context) error {
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return err
	}
	p, err := recovery.Cancel(c.Context, st)
	if errors.Is(err, recovery.ErrBegun) {
		return cli.Exit(fmt.Sprintf("restore --cancel: %v\nNothing was changed.", err), 2)
	}
	if err != nil {
		return err
	}
	if p == nil {
		fmt.Fprintln(c.App.Writer, "no restore is pending: nothing to withdraw")
		return nil
	}
	fmt.Fprintf(c.App.Writer, "restore %s of backup %s withdrawn: no host had begun it (%s deleted)\n", p.ID, p.Command.Backup, p.Key)
	return nil
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
			fmt.Fprintln(w, "Every host will stop etcd and move its data aside.")
			if err := confirm(c, "teardown"); err != nil {
				return err
			}
			if err := recovery.RequestTeardown(c.Context, st, time.Now()); errors.Is(err, recovery.ErrContradicts) {
				return cli.Exit(fmt.Sprintf("teardown: %v\nNothing was changed.", err), 2)
			} else if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s is torn down: each host stops etcd at its next etcd-member-join run ('systemctl start etcd-member-join' to act now); 'etcdadm seed --force' declares a new cluster\n", st)
			return nil
		},
	}
}

func recoverCommand() *cli.Command {
	return &cli.Command{
		Name:  "recover",
		Usage: "rebuild a cluster that lost its majority from one surviving member (loses nothing that member had)",
		Description: `For a cluster whose majority is gone for good (hosts and disks lost).
'etcdadm status --store ...' says when that is, and which member has the most
of the log. Refused while a majority answers or a member reports a leader.

The named member's host (at its next etcd-member-join run, or 'systemctl
start etcd-member-join') first watches from where it stands, for five election
timeouts, that no member it reaches has a leader and no majority answers: what
this machine sees may not be what the hosts see (a VPN that hides two members).
If one does, the host refuses the request and 'etcdadm status' says why;
another host whose member sees a leader refuses it too. Otherwise it keeps a
copy of its data, restarts the member as the only one (etcd's
--force-new-cluster, for exactly one start: its data, the same cluster ID),
then normally. Every other host then moves its data from before the recovery
aside (kept), also one that comes back later, and member join adds it back as
a new member, one learner at a time, up to the spec's count.

A request the survivor has not begun within --within expires; 'etcdadm recover
--cancel' withdraws it before then.

The other way out, 'etcdadm restore latest', loses what was written after the
last backup; this loses only what the named member had not received.`,
		Flags: append([]cli.Flag{cliflags.Store(),
			&cli.StringFlag{Name: "from-member", Usage: "the surviving member to rebuild from (required unless --cancel)"},
			&cli.DurationFlag{Name: "within", Value: recovery.DefaultRecoverWithin, Usage: "the survivor's host must begin within this, or the request expires (the verdict grows stale)"},
			&cli.BoolFlag{Name: "cancel", Usage: "withdraw the running recovery request (refused once the survivor's host has begun)"},
			&cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation (scripts)"},
		}, etcdclient.Flags("")...),
		Action: func(c *cli.Context) error {
			st, err := cliflags.OpenStore(c)
			if err != nil {
				return err
			}
			w := c.App.Writer
			if c.Bool("cancel") {
				r, err := recovery.CancelRecover(c.Context, st)
				if err != nil {
					return cli.Exit(err.Error(), 2)
				}
				if r == nil {
					fmt.Fprintln(w, "no recovery is running: nothing to withdraw")
					return nil
				}
				fmt.Fprintf(w, "recovery %s from %s withdrawn: no host had begun it\n", r.ID, r.Member)
				return nil
			}
			name := c.String("from-member")
			if name == "" {
				return cli.Exit("recover: --from-member is required: the surviving member to rebuild from ('etcdadm status --store URL' names the one with the most of the log)", 2)
			}
			q, err := probeQuorum(c, st)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%d of %d members answer. The cluster will be rebuilt from %s; the others' data is moved aside.\n", q.Answering, len(q.Members), name)
			if err := confirm(c, "recover"); err != nil {
				return err
			}
			r, err := recovery.RequestRecover(c.Context, st, q, name, time.Now(), c.Duration("within"))
			if err != nil {
				return cli.Exit(fmt.Sprintf("%v\nNothing was changed.", err), 2)
			}
			fmt.Fprintf(w, "recovery %s requested: %s's host confirms the majority is lost and restarts it alone at its next etcd-member-join run ('systemctl start etcd-member-join' there to act now), by %s or not at all; then the other hosts join it\n", r.ID, r.Member, r.Expires.Format(time.RFC3339))
			return nil
		},
	}
}

// probeQuorum asks the registered members for their status, with the
// command's client certificate.
func probeQuorum(c *cli.Context, st store.Store) (recovery.Quorum, error) {
	peers, err := member.Peers(c.Context, st)
	if err != nil {
		return recovery.Quorum{}, err
	}
	var eps []string
	for _, p := range peers {
		eps = append(eps, p.ClientURL)
	}
	base := etcdclient.FromFlags(c)
	return recovery.ProbeQuorum(c.Context, eps, func(ep string) (*clientv3.Client, error) {
		cfg := base
		cfg.Endpoints, cfg.DialTimeout = []string{ep}, 2*time.Second
		cli3, _, err := etcdClientOf(cfg)
		return cli3, err
	})
}

// printQuorumLoss says, when etcd does not answer, whether the majority is
// lost, and the two ways out with what each loses.
func printQuorumLoss(c *cli.Context, w io.Writer, st store.Store, r status.Report) {
	q, err := probeQuorum(c, st)
	if err != nil {
		fmt.Fprintf(w, "quorum: cannot tell (%v)\n", err)
		return
	}
	var up, down []string
	for _, m := range q.Members {
		if m.Answering {
			up = append(up, m.Name)
		} else {
			down = append(down, m.Name)
		}
	}
	if !q.Lost {
		fmt.Fprintf(w, "quorum: held (%d of %d answer: %s)\n", q.Answering, len(q.Members), listOrNone(up))
		return
	}
	if q.Leader != "" {
		fmt.Fprintf(w, "quorum: held as the members see it (%s is their leader), though only %d of %d answer from here (%s): a network between here and the hosts, not a lost majority\n", q.Leader, q.Answering, len(q.Members), listOrNone(up))
		return
	}
	fmt.Fprintf(w, "\nQUORUM LOST: %d of %d members answer (%s), %d needed; down: %s\n", q.Answering, len(q.Members), listOrNone(up), q.Need, listOrNone(down))
	fmt.Fprintln(w, "If the members that are down can come back (a reboot, a network fix), bring them back: nothing is lost. If they are gone for good:")
	backupNote := "the last backup"
	if r.LastBackup != "" {
		backupNote = fmt.Sprintf("backup %s, %s ago", r.LastBackup, humanAge(r.BackupAge))
	}
	fmt.Fprintf(w, "  etcdadm recover --from-member %s --store ...   keeps everything %s had (it has the most of the log)\n", q.Best, q.Best)
	fmt.Fprintf(w, "  etcdadm restore latest --store ...              loses what was written after %s\n", backupNote)
}

// confirm asks the operator to type word, unless --yes; anything else
// ends the command with exit code 2, having changed nothing.
func confirm(c *cli.Context, word string) error {
	if c.Bool("yes") {
		return nil
	}
	fmt.Fprintf(c.App.Writer, "Type '%s' to go on: ", word)
	line, _ := bufio.NewReader(c.App.Reader).ReadString('\n')
	if strings.TrimSpace(line) != word {
		return cli.Exit(c.Command.Name+": not confirmed. Nothing was changed.", 2)
	}
	return nil
}
