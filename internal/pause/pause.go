// Package pause is the operator's switch that holds the automation still
// while a person works with the CLI: a flag in the store that every unit
// reads before it changes membership, versions or data (member join,
// reconcile, the version switcher, restore/recover/teardown acts, a volume
// takeover). The snapshot uploader keeps backing up. Imported by the units'
// commands and internal/adm.
package pause

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Key is where the flag lives; its presence means paused.
const Key = "etcdadm/paused.json"

// Pause says who paused the automation, when and why.
type Pause struct {
	By     string    `json:"by"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
}

// String is the line units log and etcdadm status shows.
func (p Pause) String() string {
	s := fmt.Sprintf("paused by %s since %s", p.By, p.Since.UTC().Format(time.RFC3339))
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s + " ('etcdadm resume' to go on)"
}

// Get returns the pause, or nil when the automation runs. A flag that
// does not parse counts as a pause (the operator meant to hold things).
func Get(ctx context.Context, st store.Store) (*Pause, error) {
	b, _, err := store.GetBytes(ctx, st, Key, 1<<16)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pause: read %s: %w", Key, err)
	}
	var p Pause
	if err := json.Unmarshal(b, &p); err != nil {
		return &Pause{By: "unknown", Reason: fmt.Sprintf("%s does not parse (%v)", Key, err)}, nil
	}
	return &p, nil
}

// Set pauses the automation (or updates the reason of a pause).
func Set(ctx context.Context, st store.Store, reason string, now time.Time) (Pause, error) {
	p := Pause{By: who(), Since: now.UTC(), Reason: reason}
	if _, err := store.PutJSON(ctx, st, Key, p, store.PutOptions{}); err != nil {
		return p, fmt.Errorf("pause: %w", err)
	}
	return p, nil
}

// Clear resumes the automation; false when it was not paused.
func Clear(ctx context.Context, st store.Store) (bool, error) {
	if _, err := st.Stat(ctx, Key); errors.Is(err, store.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("pause: %w", err)
	}
	if err := st.Delete(ctx, Key); err != nil {
		return false, fmt.Errorf("pause: resume: %w", err)
	}
	return true, nil
}

// who names the person: user@host.
func who() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		name += "@" + h
	}
	return name
}
