package adm

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/service/systemd"
	"github.com/etcdadm/etcdadm-immutable/internal/status"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/units"
)

func optionalStore() cli.Flag {
	return &cli.StringFlag{Name: "store", EnvVars: []string{"ETCDADM_STORE"}, Usage: "the shared store: also show the spec, the pause, pending restores, recoveries and teardowns, the rollout and the last backup (read without etcd)"}
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "members, leader, learners, versions, database size, alarms; with --store the spec, pause, pending operations and last backup",
		Description: `Asks every member for its status. On a master the defaults reach the local
member with its client certificate (/etc/etcd/pki); elsewhere pass --endpoints
and a client certificate from 'etcdadm pki issue-client'.

With --store (or ETCDADM_STORE) it also shows what the store holds, whether or
not etcd answers: the spec, whether the automation is paused (by whom, since
when, why), a restore, recovery or teardown asked for and not finished, the
version rollout, a CA rotation, and the last backup. Without a client
certificate (a workstation) it shows all of that and says why etcd was not
reached. etcd's questions are bounded by twice --dial-timeout.

Exit codes: 0 etcd answered (and the store, if given, was read), 1 etcd was not
reached or part of the store could not be read (the report shows what was
read and why the rest is missing), 2 a command line it cannot use.`,
		Flags: append([]cli.Flag{optionalStore(), outputFlag(),
			&cli.BoolFlag{Name: "units", Value: true, Usage: "also show this host's etcd units and timers (over D-Bus; skipped where there is no system bus)"},
			&cli.StringFlag{Name: "pki-dir", Value: "/etc/etcd/pki", Usage: "show the expiry of the certificates here (skipped when absent)"},
		}, etcdclient.Flags("https://127.0.0.1:2379")...),
		Action: statusAction,
	}
}

func statusAction(c *cli.Context) error {
	var st store.Store
	if c.String("store") != "" {
		var err error
		if st, err = cliflags.OpenStore(c); err != nil {
			return err
		}
	}
	ec := etcdclient.FromFlags(c)
	e := status.Etcd{Why: ec.Why, Timeout: etcdclient.CallTimeout(ec.DialTimeout), Endpoints: ec.Endpoints}
	if cli3, _, err := etcdClientOf(ec); err != nil {
		e.ClientErr = err
	} else {
		defer cli3.Close()
		e.Cluster = cli3
	}
	r := status.Collect(c.Context, e, st, time.Now())
	if exp, err := pki.Expiry(c.String("pki-dir")); err == nil && len(exp) > 0 {
		r.Certificates = exp
	}
	var unitStates []systemd.UnitState
	if c.Bool("units") {
		unitStates = hostUnits(c)
	}
	vs := versionsOf(c, r)
	if c.String("output") == "json" {
		err := writeJSON(c.App.Writer, struct {
			status.Report
			Units   []systemd.UnitState `json:"units,omitempty"`
			Version versionReport       `json:"versions"`
		}{r, unitStates, vs})
		if err != nil {
			return err
		}
		return incomplete(r)
	}
	w := c.App.Writer
	healthy, voters := 0, 0
	for _, m := range r.Members {
		if !m.Learner {
			voters++
			if m.Healthy {
				healthy++
			}
		}
	}
	if r.EtcdError != "" {
		printNotReached(w, c.String("endpoints"), r, st != nil)
		if st != nil && (r.EtcdNotReached == status.NoAnswer || r.EtcdNotReached == status.NoQuorum) {
			printQuorumLoss(c, w, st, r)
		}
	} else {
		fmt.Fprintf(w, "cluster %s: %d/%d voting members healthy\n\n", r.ClusterID, healthy, voters)
		printMembers(w, r.Members)
	}
	if st != nil {
		printControl(w, r.Control)
	}
	printVersions(w, vs)
	if len(r.Alarms) > 0 {
		fmt.Fprintf(w, "\nALARMS: %s\n", strings.Join(r.Alarms, "; "))
	}
	if r.AlarmsError != "" {
		fmt.Fprintf(w, "\nalarms: UNKNOWN: %s\n", r.AlarmsError)
	}
	if len(r.Certificates) > 0 {
		fmt.Fprintln(w)
		printCerts(w, r.Certificates)
	}
	if len(unitStates) > 0 {
		fmt.Fprintln(w)
		printUnits(w, unitStates)
	}
	if st != nil {
		if r.LastBackupError != "" {
			fmt.Fprintf(w, "\nlast backup: UNKNOWN: %s\n", r.LastBackupError)
		} else if r.LastBackup == "" && len(r.StoreErrors) == 0 {
			fmt.Fprintln(w, "\nlast backup: none")
		} else if r.LastBackup != "" {
			fmt.Fprintf(w, "\nlast backup: %s (%s ago)\n", r.LastBackup, humanAge(r.BackupAge))
		}
	}
	return incomplete(r)
}

// incomplete makes status exit 1, after the report, when etcd was not
// reached or part of the store could not be read.
func incomplete(r status.Report) error {
	if r.EtcdError != "" || len(r.StoreErrors) > 0 || r.LastBackupError != "" {
		return cli.Exit("", 1)
	}
	return nil
}

// printNotReached says that etcd was not reached, why, and where the
// fix is: on this side (a client certificate) or on the hosts.
func printNotReached(w io.Writer, endpoints string, r status.Report, withStore bool) {
	if r.EtcdNotReached == status.NoQuorum {
		fmt.Fprintf(w, "etcd: NO QUORUM: %s\n", r.EtcdError)
		if !withStore {
			fmt.Fprintln(w, "(with --store, status asks every registered member and names the ways out; or see 'etcdadm recover --help')")
		}
		return
	}
	fmt.Fprintf(w, "etcd: NOT REACHED at %s: %s\n", endpoints, strings.TrimPrefix(r.EtcdError, "etcd: "))
	if r.EtcdNotReached == status.NoAnswer {
		fmt.Fprintln(w, "(see: systemctl status etcd etcd-member-join; journalctl -u etcd -u etcd-member-join)")
		return
	}
	fmt.Fprintln(w, "(on a master the defaults reach etcd; elsewhere pass --endpoints, --cacert, --cert and --key of a client certificate from 'etcdadm pki issue-client')")
	if withStore {
		fmt.Fprintln(w, "What follows is the store's state alone.")
	}
}

// pausedLine is how status and spec show say the automation is paused.
func pausedLine(p *pause.Pause) string { return "AUTOMATION PAUSED: " + p.String() }

// printControl shows what the store holds for the operator and the
// hosts: the spec, the pause, a teardown, a recovery, a restore no host
// has taken up yet, and what could not be read. A restore in progress
// and the rollout are printVersions'.
func printControl(w io.Writer, c status.Control) {
	fmt.Fprintln(w)
	for _, e := range c.StoreErrors {
		fmt.Fprintf(w, "store: UNKNOWN: %s\n", e)
	}
	if c.Spec != nil {
		fmt.Fprintf(w, "spec: %d members, etcd %s\n", c.Spec.MemberCount, c.Spec.EtcdVersion)
	} else if len(c.StoreErrors) == 0 {
		fmt.Fprintln(w, "spec: none (the store is not seeded: 'etcdadm seed')")
	}
	waits := ""
	if c.Paused != nil {
		fmt.Fprintln(w, pausedLine(c.Paused))
		waits = "; it waits: the automation is paused"
	}
	if t := c.Teardown; t != nil {
		fmt.Fprintf(w, "TORN DOWN at %s: each host stops etcd and moves its data aside at its next etcd-member-join run%s; 'etcdadm seed --force' declares a new cluster\n", t.At.UTC().Format(time.RFC3339), waits)
	}
	if rc := c.Recover; rc != nil {
		recoverLine(w, *rc, waits)
	}
	if p := c.PendingRestore; p != nil && (c.Restore == nil || c.Restore.Command != p.ID) {
		fmt.Fprintf(w, "RESTORE %s requested at %s: backup %s; no host has taken it up yet: each master's etcd-member-join does at its next run ('systemctl start etcd-member-join' to act now)%s\n", p.ID, p.Requested.Format(time.RFC3339), p.Backup, waits)
	}
	if left := time.Until(c.CAExpires); !c.CAExpires.IsZero() && left < pki.CAWarnBefore {
		fmt.Fprintf(w, "CA EXPIRES %s (in %s): every etcd certificate ends with it; rotate it now: 'etcdadm pki rotate-ca', reissue the clients, 'etcdadm pki rotate-ca --finish' (docs/operations.md, Rotate the CA)\n", c.CAExpires.UTC().Format(time.RFC3339), humanAge(left))
	}
}

func printMembers(w io.Writer, ms []status.Member) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tROLE\tHEALTH\tVERSION\tSTORAGE\tDB SIZE\tIN USE\tPEER URL")
	for _, m := range ms {
		role := "follower"
		switch {
		case m.Learner:
			role = "learner"
		case m.Leader:
			role = "LEADER"
		}
		health := "healthy"
		if !m.Healthy {
			health = "UNHEALTHY"
			if m.Error != "" {
				health += ": " + firstLine(m.Error)
			}
			if u := m.Unreachable; u != nil {
				health += fmt.Sprintf(" (standby %s replaces it at %s unless it answers)", u.By, u.Eligible.Format(time.RFC3339))
			}
		}
		storage := m.StorageVersion
		if storage == "" {
			storage = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.ID, role, health, m.Version, storage, humanBytes(m.DBSize), humanBytes(m.DBInUse), strings.Join(m.PeerURLs, ","))
	}
	tw.Flush()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

func memberCommand() *cli.Command {
	flags := append([]cli.Flag{outputFlag()}, etcdclient.Flags("https://127.0.0.1:2379")...)
	return &cli.Command{
		Name:  "member",
		Usage: "list or remove etcd members",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list members with their role and health",
				Description: `Lists the members (a linearizable read: it needs a quorum) and asks each for
its status. Every question ends within twice --dial-timeout; when the cluster
does not answer it says whether etcd answers at --endpoints without a leader
(no quorum: bring the stopped members back, or 'etcdadm recover') or does not
answer there at all. Exit 1 then.`,
				Flags: flags,
				Action: func(c *cli.Context) error {
					cli3, ec, err := etcdClient(c)
					if err != nil {
						return err
					}
					defer cli3.Close()
					_, ms, err := status.Members(c.Context, cli3)
					if err != nil {
						return cli.Exit(ec.Reach(c.Context, cli3, "member list", err), 1)
					}
					if c.String("output") == "json" {
						return writeJSON(c.App.Writer, ms)
					}
					printMembers(c.App.Writer, ms)
					return nil
				},
			},
			{
				Name:      "remove",
				Usage:     "remove a member (refused if the cluster would lose quorum)",
				ArgsUsage: "NAME|ID",
				Description: `Removes one member. Refused when the healthy members left would be fewer than
the quorum of the smaller cluster. The removed host's next member-join run
moves its old data aside and stands by. To shrink a cluster for good, lower
memberCount with 'etcdadm spec set' instead, or the host will join again.
Every question to etcd ends within twice --dial-timeout: without quorum, or
with no etcd at --endpoints, it ends saying which, and removes nothing.`,
				Flags: flags,
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("usage: etcdadm member remove NAME|ID", 2)
					}
					cli3, ec, err := etcdClient(c)
					if err != nil {
						return err
					}
					defer cli3.Close()
					removed, err := member.Remove(c.Context, cli3, c.Args().First())
					if errors.Is(err, member.ErrUnsafe) {
						return cli.Exit(err, 1)
					}
					if err != nil {
						return cli.Exit(fmt.Errorf("%w\nNothing was removed.", ec.Reach(c.Context, cli3, "member remove", err)), 1)
					}
					fmt.Fprintf(c.App.Writer, "removed member %s\n", removed)
					return nil
				},
			},
		},
	}
}

// hostUnits reads our units' states over D-Bus; nil where there is no
// system bus (a workstation, a container without systemd).
func hostUnits(c *cli.Context) []systemd.UnitState {
	conn, err := sddbus.NewSystemConnectionContext(c.Context)
	if err != nil {
		return nil
	}
	defer conn.Close()
	states, err := systemd.States(c.Context, conn, units.Names())
	if err != nil {
		return nil
	}
	return states
}

func printUnits(w io.Writer, us []systemd.UnitState) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UNIT\tSTATE\tRESULT\tLAST RUN\tNEXT RUN")
	now := time.Now()
	for _, u := range us {
		last, next := "-", "-"
		if !u.LastTrigger.IsZero() {
			last = humanAge(now.Sub(u.LastTrigger)) + " ago"
		}
		if !u.NextElapse.IsZero() {
			next = "in " + humanAge(u.NextElapse.Sub(now))
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%s\n", u.Name, u.Active, u.Sub, u.Result, last, next)
	}
	tw.Flush()
}

func printCerts(w io.Writer, certs map[string]time.Time) {
	names := make([]string, 0, len(certs))
	for n := range certs {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE\tEXPIRES\tIN")
	for _, n := range names {
		left := time.Until(certs[n])
		in := humanAge(left)
		if left < 0 {
			in = "EXPIRED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", n, certs[n].UTC().Format(time.RFC3339), in)
	}
	tw.Flush()
}

// recoverLine says where a recovery request stands; a finished one is
// history and says nothing.
func recoverLine(w io.Writer, rc recovery.Recover, waits string) {
	at := rc.At.UTC().Format(time.RFC3339)
	switch {
	case rc.Expired(time.Now()):
		fmt.Fprintf(w, "RECOVERY %s from %s EXPIRED unbegun at %s: no host acts on it; look again ('etcdadm status') and ask again if the majority is still lost\n", rc.ID, rc.Member, rc.Expires.UTC().Format(time.RFC3339))
	case rc.State == recovery.Running && !rc.Begun.IsZero():
		fmt.Fprintf(w, "RECOVERY %s from %s BEGUN at %s: %s runs alone, then the other hosts join it%s\n", rc.ID, rc.Member, rc.Begun.UTC().Format(time.RFC3339), rc.Member, waits)
	case rc.State == recovery.Running:
		fmt.Fprintf(w, "RECOVERY %s from %s requested at %s: %s's host confirms the majority is lost and restarts it alone at its next etcd-member-join run, by %s; then the other hosts join it ('etcdadm recover --cancel' withdraws it)%s\n", rc.ID, rc.Member, at, rc.Member, rc.Expires.UTC().Format(time.RFC3339), waits)
	case rc.State == recovery.Refused:
		fmt.Fprintf(w, "RECOVERY %s from %s REFUSED: %s; nothing was changed\n", rc.ID, rc.Member, rc.Reason)
	}
}
