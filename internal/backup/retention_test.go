package backup

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

var now = time.Date(2026, 11, 22, 12, 30, 0, 0, time.UTC)

func name(ago time.Duration, seq int) string { return etcdmanager.BackupName(now.Add(-ago), seq) }

func TestPlanExamples(t *testing.T) {
	p := DefaultPolicy()
	in := []string{
		name(200*24*time.Hour, 1),               // too old: deleted
		name(100*24*time.Hour, 1),               // too old: deleted
		name(10*24*time.Hour+time.Hour, 1),      // oldest of its day: kept
		name(10*24*time.Hour+30*time.Minute, 1), // same day, younger: deleted
		name(3*time.Hour+20*time.Minute, 1),     // oldest of its hour: kept
		name(3*time.Hour+5*time.Minute, 1),      // same hour: deleted
		name(50*time.Minute, 1),                 // < 1h: kept
		name(10*time.Minute, 1),                 // < 1h: kept
	}
	sort.Strings(in)
	keep, del := p.Plan(in, now)
	wantDel := []string{in[0], in[1], in[3], in[5]}
	if !slices.Equal(del, wantDel) {
		t.Fatalf("deleted %v\nwant %v", del, wantDel)
	}
	if len(keep) != 4 {
		t.Fatalf("kept %v", keep)
	}
	// The newest backup survives even when everything is old.
	old := []string{name(300*24*time.Hour, 1), name(200*24*time.Hour, 1)}
	keep, _ = p.Plan(old, now)
	if !slices.Equal(keep, old[1:]) {
		t.Fatalf("kept %v, want only the newest", keep)
	}
}

// TestPlanProperties checks the policy on generated histories: every kept
// backup is justified by a rule, every deleted one by none.
func TestPlanProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		p := Policy{KeepAll: time.Duration(rng.IntN(120)) * time.Minute, HourlyDays: rng.IntN(10), DailyDays: 10 + rng.IntN(100)}
		set := map[string]bool{}
		for range rng.IntN(400) {
			ago := time.Duration(rng.Int64N(int64(150 * 24 * time.Hour)))
			if rng.IntN(3) == 0 {
				ago = time.Duration(rng.Int64N(int64(3 * time.Hour)))
			}
			set[etcdmanager.BackupName(now.Add(-ago).Truncate(time.Second), 1+rng.IntN(2))] = true
		}
		names := make([]string, 0, len(set))
		for n := range set {
			names = append(names, n)
		}
		sort.Strings(names)
		keep, del := p.Plan(names, now)
		if len(keep)+len(del) != len(names) {
			t.Fatalf("round %d: %d kept + %d deleted != %d", round, len(keep), len(del), len(names))
		}
		kept := map[string]bool{}
		for _, n := range keep {
			kept[n] = true
		}
		for i, n := range names {
			tm, _, _ := etcdmanager.ParseBackupName(n)
			age := now.Sub(tm)
			firstHour, firstDay := true, true
			for _, o := range names[:i] {
				ot, _, _ := etcdmanager.ParseBackupName(o)
				if ot.Truncate(time.Hour).Equal(tm.Truncate(time.Hour)) {
					firstHour = false
				}
				if ot.Truncate(24 * time.Hour).Equal(tm.Truncate(24 * time.Hour)) {
					firstDay = false
				}
			}
			justified := i == len(names)-1 || age < p.KeepAll ||
				(firstHour && age < time.Duration(p.HourlyDays)*24*time.Hour) ||
				(firstDay && age < time.Duration(p.DailyDays)*24*time.Hour)
			if kept[n] != justified {
				t.Fatalf("round %d (policy %+v): %s (age %v, first of hour %v, of day %v) kept=%v, want %v",
					round, p, n, age, firstHour, firstDay, kept[n], justified)
			}
		}
	}
}

// countingStore counts the listing requests Prune makes.
type countingStore struct {
	store.Store
	lists, stats int
}

func (c *countingStore) List(ctx context.Context, prefix string) ([]store.Entry, error) {
	c.lists++
	return c.Store.List(ctx, prefix)
}

func (c *countingStore) Stat(ctx context.Context, key string) (store.Info, error) {
	c.stats++
	return c.Store.Stat(ctx, key)
}

func putBackup(t *testing.T, st store.Store, n string, complete bool) {
	t.Helper()
	mustPut(t, st, n+"/"+etcdmanager.DataFile, "data")
	mustPut(t, st, integrityKey(n), `{"gzipSHA256":"x","gzipSize":4}`)
	if complete {
		mustPut(t, st, n+"/"+etcdmanager.MetaFile, `{"etcdVersion":"3.6.16"}`)
	}
}

func mustPut(t *testing.T, st store.Store, key, v string) {
	t.Helper()
	if _, err := store.PutBytes(context.Background(), st, key, []byte(v), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestPruneDeletesExactlyThePlanWithBoundedRequests(t *testing.T) {
	fs, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &countingStore{Store: fs}
	var names []string
	for h := range 24 * 30 { // a month of hourly backups, plus some extra
		for q := range 1 + h%2 {
			names = append(names, name(time.Duration(h)*time.Hour+time.Duration(q)*15*time.Minute+time.Minute, 1))
		}
	}
	sort.Strings(names)
	for _, n := range names {
		putBackup(t, st, n, true)
	}
	stale := name(2*time.Hour+7*time.Minute, 2) // an interrupted upload: no meta
	putBackup(t, st, stale, false)
	mustPut(t, st, "control/etcd-cluster-spec", `{"memberCount":3,"etcdVersion":"3.6.16"}`)
	_, wantDel := DefaultPolicy().Plan(names, now)
	lastDay := 1 // the stale one
	for _, n := range names {
		if tm, _, _ := etcdmanager.ParseBackupName(n); now.Sub(tm) <= 24*time.Hour {
			lastDay++
		}
	}

	st.lists, st.stats = 0, 0
	res, err := Prune(context.Background(), st, DefaultPolicy(), now, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != len(wantDel) || res.Incomplete != 1 {
		t.Fatalf("result %+v, want %d deleted and 1 incomplete", res, len(wantDel))
	}
	// Two listings: the store's top level, and control/ for the restore
	// commands waiting (their backups are kept).
	if st.lists != 2 || st.stats != lastDay {
		t.Fatalf("prune of %d backups made %d listings and %d stats; want 2 listings and %d stats (one per backup of the last day)", len(names), st.lists, st.stats, lastDay)
	}
	left, err := Names(context.Background(), fs)
	if err != nil {
		t.Fatal(err)
	}
	wantLeft := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(wantDel, n) })
	if !slices.Equal(left, wantLeft) {
		t.Fatalf("left %d backups, want %d", len(left), len(wantLeft))
	}
	for _, n := range wantDel {
		if _, err := fs.Stat(context.Background(), integrityKey(n)); err == nil {
			t.Fatalf("integrity record of deleted backup %s remains", n)
		}
	}
	if _, err := fs.Stat(context.Background(), "control/etcd-cluster-spec"); err != nil {
		t.Fatalf("retention touched control/: %v", err)
	}
}

// TestPruneKeepsWhatACommandOrARolloutNames: a backup the policy would
// delete stays while a restore command waits for it or a rollout not yet
// done took it before a step; once the rollout is done it goes.
func TestPruneKeepsWhatACommandOrARolloutNames(t *testing.T) {
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	old1, old2, newest := name(200*24*time.Hour, 1), name(199*24*time.Hour, 1), name(time.Minute, 1)
	for _, n := range []string{old1, old2, newest} {
		putBackup(t, st, n, true)
	}
	cmd, err := etcdmanager.MarshalRestoreCommand(etcdmanager.RestoreCommand{Timestamp: now.UnixNano(), Backup: old1})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, st, etcdmanager.CommandKey(now), string(cmd))
	mustPut(t, st, RolloutKey, `{"target":"3.6.16","state":"running","backups":{"3.6.16":"`+old2+`"}}`)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := Prune(context.Background(), st, DefaultPolicy(), now, time.Hour, quiet); err != nil {
		t.Fatal(err)
	}
	if left, _ := Names(context.Background(), st); !slices.Equal(left, []string{old1, old2, newest}) {
		t.Fatalf("left %v, want the commanded and the rollout's backups kept", left)
	}
	mustPut(t, st, RolloutKey, `{"target":"3.6.16","state":"done","backups":{"3.6.16":"`+old2+`"}}`)
	if _, err := Prune(context.Background(), st, DefaultPolicy(), now, time.Hour, quiet); err != nil {
		t.Fatal(err)
	}
	if left, _ := Names(context.Background(), st); !slices.Equal(left, []string{old1, newest}) {
		t.Fatalf("left %v after the rollout was done, want its backup gone and the commanded one kept", left)
	}
}
