package backup

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Command is a restore command waiting in control/ (etcd-manager's
// layout: etcd-manager-ctl's and ours).
type Command struct {
	Key     string
	ID      string
	Command etcdmanager.RestoreCommand
}

// Commands lists the restore commands waiting in control/, oldest first.
func Commands(ctx context.Context, st store.Store) ([]Command, error) {
	es, err := st.List(ctx, etcdmanager.ControlPrefix)
	if err != nil {
		return nil, fmt.Errorf("restore commands: %w", err)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
	var out []Command
	for _, e := range es {
		if !e.Dir {
			continue
		}
		key := etcdmanager.ControlPrefix + e.Name + "/" + etcdmanager.CommandFile
		b, _, err := store.GetBytes(ctx, st, key, 1<<16)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("restore commands: %w", err)
		}
		c, ok, err := etcdmanager.ParseCommand(b)
		if err != nil {
			return nil, fmt.Errorf("restore commands: %s: %w (delete it to go on)", key, err)
		}
		if ok {
			out = append(out, Command{Key: key, ID: etcdmanager.CommandID(key), Command: c})
		}
	}
	return out, nil
}

// RolloutKey is the version rollout's record (internal/rollout.Record,
// whose test checks that Pinned reads it as rollout writes it).
const RolloutKey = "etcdadm/rollout.json"

// rolloutBackups is what retention reads of that record.
type rolloutBackups struct {
	State   string            `json:"state"`
	Backups map[string]string `json:"backups"`
}

// Pinned names the backups retention keeps whatever its policy, and why:
// those a waiting restore command names, and those a rollout not yet
// done took before its steps (its way back).
func Pinned(ctx context.Context, st store.Store) (map[string]string, error) {
	pins := map[string]string{}
	cmds, err := Commands(ctx, st)
	if err != nil {
		return nil, err
	}
	for _, c := range cmds {
		pins[c.Command.Backup] = "restore command " + c.ID + " waits for it"
	}
	var r rolloutBackups
	if _, err := store.GetJSON(ctx, st, RolloutKey, &r); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("retention: %w", err)
	}
	if r.State != "done" {
		for step, name := range r.Backups {
			pins[name] = "the version rollout took it before its step to " + step
		}
	}
	return pins, nil
}
