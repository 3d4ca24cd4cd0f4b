package volume

import (
	"fmt"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/textfile"
)

// WriteMetrics writes this host's pool lease for node_exporter's textfile
// collector after an attach or a renewal: when the last renewal ran,
// whether it succeeded, and when the lease runs out (from ClaimFile, which
// a failed renewal leaves as it was), so an alert can fire before the
// lease lapses and the host fences itself.
func WriteMetrics(path string, cfg Config, runErr error, at time.Time) error {
	var g textfile.Gauges
	g.Set("etcdadm_volume_last_renew_timestamp_seconds", "When this host last claimed or renewed its volume lease.", "", float64(at.Unix()))
	g.Set("etcdadm_volume_last_renew_success", "1 if the last claim or renewal succeeded.", "", textfile.Bool(runErr == nil))
	g.Set("etcdadm_volume_lease_seconds", "The length of a lease (renewed every third of it).", "", cfg.Lease.Seconds())
	if c, err := readClaimFile(cfg.path(ClaimFile)); err == nil {
		g.Set("etcdadm_volume_lease_expiry_timestamp_seconds", "When this host's volume lease runs out unless it is renewed.", fmt.Sprintf("{volume=%q}", c.Volume), float64(c.Expires.Unix()))
	}
	return g.WriteFile(path)
}
