package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// storeTimeout bounds LoadControl: an S3 endpoint that does not answer
// retries for minutes otherwise.
const storeTimeout = 30 * time.Second

// Control is what the store holds for the cluster, read whether or not
// etcd answers: the spec, the pause, what the operator asked for and no
// host has finished (a restore, a recovery, a teardown), the version
// rollout, the CA rotation and the newest backup.
type Control struct {
	Spec *etcdmanager.ClusterSpec `json:"spec,omitempty"`
	// PendingRestore: a restore command waits in control/ (ours or
	// etcd-manager's); Restore is our record of the latest one, written
	// once a host acts on it.
	PendingRestore *PendingRestore    `json:"pendingRestore,omitempty"`
	Recover        *recovery.Recover  `json:"recover,omitempty"`
	Teardown       *recovery.Teardown `json:"teardown,omitempty"`
	// The next four are shown under "versions" by etcdadm status -o
	// json, where scripts have read them since before this type.
	Paused     *pause.Pause     `json:"-"`
	Rollout    *rollout.Record  `json:"-"`
	Restore    *recovery.Record `json:"-"`
	CARotation *pki.Rotation    `json:"-"`

	// CAExpires: when the cluster CA (the last of ca.crt's) runs out;
	// zero before 'etcdadm pki init'.
	CAExpires time.Time `json:"caExpires,omitzero"`

	LastBackup string        `json:"lastBackup,omitempty"`
	BackupAge  time.Duration `json:"lastBackupAgeNanos,omitempty"`
	// LastBackupError: the store could not tell whether a backup is
	// complete; LastBackup is then unknown, not absent.
	LastBackupError string `json:"lastBackupError,omitempty"`
	// StoreErrors: what could not be read; that part is unknown, not
	// absent.
	StoreErrors []string `json:"storeErrors,omitempty"`
}

// PendingRestore is a restore command in control/.
type PendingRestore struct {
	ID        string    `json:"id"`
	Key       string    `json:"key"`
	Backup    string    `json:"backup"`
	Requested time.Time `json:"requested"`
}

// LoadControl reads the store's control state once. A part that cannot
// be read is named in StoreErrors; a store that cannot be reached at all
// (down, credentials refused, no bucket) is named once and not asked
// further.
func LoadControl(ctx context.Context, st store.Store, now time.Time) Control {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	var c Control
	gone := false
	// read runs one read unless the store is gone; false when it failed.
	read := func(what string, f func() error) bool {
		if gone {
			return false
		}
		err := f()
		if err == nil {
			return true
		}
		c.StoreErrors = append(c.StoreErrors, fmt.Sprintf("%s: %v", what, err))
		gone = ctx.Err() != nil || errors.Is(err, store.ErrUnreachable) || errors.Is(err, store.ErrAccessDenied) || errors.Is(err, store.ErrNoBucket)
		return false
	}
	read("spec", func() error {
		spec, err := clusterspec.LoadSpec(ctx, st)
		if errors.Is(err, clusterspec.ErrNotSeeded) {
			return nil
		}
		if err == nil {
			c.Spec = &spec
		}
		return err
	})
	read("pause", func() (err error) { c.Paused, err = pause.Get(ctx, st); return err })
	read("teardown", func() (err error) { c.Teardown, err = recovery.TornDown(ctx, st); return err })
	read("recovery", func() (err error) { c.Recover, err = recovery.LoadRecover(ctx, st); return err })
	read("restore command", func() error {
		p, err := recovery.FindPending(ctx, st)
		if p != nil {
			c.PendingRestore = &PendingRestore{ID: p.ID, Key: p.Key, Backup: p.Command.Backup, Requested: time.Unix(0, p.Command.Timestamp).UTC()}
		}
		return err
	})
	read("restore record", func() (err error) { c.Restore, err = recovery.Latest(ctx, st); return err })
	read("rollout", func() (err error) { c.Rollout, _, err = rollout.Load(ctx, st); return err })
	read("CA rotation", func() (err error) { c.CARotation, _, err = pki.LoadRotation(ctx, st); return err })
	read("CA", func() error {
		exp, err := pki.CAExpiry(ctx, st)
		if errors.Is(err, pki.ErrNoCA) {
			return nil
		}
		c.CAExpires = exp
		return err
	})
	read("backups", func() error { return c.lastBackup(ctx, st, now) })
	return c
}

// lastBackup finds the newest complete backup.
func (c *Control) lastBackup(ctx context.Context, st store.Store, now time.Time) error {
	names, err := backup.Names(ctx, st)
	if err != nil {
		return err
	}
	for i := len(names) - 1; i >= 0; i-- {
		_, err := st.Stat(ctx, names[i]+"/"+etcdmanager.MetaFile)
		if errors.Is(err, store.ErrNotFound) {
			continue // incomplete
		}
		if err != nil {
			// Whether this one is complete is unknown, so which is the
			// last backup is too.
			c.LastBackupError = fmt.Sprintf("status: backup %s: %v", names[i], err)
			return nil
		}
		c.LastBackup = names[i]
		t, _, _ := etcdmanager.ParseBackupName(names[i])
		c.BackupAge = now.Sub(t)
		return nil
	}
	return nil
}
