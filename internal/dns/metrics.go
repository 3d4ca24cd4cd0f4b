package dns

import (
	"github.com/etcdadm/etcdadm-immutable/internal/textfile"
)

// WriteMetrics writes s as a Prometheus textfile (node_exporter's textfile
// collector), atomically: a scrape never sees half a file.
func WriteMetrics(path string, s Status) error {
	var g textfile.Gauges
	last := 0.0
	if !s.LastSuccess.IsZero() {
		last = float64(s.LastSuccess.UnixNano()) / 1e9
	}
	g.Set("etcdadm_dns_last_success_timestamp_seconds", "End of the last round that updated the store and the DNS provider without error.", "", last)
	g.Set("etcdadm_dns_records_published", "Member names the provider was asked to resolve.", "", float64(s.Published))
	g.Set("etcdadm_dns_degraded", "1 when the last round failed (store or DNS server unreachable).", "", textfile.Bool(s.Degraded))
	return g.WriteFile(path)
}
