package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/restore"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// markerFile in the data directory names the restore command whose data
// it holds: a host that crashed after restoring does not restore again.
const markerFile = ".etcdadm-restored"

// freshPeers: a host that registered this recently is alive (member join
// registers at boot and from its 15-minute timer).
const freshPeers = 45 * time.Minute

// Act carries out this host's part of a pending restore command, if any.
// acted is true when it restored this member (etcd then runs on the
// restored data; member join need not decide anything this run).
func Act(ctx context.Context, cfg member.Config, d member.Deps) (acted bool, err error) {
	p, err := FindPending(ctx, d.Store)
	if err != nil || p == nil {
		return false, err
	}
	return act(ctx, cfg, d, p)
}

// act is Act on the restore command p.
func act(ctx context.Context, cfg member.Config, d member.Deps, p *Pending) (acted bool, err error) {
	log := d.Log.With("component", "restore")
	dataDir := member.DataDir(cfg)
	staged := filepath.Join(dataDir, stagedFile(p.ID))
	rec, etag, err := plan(ctx, d, p, dataDir)
	if err != nil {
		return false, err
	}
	me := slices.IndexFunc(rec.Members, func(m member.Peer) bool { return m.Name == cfg.Name })
	if me < 0 && rec.State == Running {
		if err := leaveRestoredCluster(ctx, cfg, d, p.ID, log); err != nil {
			return false, err
		}
	}
	if _, done := rec.Restored[cfg.Name]; rec.State != Running || me < 0 || done {
		// Our checked copy of the backup, not data: nothing to keep.
		if err := os.Remove(staged); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("recovery: %w", err)
		}
		if rec.State != Running {
			return false, nil
		}
		return false, finish(ctx, cfg, d, p, rec, etag)
	}
	marker := filepath.Join(dataDir, markerFile)
	if b, _ := os.ReadFile(marker); string(b) != p.ID {
		// Every host fetches and checks the backup before it stops
		// anything: one that cannot (its link to the store, its disk)
		// keeps serving until the next run, rather than sit stopped.
		if _, err := os.Stat(staged); errors.Is(err, os.ErrNotExist) {
			if _, err := restore.Stage(ctx, d.Store, rec.Backup, dataDir, stagedFile(p.ID)); err != nil {
				return false, fmt.Errorf("recovery: restore command %s: this host could not fetch and check backup %s, so it stopped nothing (tried again on the next run): %w", p.ID, rec.Backup, err)
			}
		}
		log.Warn("RESTORING this member from a backup (restore command "+p.ID+")", "backup", rec.Backup, "members", member.InitialCluster(rec.Members))
		if err := localetcd.Stop(ctx, d.Service); err != nil {
			return false, fmt.Errorf("recovery: stop etcd: %w", err)
		}
		if _, err := localetcd.MoveAside(dataDir, "before-restore-"+p.ID); err != nil {
			return false, fmt.Errorf("recovery: %w", err)
		}
		crashpoint.Here(crashpoint.RestoreAside)
		rc := restore.Config{
			Backup: rec.Backup, DataDir: dataDir, Name: cfg.Name, InitialCluster: member.InitialCluster(rec.Members),
			InitialClusterToken: rec.Token, RevisionBump: RevisionBump,
			Snapshot: staged, // checked on this host above or by plan: no second download
		}
		if _, err := restore.Member(ctx, d.Store, rc, log); err != nil {
			return false, err
		}
		crashpoint.Here(crashpoint.RestoreData)
		if err := atomicfile.Write(marker, []byte(p.ID), 0o600, cfg.Owner.UID, cfg.Owner.GID); err != nil {
			return false, fmt.Errorf("recovery: %w", err)
		}
	}
	if err := os.Remove(staged); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("recovery: %w", err)
	}
	if err := member.StartRestored(ctx, cfg, d, rec.Members, rec.Token); err != nil {
		return false, err
	}
	crashpoint.Here(crashpoint.RestoreStarted)
	for {
		if rec.Restored == nil {
			rec.Restored = map[string]time.Time{}
		}
		rec.Restored[cfg.Name] = d.Now().UTC()
		etag, err = save(ctx, d.Store, *rec, etag, d.Now())
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrPrecondition) {
			return true, err
		}
		if rec, etag, err = Load(ctx, d.Store, p.ID); err != nil {
			return true, err
		}
	}
	log.Info("this member runs on the restored data", "restored", len(rec.Restored), "of", len(rec.Members))
	return true, finish(ctx, cfg, d, p, rec, etag)
}

// leaveRestoredCluster stops this host's member, which the restore left
// out (the spec's count was met by others), and moves its data aside
// (kept): it would go on serving the data from before the restore. Member
// join adds the host back as a new member once the restore is done.
func leaveRestoredCluster(ctx context.Context, cfg member.Config, d member.Deps, command string, log *slog.Logger) error {
	dataDir := member.DataDir(cfg)
	marker := filepath.Join(dataDir, markerFile)
	if b, _ := os.ReadFile(marker); string(b) == command {
		return nil
	}
	if err := localetcd.Stop(ctx, d.Service); err != nil {
		return fmt.Errorf("recovery: stop etcd (this member is not in the restored cluster and must not serve its old data): %w", err)
	}
	dst, err := localetcd.MoveAside(dataDir, "outside-restore-"+command)
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	if dst != "" {
		log.Warn("this member is not in the restored cluster: etcd stopped, its data moved aside (kept); member join adds it back as a new member once the restore is done", "to", dst)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	return writeMarker(marker, command, cfg)
}

// stagedFile is the backup's snapshot, downloaded and checked by plan,
// in the data directory (the volume, where the restore is built).
func stagedFile(command string) string { return ".etcdadm-restore-" + command + ".db" }

// plan loads the command's record, or makes it: the members to restore
// (the spec's count of the hosts registered lately), a new token. A
// command whose backup cannot be used is refused, and nothing stops.
// Every host that finds no record checks the backup in full, into
// dataDir, and restores from that copy: each host downloads it once, all
// at the same time (one checker that the others wait for would add a
// whole download to the restore's time).
func plan(ctx context.Context, d member.Deps, p *Pending, dataDir string) (*Record, string, error) {
	rec, etag, err := Load(ctx, d.Store, p.ID)
	if err != nil || rec != nil {
		return rec, etag, err
	}
	cl, err := clusterspec.Load(ctx, d.Store)
	if err != nil {
		return nil, "", err
	}
	r := Record{Command: p.ID, Backup: p.Command.Backup, State: Running, Started: d.Now().UTC()}
	// Verified in full before any host stops anything: a command written
	// by etcd-manager-ctl was never checked.
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, "", fmt.Errorf("recovery: %w", err)
	}
	_, err = restore.Stage(ctx, d.Store, p.Command.Backup, dataDir, stagedFile(p.ID))
	if err != nil && !errors.Is(err, backup.ErrCorrupt) && !errors.Is(err, backup.ErrUnknownBackup) && !errors.Is(err, backup.ErrNoBackups) {
		return nil, "", fmt.Errorf("recovery: restore command %s: %w (tried again on the next run)", p.ID, err)
	}
	crashpoint.Here(crashpoint.RestoreStaged)
	if err != nil {
		r.State, r.Reason = Refused, fmt.Sprintf("backup %s: %v; delete %s (etcdadm restore a good one)", p.Command.Backup, err, p.Key)
		d.Log.Error("restore command REFUSED", "command", p.ID, "reason", r.Reason)
	} else {
		peers, err := member.Peers(ctx, d.Store)
		if err != nil {
			return nil, "", err
		}
		fresh := member.FreshPeers(peers, d.Now(), freshPeers)
		if want := int(cl.Spec.MemberCount); len(fresh) > want {
			fresh = fresh[:want]
		}
		if len(fresh) == 0 {
			return nil, "", fmt.Errorf("recovery: no host registered in the last %v to restore onto", freshPeers)
		}
		for i := range fresh {
			fresh[i].Updated, fresh[i].Versions = time.Time{}, nil
		}
		r.Members = fresh
		if r.Token, err = newToken(cl.Settings.ClusterName); err != nil {
			return nil, "", err
		}
	}
	if _, err := save(ctx, d.Store, r, "", d.Now()); err != nil && !errors.Is(err, store.ErrPrecondition) {
		return nil, "", err
	}
	// Whoever wrote it first, everyone goes by the stored record.
	rec, etag, err = Load(ctx, d.Store, p.ID)
	if err != nil || rec == nil {
		return nil, "", errors.Join(err, errors.New("recovery: the restore record vanished"))
	}
	if rec.State == Running {
		// New joiners and rewritten env files use the new cluster's token.
		if err := clusterspec.SetToken(ctx, d.Store, rec.Token); err != nil && !errors.Is(err, store.ErrPrecondition) {
			return nil, "", err
		}
	}
	return rec, etag, nil
}

// finish retires the command once every member is restored and the
// cluster serves a linearizable read: our record says done, etcd-manager's
// command is removed (as etcd-manager does).
func finish(ctx context.Context, cfg member.Config, d member.Deps, p *Pending, rec *Record, etag string) error {
	if len(rec.Restored) < len(rec.Members) {
		return nil
	}
	s, err := member.Open(ctx, cfg, d)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := etcdclient.WaitLinearizable(ctx, s.Cli, 2*time.Minute, time.Second, nil); err != nil {
		return fmt.Errorf("recovery: every member is restored but the cluster does not serve reads: %w", err)
	}
	rec.State = Done
	if _, err := save(ctx, d.Store, *rec, etag, d.Now()); err != nil && !errors.Is(err, store.ErrPrecondition) {
		return err
	}
	if err := d.Store.Delete(ctx, p.Key); err != nil {
		return fmt.Errorf("recovery: remove the finished command %s: %w", p.Key, err)
	}
	d.Log.Info("restore finished: every member runs on the restored data", "command", p.ID, "backup", rec.Backup)
	return nil
}
