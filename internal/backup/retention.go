package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Policy is etcd-manager's retention policy: keep everything younger than
// KeepAll, the oldest backup of each hour for HourlyDays, the oldest of
// each day for DailyDays, and delete the rest. The newest backup is always
// kept, so a cluster whose uploader stopped for months still has one.
type Policy struct {
	KeepAll    time.Duration
	HourlyDays int
	DailyDays  int
}

// DefaultPolicy is etcd-manager's (and kops') default.
func DefaultPolicy() Policy { return Policy{KeepAll: time.Hour, HourlyDays: 7, DailyDays: 90} }

// Validate rejects policies that would delete more than an operator means.
func (p Policy) Validate() error {
	if p.KeepAll < 0 || p.HourlyDays < 0 || p.DailyDays < 0 {
		return fmt.Errorf("retention: durations must not be negative")
	}
	if p.DailyDays < p.HourlyDays {
		return fmt.Errorf("retention: daily retention (%d days) shorter than hourly (%d days); set --retain-daily-days >= --retain-hourly-days", p.DailyDays, p.HourlyDays)
	}
	return nil
}

// Plan splits backup names (sorted oldest first) into those the policy
// keeps and those it deletes. Names that are not backup names are kept.
func (p Policy) Plan(names []string, now time.Time) (keep, del []string) {
	seenHour := map[time.Time]bool{}
	seenDay := map[time.Time]bool{}
	newest := ""
	for _, n := range names {
		if n > newest {
			newest = n
		}
	}
	for _, n := range names {
		t, _, ok := etcdmanager.ParseBackupName(n)
		if !ok || n == newest {
			keep = append(keep, n)
			continue
		}
		age := now.Sub(t)
		hour, day := t.Truncate(time.Hour), t.Truncate(24*time.Hour)
		firstOfHour, firstOfDay := !seenHour[hour], !seenDay[day]
		seenHour[hour], seenDay[day] = true, true
		switch {
		case age < p.KeepAll:
			keep = append(keep, n)
		case age < time.Duration(p.HourlyDays)*24*time.Hour && firstOfHour:
			keep = append(keep, n)
		case age < time.Duration(p.DailyDays)*24*time.Hour && firstOfDay:
			keep = append(keep, n)
		default:
			del = append(del, n)
		}
	}
	return keep, del
}

// Remove deletes one backup: the meta file first, so it is unlisted at
// once, then its data and our integrity record. Safe to re-run.
func Remove(ctx context.Context, st store.Store, name string) error {
	if _, _, ok := etcdmanager.ParseBackupName(name); !ok {
		return fmt.Errorf("backup %q: %w", name, ErrUnknownBackup)
	}
	for _, k := range []string{name + "/" + etcdmanager.MetaFile, name + "/" + etcdmanager.DataFile, integrityKey(name)} {
		if err := st.Delete(ctx, k); err != nil {
			return fmt.Errorf("backup %s: remove: %w", name, err)
		}
		crashpoint.Here(crashpoint.RetentionGone) // unlisted, data not yet removed
	}
	return nil
}

// CleanResult counts what Prune removed.
type CleanResult struct {
	Kept, Deleted, Incomplete, AbortedUploads int
}

// Prune removes what interrupted uploads left (older than staleAfter, so a
// running upload is never touched) and then applies the policy. Its cost
// does not grow with the number of files: one listing of the store's top
// level, one listing of unfinished uploads, one stat for each backup of
// the last day, and the deletes the policy names.
func Prune(ctx context.Context, st store.Store, p Policy, now time.Time, staleAfter time.Duration, log *slog.Logger) (CleanResult, error) {
	var res CleanResult
	names, err := Names(ctx, st)
	if err != nil {
		return res, err
	}
	aborted, err := st.CleanIncomplete(ctx, "", staleAfter)
	if err != nil {
		return res, fmt.Errorf("retention: clean unfinished uploads: %w", err)
	}
	res.AbortedUploads = aborted
	complete := names[:0:0]
	for _, n := range names {
		t, _, _ := etcdmanager.ParseBackupName(n)
		if now.Sub(t) > 24*time.Hour {
			complete = append(complete, n)
			continue
		}
		_, err := st.Stat(ctx, n+"/"+etcdmanager.MetaFile)
		switch {
		case err == nil:
			complete = append(complete, n)
		case !errors.Is(err, store.ErrNotFound):
			return res, fmt.Errorf("retention: %w", err)
		case now.Sub(t) >= staleAfter:
			log.Info("removing incomplete backup left by an interrupted upload", "backup", n)
			if err := Remove(ctx, st, n); err != nil {
				return res, err
			}
			res.Incomplete++
		}
	}
	keep, del := p.Plan(complete, now)
	pins, err := Pinned(ctx, st)
	if err != nil {
		return res, err
	}
	del = slices.DeleteFunc(del, func(n string) bool {
		if why, ok := pins[n]; ok {
			log.Info("retention: keeping a backup its policy would delete", "backup", n, "because", why)
			keep = append(keep, n)
			return true
		}
		return false
	})
	for _, n := range del {
		if err := Remove(ctx, st, n); err != nil {
			return res, err
		}
		log.Info("retention: deleted backup", "backup", n)
	}
	res.Kept, res.Deleted = len(keep), len(del)
	return res, nil
}
