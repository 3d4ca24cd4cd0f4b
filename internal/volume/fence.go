package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// ClaimFile records this host's claim (volume, expiry, generation) after
// every successful attach or renewal, so a renewal that cannot reach the
// store still knows when the lease runs out.
const ClaimFile = "/run/etcdadm/claim.json"

// FenceUnits are stopped, in this order, when this host may no longer
// hold its volume: first whatever could start etcd again, and the DNS
// registrar (back on the network it would point the member's name at
// this host again, away from the new holder), then etcd, then the mount,
// and last etcd-volume-attach itself, so nothing that requires it (the
// renew timer's service) runs until the next boot claims again.
func FenceUnits() []string {
	return []string{
		"etcd-member-join.timer", "etcd-member-join.service", "etcd-reconcile.timer",
		"etcd-version-switcher.timer", "etcd-version-switcher.service", "etcd-snapshot-uploader.timer",
		"etcd-dns-registrar.service", "etcd-wait-healthy.service", "etcd.service",
		"var-lib-etcd.mount", "etcd-volume-attach.service",
	}
}

// MustFence tells whether a failed renewal (err) means this host must
// stop using its volume: the claim was taken over (ErrLost), or the store
// could not be reached and the lease runs out before the next renewal
// (RenewEvery) could save it. The claim's expiry comes from ClaimFile;
// when that is missing or does not parse, nothing shows the lease is
// still live, so the host fences rather than risk sharing the volume
// with a new holder.
func MustFence(cfg Config, err error, now time.Time) (bool, string) {
	if cfg.Provider != ProviderPool {
		return false, "" // no lease: nothing can take the volume over
	}
	if errors.Is(err, ErrLost) {
		return true, "the claim was taken over by another host"
	}
	c, rerr := readClaimFile(cfg.path(ClaimFile))
	if rerr != nil {
		return true, fmt.Sprintf("the lease could not be renewed and its expiry is unknown (%v)", rerr)
	}
	if left := c.Expires.Sub(now); left < RenewEvery(cfg.Lease) {
		return true, fmt.Sprintf("the lease on %s runs out at %s (in %s) and could not be renewed", c.Volume, c.Expires.Format(time.RFC3339), left.Round(time.Second))
	}
	return false, ""
}

// Fence stops FenceUnits with stop, going on past failures, and returns
// them joined.
func Fence(ctx context.Context, stop func(ctx context.Context, unit string) error, reason string, log *slog.Logger) error {
	log.Error("FENCING this host: stopping etcd and unmounting its volume; another host may hold it now (the next boot claims again)", "reason", reason)
	var errs []error
	for _, u := range FenceUnits() {
		if err := stop(ctx, u); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", u, err))
		}
	}
	return errors.Join(errs...)
}

// claimFile is ClaimFile's content: the claim and its ETag in the store.
type claimFile struct {
	Claim
	ETag string `json:"etag,omitempty"`
}

func writeClaimFile(path string, c Claim) error {
	b, err := json.Marshal(claimFile{c, c.ETag})
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'), 0o644)
}

func readClaimFile(path string) (Claim, error) {
	var f claimFile
	b, err := os.ReadFile(path)
	if err != nil {
		return Claim{}, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return Claim{}, fmt.Errorf("%s: %w", path, err)
	}
	f.Claim.ETag = f.ETag
	return f.Claim, nil
}
