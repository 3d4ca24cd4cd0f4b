package adm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/restore"
	"github.com/etcdadm/etcdadm-immutable/internal/uploader"
)

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:  "backup",
		Usage: "list, take and verify backups in the store",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list complete backups, oldest first",
				Description: `A backup is listed once its _etcd_backup.meta exists (written last). VERIFIED
says what the upload proved: "sha256" for our backups (etcd's embedded snapshot
hash matched while streaming, and the sha256 of the upload is recorded; run
'backup verify' to check the stored bytes), "no record" for backups written by
etcd-manager (run 'backup verify' to check them). A backup whose meta file or
integrity record does not parse is listed as UNREADABLE with the reason;
'latest' names the newest readable backup. "NO QUORUM (NAME alone)": taken by
'backup now' from member NAME while the cluster had no leader; it may lack the
last writes the cluster acknowledged.`,
				Flags:  []cli.Flag{cliflags.Store(), outputFlag()},
				Action: backupList,
			},
			{
				Name:  "now",
				Usage: "take a backup now from the given member (leader or not, quorum or not)",
				Description: `Streams a snapshot of the first --endpoints member into the store, exactly as
the timer does, but from any member and without retention. Every question to
etcd ends within twice --dial-timeout, the whole backup within --timeout.

When the cluster has no quorum (the member answers but has no leader) the
backup is still taken, from that member alone: a snapshot needs no quorum.
It holds what that member had applied, which may lack the last writes the
cluster acknowledged; the command says so and 'backup list' marks it
NO QUORUM. That is the backup to take before 'etcdadm recover'.`,
				Flags: append([]cli.Flag{cliflags.Store(),
					&cli.DurationFlag{Name: "timeout", Value: 30 * time.Minute, Usage: "give up after this long"},
				}, etcdclient.Flags("https://127.0.0.1:2379")...),
				Action: backupNow,
			},
			{
				Name:      "verify",
				Usage:     "download a backup and check it end to end",
				ArgsUsage: "NAME|latest",
				Description: `Downloads the backup and checks the sha256 and size of etcd.backup.gz against
our integrity record (when there is one), the gzip stream, and the sha256 etcd
embeds in every snapshot. With --restore-test it also restores the snapshot
into a scratch directory and reports its revision and key count. Exit status 1
and "corrupt" when anything does not match.`,
				Flags: []cli.Flag{
					cliflags.Store(), outputFlag(),
					&cli.BoolFlag{Name: "restore-test", Usage: "also restore into a scratch directory and report revision and keys"},
					&cli.StringFlag{Name: "scratch-dir", Value: os.TempDir(), Usage: "where --restore-test works (needs room for the database)"},
				},
				Action: backupVerify,
			},
		},
	}
}

type listRow struct {
	Name        string `json:"name"`
	Time        string `json:"time"`
	AgeSeconds  int64  `json:"ageSeconds"`
	SizeBytes   int64  `json:"sizeBytes"`
	EtcdVersion string `json:"etcdVersion"`
	MinRevision int64  `json:"minRevision,omitempty"`
	Verified    string `json:"verified"`
	Members     int32  `json:"memberCount,omitempty"`
	// WithoutQuorum: taken from one member while the cluster had no
	// leader (backup now on a survivor); it may lack the last writes.
	WithoutQuorum bool `json:"withoutQuorum,omitempty"`
	// Error: the backup is unreadable, and why.
	Error string `json:"error,omitempty"`
}

func backupList(c *cli.Context) error {
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return err
	}
	list, err := backup.List(c.Context, st)
	if err != nil {
		return err
	}
	now := time.Now()
	rows := make([]listRow, 0, len(list))
	for _, b := range list {
		r := listRow{Name: b.Name, Time: b.Time.Format(time.RFC3339), AgeSeconds: int64(now.Sub(b.Time).Seconds()),
			SizeBytes: b.DataSize, EtcdVersion: b.Meta.EtcdVersion, Verified: "no record"}
		if b.Err != nil {
			r.Verified, r.Error = "UNREADABLE", b.Err.Error()
			rows = append(rows, r)
			continue
		}
		if b.Meta.ClusterSpec != nil {
			r.Members = b.Meta.ClusterSpec.MemberCount
		}
		if in := b.Integrity; in != nil {
			r.MinRevision = in.MinRevision
			switch {
			case in.GzipSize != b.DataSize:
				r.Verified = "SIZE MISMATCH"
			case in.SnapshotHashOK:
				r.Verified = "sha256"
			}
			if in.WithoutQuorum {
				r.WithoutQuorum = true
				r.Verified += ", NO QUORUM (" + in.Member + " alone)"
			}
		}
		rows = append(rows, r)
	}
	if c.String("output") == "json" {
		return writeJSON(c.App.Writer, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(c.App.Writer, "no backups in %s\n", st)
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tAGE\tSIZE\tETCD\tREVISION\tVERIFIED")
	for _, r := range rows {
		rev := "-"
		if r.MinRevision > 0 {
			rev = fmt.Sprintf(">=%d", r.MinRevision)
		}
		etcd, verified := r.EtcdVersion, r.Verified
		if r.Error != "" {
			etcd = "?"
			verified += ": " + strings.TrimPrefix(r.Error, "backup "+r.Name+": ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, humanAge(time.Duration(r.AgeSeconds)*time.Second), humanBytes(r.SizeBytes), etcd, rev, verified)
	}
	return tw.Flush()
}

func backupNow(c *cli.Context) error {
	log := cliflags.Logger(c).With("component", "backup-now")
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return err
	}
	ecfg := etcdclient.FromFlags(c)
	if len(ecfg.Endpoints) == 0 {
		return cli.Exit("backup now: --endpoints names no member", cliflags.ExitUsage)
	}
	// The first member only: every question, and the snapshot, go to it.
	ecfg.Endpoints = ecfg.Endpoints[:1]
	cli3, ecfg, err := etcdClientOf(ecfg)
	if err != nil {
		return err
	}
	defer cli3.Close()
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	cfg := uploader.Config{Endpoint: ecfg.Endpoints[0], AnyMember: true, SkipPrune: true, StaleAfter: time.Hour, Retention: backup.DefaultPolicy(), AnswerTimeout: ecfg.DialTimeout}
	out, err := uploader.Run(ctx, cfg, cli3, st, log, time.Now)
	if errors.Is(err, uploader.ErrEtcd) {
		return cli.Exit(fmt.Errorf("%w\nNo backup was taken.", ecfg.Reach(c.Context, cli3, "backup now", err)), 1)
	}
	if err != nil {
		return ecfg.Why(err)
	}
	fmt.Fprintf(c.App.Writer, "backup %s: %s gzip, snapshot %s, revision >= %d, etcd %s, from %s in %.1fs\n",
		out.Backup, humanBytes(out.Integrity.GzipSize), humanBytes(out.Integrity.SnapshotSize),
		out.Integrity.MinRevision, out.Integrity.EtcdVersion, out.LocalMember, out.Duration.Seconds())
	if out.WithoutQuorum {
		fmt.Fprintf(c.App.Writer, "NO QUORUM: the cluster has no leader; this backup is %s's data alone and may lack the last writes the cluster acknowledged ('backup list' marks it)\n", out.LocalMember)
	}
	return nil
}

type verifyResult struct {
	Name             string `json:"name"`
	OK               bool   `json:"ok"`
	Error            string `json:"error,omitempty"`
	CheckedIntegrity bool   `json:"checkedIntegrityRecord"`
	GzipSize         int64  `json:"gzipSize"`
	SnapshotSize     int64  `json:"snapshotSize"`
	Revision         int64  `json:"revision,omitempty"`
	Keys             int64  `json:"keys,omitempty"`
	Leases           int64  `json:"leases,omitempty"`
}

func backupVerify(c *cli.Context) error {
	log := cliflags.Logger(c).With("component", "backup-verify")
	name := c.Args().First()
	if name == "" || c.NArg() > 1 {
		return cli.Exit("usage: etcdadm backup verify NAME|latest", 2)
	}
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return err
	}
	var res verifyResult
	var rep backup.Report
	if c.Bool("restore-test") {
		var r restore.Result
		r, err = restore.Test(c.Context, st, name, c.String("scratch-dir"), log)
		rep = r.Report
		res.Revision, res.Keys, res.Leases = r.Stats.Revision, r.Stats.LiveKeys, r.Stats.Leases
	} else {
		rep, err = backup.Verify(c.Context, st, name, "")
	}
	res.Name, res.CheckedIntegrity, res.GzipSize, res.SnapshotSize = rep.Backup.Name, rep.CheckedIntegrity, rep.GzipSize, rep.SnapshotSize
	if res.Name == "" {
		res.Name = name
	}
	if err != nil && !errors.Is(err, backup.ErrCorrupt) {
		return err
	}
	res.OK = err == nil
	if err != nil {
		res.Error = err.Error()
	}
	if c.String("output") == "json" {
		if werr := writeJSON(c.App.Writer, res); werr != nil {
			return werr
		}
	} else if res.OK {
		fmt.Fprintf(c.App.Writer, "backup %s: OK (gzip %s, snapshot %s, embedded snapshot hash matches", res.Name, humanBytes(res.GzipSize), humanBytes(res.SnapshotSize))
		if res.CheckedIntegrity {
			fmt.Fprint(c.App.Writer, ", sha256 matches the integrity record")
		} else {
			fmt.Fprint(c.App.Writer, ", no integrity record: written by etcd-manager?")
		}
		fmt.Fprintln(c.App.Writer, ")")
		if c.Bool("restore-test") {
			fmt.Fprintf(c.App.Writer, "restore test: OK, revision %d, %d keys, %d leases\n", res.Revision, res.Keys, res.Leases)
		}
	}
	if err != nil {
		return cli.Exit(fmt.Sprintf("%v\nDo not restore from it; pick another with 'etcdadm backup list'.", err), 1)
	}
	return nil
}
