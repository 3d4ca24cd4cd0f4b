package volume

import (
	"fmt"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/textfile"
)

// WriteMetrics writes this host's pool claim for node_exporter's textfile
// collector after an attach or a renewal: when the last renewal ran,
// whether it succeeded, which source (the store, etcd) confirmed the
// claim in it, until when each source holds it, when it could be taken
// over at the earliest (from ClaimFile, which a failed renewal leaves as
// it was), and whether the host is fenced, so an alert can fire before
// the host fences itself.
func WriteMetrics(path string, cfg Config, runErr error, at time.Time) error {
	var g textfile.Gauges
	g.Set("etcdadm_volume_last_renew_timestamp_seconds", "When this host last claimed or renewed its volume lease.", "", float64(at.Unix()))
	g.Set("etcdadm_volume_last_renew_success", "1 if the last claim or renewal confirmed the claim.", "", textfile.Bool(runErr == nil))
	g.Set("etcdadm_volume_lease_seconds", "The length of a lease (renewed every third of it).", "", cfg.Lease.Seconds())
	g.Set("etcdadm_volume_fenced", "1 while this host is fenced: its member stopped, its volume unmounted, until the store confirms the claim again.", "", textfile.Bool(Fenced(cfg.Root)))
	if r, err := readClaimRecord(cfg.path(ClaimFile)); err == nil {
		until := r.Confirmed.Store
		if r.Confirmed.Etcd.After(until) {
			until = r.Confirmed.Etcd
		}
		g.Set("etcdadm_volume_lease_expiry_timestamp_seconds", "When this host's claim runs out unless it is renewed (the later of the store's and etcd's expiry).", fmt.Sprintf("{volume=%q}", r.Volume), float64(until.Unix()))
		for _, s := range []struct {
			source string
			until  time.Time
		}{{"store", r.Confirmed.Store}, {"etcd", r.Confirmed.Etcd}} {
			labels := fmt.Sprintf("{volume=%q,source=%q}", r.Volume, s.source)
			g.Set("etcdadm_volume_claim_expiry_timestamp_seconds", "When the claim runs out in each source, as it last confirmed it (0: it does not hold it).", labels, float64(max(s.until.Unix(), 0)))
		}
		for _, source := range []string{"store", "etcd"} {
			labels := fmt.Sprintf("{volume=%q,source=%q}", r.Volume, source)
			g.Set("etcdadm_volume_claim_confirmed", "1 if this source confirmed the claim in the last renewal.", labels, textfile.Bool(strings.Contains(r.Source, source)))
		}
		g.Set("etcdadm_volume_claim_confirmed_timestamp_seconds", "When the last renewal ran whose sources are etcdadm_volume_claim_confirmed.", fmt.Sprintf("{volume=%q}", r.Volume), float64(max(r.SourceTime.Unix(), 0)))
	}
	return g.WriteFile(path)
}
