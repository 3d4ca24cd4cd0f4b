package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// ClaimFile records this host's claim (volume, expiry, generation) after
// every successful attach or renewal, so a renewal that cannot reach the
// store still knows when the lease runs out.
const ClaimFile = "/run/etcdadm/claim.json"

// FencedFile marks a fenced host: while it exists, etcd.service and
// etcd-member-join.service do not start (ConditionPathExists=!), so
// nothing (a timer, an operator's restart, a certificate renewal) runs
// the member without a confirmed claim. It holds the reason and the
// units the fence stopped; it is in /run, so a reboot clears it and
// etcd-volume-attach claims again through the store.
const FencedFile = "/run/etcdadm/fenced.json"

// FenceUnits are stopped, in this order, when this host may no longer
// hold its volume: first whatever could start etcd again, and the DNS
// registrar (back on the network it would point the member's name at
// this host again, away from the new holder), then etcd, then the mount,
// and last etcd-volume-attach itself (the volume is no longer attached;
// un-fencing starts it again, which claims through the store).
func FenceUnits() []string {
	return []string{
		"etcd-member-join.timer", "etcd-member-join.service", "etcd-reconcile.timer",
		"etcd-version-switcher.timer", "etcd-version-switcher.service", "etcd-snapshot-uploader.timer",
		"etcd-dns-registrar.service", "etcd-wait-healthy.service", "etcd.service",
		"var-lib-etcd.mount", "etcd-volume-attach.service",
	}
}

// Units starts and stops systemd units (over D-Bus on a host).
type Units interface {
	Active(ctx context.Context, unit string) (bool, error)
	Stop(ctx context.Context, unit string) error
	// Start starts unit; with wait it waits for the job's result,
	// without it systemd orders the job after the ones it is After=.
	Start(ctx context.Context, unit string, wait bool) error
}

// fenceRecord is FencedFile's content.
type fenceRecord struct {
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Stopped are the FenceUnits that were active (started again when
	// the host un-fences).
	Stopped []string `json:"stopped"`
}

// Fenced reports whether the host below root is fenced.
func Fenced(root string) bool {
	_, err := os.Stat(filepath.Join(root, FencedFile))
	return err == nil
}

// Fence marks the host fenced (FencedFile, first: from then on nothing
// starts the member) and stops FenceUnits with u, going on past
// failures, and returns them joined. Re-running it on a fenced host
// stops the units again and keeps the first record's list.
func Fence(ctx context.Context, root string, u Units, reason string, now time.Time, log *slog.Logger) error {
	log.Error("FENCING this host: stopping etcd and unmounting its volume; it comes back by itself when the store confirms its claim again, unless another host took the volume over", "reason", reason)
	path := filepath.Join(root, FencedFile)
	rec := fenceRecord{Reason: reason, At: now}
	if old, err := readFenceRecord(path); err == nil {
		rec.Stopped = old.Stopped
	} else {
		for _, unit := range FenceUnits() {
			if on, err := u.Active(ctx, unit); err == nil && on {
				rec.Stopped = append(rec.Stopped, unit)
			}
		}
	}
	var errs []error
	if err := writeJSON(path, rec); err != nil {
		errs = append(errs, fmt.Errorf("mark fenced: %w", err))
	}
	for _, unit := range FenceUnits() {
		if err := u.Stop(ctx, unit); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", unit, err))
		}
	}
	return errors.Join(errs...)
}

// Unfence brings a fenced host back once its claim is confirmed again:
// etcd-volume-attach claims through the store and mounts the volume;
// then the mark goes and member join (which rejoins with the volume's
// data and starts etcd) and the other units the fence stopped start.
func Unfence(ctx context.Context, root string, u Units, log *slog.Logger) error {
	path := filepath.Join(root, FencedFile)
	rec, err := readFenceRecord(path)
	if err != nil {
		log.Warn("fence record unreadable; starting every unit a fence stops", "err", err)
		rec.Stopped = FenceUnits()
	}
	log.Info("UN-FENCING this host: the claim is confirmed again; attaching the volume and starting the member", "fenced_at", rec.At, "fenced_for", rec.Reason)
	if err := u.Start(ctx, "etcd-volume-attach.service", true); err != nil {
		return fmt.Errorf("unfence: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("unfence: %w", err)
	}
	// Member join starts etcd itself (after deciding it rejoins).
	start := []string{"etcd-member-join.service"}
	for i := len(rec.Stopped) - 1; i >= 0; i-- {
		switch unit := rec.Stopped[i]; unit {
		case "etcd-volume-attach.service", "var-lib-etcd.mount", "etcd.service", "etcd-member-join.service":
		default:
			start = append(start, unit)
		}
	}
	var errs []error
	for _, unit := range start {
		if err := u.Start(ctx, unit, false); err != nil {
			errs = append(errs, fmt.Errorf("start %s: %w", unit, err))
		}
	}
	return errors.Join(errs...)
}

func readFenceRecord(path string) (fenceRecord, error) {
	var r fenceRecord
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'), 0o644)
}

// claimRecord is ClaimFile's content: the claim as the store holds it
// (with its ETag), and what each source confirmed last.
type claimRecord struct {
	Claim
	ETag string `json:"etag,omitempty"`
	// Confirmed: the expiries each source confirmed last.
	Confirmed Expiries `json:"confirmed"`
	// Source: what confirmed the claim in the last renewal ("store",
	// "etcd", "store+etcd"; "" nothing), and when that was.
	Source     string    `json:"source"`
	SourceTime time.Time `json:"sourceTime,omitzero"`
}

func writeClaimRecord(path string, r claimRecord) error {
	r.ETag = r.Claim.ETag
	return writeJSON(path, r)
}

// writeClaimFile records a claim just made or renewed in the store.
func writeClaimFile(path string, c Claim) error {
	return writeClaimRecord(path, claimRecord{Claim: c, Confirmed: Expiries{Store: c.Expires}, Source: "store", SourceTime: time.Now()})
}

func readClaimRecord(path string) (claimRecord, error) {
	var r claimRecord
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	r.Claim.ETag = r.ETag
	if r.Confirmed.Store.IsZero() {
		r.Confirmed.Store = r.Expires // written before there were two sources
	}
	return r, nil
}

func readClaimFile(path string) (Claim, error) {
	r, err := readClaimRecord(path)
	return r.Claim, err
}
