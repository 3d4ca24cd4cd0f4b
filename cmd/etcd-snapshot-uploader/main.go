// Command etcd-snapshot-uploader backs up etcd from a systemd timer: on the
// leader only, it streams a snapshot of the local member through parallel
// gzip into the store, then applies retention.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/uploader"
	"github.com/etcdadm/etcdadm-immutable/internal/uploaderflags"
)

// Exit codes, for systemd and alerting.
const (
	exitOK      = 0
	exitFailed  = 1
	exitConfig  = 2
	exitStore   = 3
	exitEtcd    = 4
	exitCorrupt = 5
)

const description = `Run once (from etcd-snapshot-uploader.timer): if the local etcd member is
the leader, stream a snapshot -> parallel gzip -> the store as a new
etcd-manager-compatible backup (<store>/<time>-<seq>/etcd.backup.gz, then our
integrity record, then _etcd_backup.meta last), and apply retention. On any
other member it exits 0 and says so, so every master can run the same timer
and the cluster gets exactly one backup per run. A member without a leader
(no quorum) skips too, saying so: 'etcdadm backup now' takes a backup from
it alone. Every question to etcd ends within twice --dial-timeout, the run
within --timeout.

Exit codes: 0 uploaded or skipped (not the leader); 1 other failure;
2 bad configuration; 3 store unreachable, denied or failing; 4 etcd
unreachable; 5 the snapshot failed its integrity check (nothing published).`

// memoryLimit keeps the heap near what the pipeline holds (~25 MiB): with
// the default GOGC the runtime would double it (docs/benchmarks.md).
const memoryLimit = 40 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	app := &cli.App{
		Name:            "etcd-snapshot-uploader",
		Usage:           "back up etcd to the store (leader only) and apply retention",
		Description:     description,
		Flags:           uploaderflags.Flags(),
		Action:          run,
		HideHelpCommand: true,
	}
	os.Exit(cliflags.Run(app, os.Args, cliflags.Always(exitConfig)))
}

func run(c *cli.Context) error {
	log := cliflags.Logger(c).With("component", "snapshot-uploader")
	etcdCfg := etcdclient.FromFlags(c)
	cfg := uploader.Config{
		Endpoint: etcdCfg.Endpoints[0],
		Retention: backup.Policy{
			KeepAll:    c.Duration("retain-all"),
			HourlyDays: c.Int("retain-hourly-days"),
			DailyDays:  c.Int("retain-daily-days"),
		},
		StaleAfter: c.Duration("stale-after"),
		GzipLevel:  c.Int("gzip-level"),
	}
	if len(etcdCfg.Endpoints) != 1 {
		return cli.Exit("--endpoints must name exactly the local member", exitConfig)
	}
	if err := cfg.Validate(); err != nil {
		return cli.Exit(err, exitConfig)
	}
	if err := etcdCfg.Validate(); err != nil {
		return cli.Exit(err, exitConfig)
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return cli.Exit(err, exitConfig)
	}
	cli3, err := etcdclient.New(etcdCfg)
	if err != nil {
		return cli.Exit(err, exitEtcd)
	}
	defer cli3.Close()
	// Every request ends within twice --dial-timeout; the snapshot
	// stream within --timeout.
	etcdclient.Bound(cli3, etcdclient.CallTimeout(etcdCfg.DialTimeout))

	out, runErr := uploader.Run(ctx, cfg, cli3, st, log, time.Now)
	if mf := c.String("metrics-file"); mf != "" {
		if err := uploader.WriteTextfile(mf, out, runErr, time.Now()); err != nil {
			log.Warn("could not write metrics", "err", err)
		}
	}
	switch {
	case runErr != nil:
		code := exitFailed
		switch {
		case errors.Is(runErr, backup.ErrCorrupt):
			code = exitCorrupt
		case errors.Is(runErr, uploader.ErrStore), errors.Is(runErr, store.ErrAccessDenied),
			errors.Is(runErr, store.ErrNoBucket), errors.Is(runErr, store.ErrUnreachable):
			code = exitStore
		case errors.Is(runErr, uploader.ErrEtcd):
			code = exitEtcd
		}
		if code == exitEtcd {
			runErr = etcdCfg.Reach(c.Context, cli3, "etcd", runErr)
		} else {
			runErr = etcdCfg.Why(runErr)
		}
		log.Error("backup failed", "err", runErr)
		return cli.Exit("backup failed: "+runErr.Error(), code)
	case out.Skipped:
		log.Info("skipped: " + out.Reason)
	default:
		in := out.Integrity
		log.Info(fmt.Sprintf("uploaded backup %s: %d bytes gzip (%d snapshot), revision >= %d, etcd %s, in %.1fs; retention kept %d, deleted %d, cleaned %d incomplete",
			out.Backup, in.GzipSize, in.SnapshotSize, in.MinRevision, in.EtcdVersion, out.Duration.Seconds(),
			out.Prune.Kept, out.Prune.Deleted, out.Prune.Incomplete+out.Prune.AbortedUploads))
	}
	return nil
}
