package backup

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Backup is one listed (complete) backup.
type Backup struct {
	Name      string
	Time      time.Time
	Meta      etcdmanager.BackupInfo
	DataSize  int64
	Integrity *Integrity // nil for backups written by etcd-manager
	// Err says why the backup is unreadable: its meta file or integrity
	// record does not parse (wraps ErrCorrupt). Meta is then empty. List
	// shows such a backup; Get never returns one.
	Err error
}

// Names returns the names of everything in the store that is named like a
// backup, complete or not, oldest first. One listing of the top level.
func Names(ctx context.Context, st store.Store) ([]string, error) {
	entries, err := st.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("backup: list %s: %w", st, err)
	}
	var names []string
	for _, e := range entries {
		if _, _, ok := etcdmanager.ParseBackupName(e.Name); ok && e.Dir {
			names = append(names, e.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// List returns the complete backups, oldest first: those whose meta file
// exists. It reads each meta file and integrity record, 8 at a time. A
// backup whose files do not parse is listed with Err set, so one bad
// backup hides none of the others; a store that cannot be read fails the
// whole list.
func List(ctx context.Context, st store.Store) ([]Backup, error) {
	names, err := Names(ctx, st)
	if err != nil {
		return nil, err
	}
	out := make([]*Backup, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			b, err := load(ctx, st, name)
			if errors.Is(err, ErrUnknownBackup) {
				return // incomplete: not listed
			}
			out[i], errs[i] = b, err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var list []Backup
	for _, b := range out {
		if b != nil {
			list = append(list, *b)
		}
	}
	return list, nil
}

// Get returns one complete, readable backup; "latest" names the newest
// readable one, passing over newer ones that are unreadable. An
// unreadable backup asked for by name is an error wrapping ErrCorrupt.
func Get(ctx context.Context, st store.Store, name string) (Backup, error) {
	if name == "latest" {
		list, err := List(ctx, st)
		if err != nil {
			return Backup{}, err
		}
		if len(list) == 0 {
			return Backup{}, ErrNoBackups
		}
		for i := len(list) - 1; i >= 0; i-- {
			if list[i].Err == nil {
				return list[i], nil
			}
		}
		return Backup{}, fmt.Errorf("backup latest: none of the %d backups is readable; the newest: %w", len(list), list[len(list)-1].Err)
	}
	if _, _, ok := etcdmanager.ParseBackupName(name); !ok {
		return Backup{}, fmt.Errorf("backup %q: %w", name, ErrUnknownBackup)
	}
	b, err := load(ctx, st, name)
	if err != nil {
		return Backup{}, err
	}
	if b.Err != nil {
		return Backup{}, b.Err
	}
	return *b, nil
}

func load(ctx context.Context, st store.Store, name string) (*Backup, error) {
	t, _, _ := etcdmanager.ParseBackupName(name)
	mb, _, err := store.GetBytes(ctx, st, name+"/"+etcdmanager.MetaFile, 1<<20)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("backup %s: %w", name, ErrUnknownBackup)
	}
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", name, err)
	}
	b := &Backup{Name: name, Time: t, DataSize: -1}
	if b.Meta, err = etcdmanager.ParseMeta(mb); err != nil {
		b.Err = fmt.Errorf("backup %s: %w: %w", name, ErrCorrupt, err)
	}
	if di, err := st.Stat(ctx, name+"/"+etcdmanager.DataFile); err == nil {
		b.DataSize = di.Size
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("backup %s: %w", name, err)
	}
	ib, _, err := store.GetBytes(ctx, st, integrityKey(name), 1<<20)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("backup %s: %w", name, err)
	default:
		in, err := parseIntegrity(ib)
		if err != nil {
			if b.Err == nil {
				b.Err = fmt.Errorf("backup %s: %w: %s: %w", name, ErrCorrupt, integrityKey(name), err)
			}
			break
		}
		b.Integrity = &in
	}
	return b, nil
}
