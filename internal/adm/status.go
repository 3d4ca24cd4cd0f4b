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
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/service/systemd"
	"github.com/etcdadm/etcdadm-immutable/internal/status"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/units"
)

func optionalStore() cli.Flag {
	return &cli.StringFlag{Name: "store", EnvVars: []string{"ETCDADM_STORE"}, Usage: "the shared store, to show the last backup (optional)"}
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "members, leader, learners, versions, database size, alarms, last backup",
		Description: `Asks every member for its status. On a master the defaults reach the local
member with its client certificate (/etc/etcd/pki); elsewhere pass --endpoints
and a client certificate from 'etcdadm pki issue-client'. With --store (or
ETCDADM_STORE) it also shows the age of the last backup.`,
		Flags: append([]cli.Flag{optionalStore(), outputFlag(),
			&cli.BoolFlag{Name: "units", Value: true, Usage: "also show this host's etcd units and timers (over D-Bus; skipped where there is no system bus)"},
			&cli.StringFlag{Name: "pki-dir", Value: "/etc/etcd/pki", Usage: "show the expiry of the certificates here (skipped when absent)"},
		}, etcdclient.Flags("https://127.0.0.1:2379")...),
		Action: statusAction,
	}
}

func statusAction(c *cli.Context) error {
	cli3, err := etcdclient.New(etcdclient.FromFlags(c))
	if err != nil {
		return err
	}
	defer cli3.Close()
	var st store.Store
	if c.String("store") != "" {
		if st, err = cliflags.OpenStore(c); err != nil {
			return err
		}
	}
	r, err := status.Collect(c.Context, cli3, st, time.Now())
	if err != nil {
		return err
	}
	if exp, err := pki.Expiry(c.String("pki-dir")); err == nil && len(exp) > 0 {
		r.Certificates = exp
	}
	var unitStates []systemd.UnitState
	if c.Bool("units") {
		unitStates = hostUnits(c)
	}
	vs := versionsOf(c, r, st)
	if c.String("output") == "json" {
		err := writeJSON(c.App.Writer, struct {
			status.Report
			Units   []systemd.UnitState `json:"units,omitempty"`
			Version versionReport       `json:"versions"`
		}{r, unitStates, vs})
		if err != nil {
			return err
		}
		return etcdDown(r)
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
		fmt.Fprintf(w, "etcd: NOT ANSWERING at %s: %s\n(see: systemctl status etcd etcd-member-join; journalctl -u etcd -u etcd-member-join)\n", c.String("endpoints"), r.EtcdError)
		if st != nil {
			printQuorumLoss(c, w, st, r)
		}
	} else {
		fmt.Fprintf(w, "cluster %s: %d/%d voting members healthy\n\n", r.ClusterID, healthy, voters)
		printMembers(w, r.Members)
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
		} else if r.LastBackup == "" {
			fmt.Fprintln(w, "\nlast backup: none")
		} else {
			fmt.Fprintf(w, "\nlast backup: %s (%s ago)\n", r.LastBackup, humanAge(r.BackupAge))
		}
	}
	return etcdDown(r)
}

// etcdDown makes status exit 1 when etcd did not answer, after the report.
func etcdDown(r status.Report) error {
	if r.EtcdError != "" {
		return cli.Exit("", 1)
	}
	return nil
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
				Flags: flags,
				Action: func(c *cli.Context) error {
					cli3, err := etcdclient.New(etcdclient.FromFlags(c))
					if err != nil {
						return err
					}
					defer cli3.Close()
					_, ms, err := status.Members(c.Context, cli3)
					if err != nil {
						return err
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
memberCount with 'etcdadm spec set' instead, or the host will join again.`,
				Flags: flags,
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("usage: etcdadm member remove NAME|ID", 2)
					}
					cli3, err := etcdclient.New(etcdclient.FromFlags(c))
					if err != nil {
						return err
					}
					defer cli3.Close()
					removed, err := member.Remove(c.Context, cli3, c.Args().First())
					if errors.Is(err, member.ErrUnsafe) {
						return cli.Exit(err, 1)
					}
					if err != nil {
						return err
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
