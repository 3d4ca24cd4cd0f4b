package dns

import (
	"fmt"
	"strings"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
)

// WriteMetrics writes s as a Prometheus textfile (node_exporter's textfile
// collector), atomically: a scrape never sees half a file.
func WriteMetrics(path string, s Status) error {
	var b strings.Builder
	degraded := 0
	if s.Degraded {
		degraded = 1
	}
	last := 0.0
	if !s.LastSuccess.IsZero() {
		last = float64(s.LastSuccess.UnixNano()) / 1e9
	}
	fmt.Fprintf(&b, "# HELP etcdadm_dns_last_success_timestamp_seconds End of the last round that updated the store and the DNS provider without error.\n")
	fmt.Fprintf(&b, "# TYPE etcdadm_dns_last_success_timestamp_seconds gauge\n")
	fmt.Fprintf(&b, "etcdadm_dns_last_success_timestamp_seconds %.3f\n", last)
	fmt.Fprintf(&b, "# HELP etcdadm_dns_records_published Member names the provider was asked to resolve.\n")
	fmt.Fprintf(&b, "# TYPE etcdadm_dns_records_published gauge\n")
	fmt.Fprintf(&b, "etcdadm_dns_records_published %d\n", s.Published)
	fmt.Fprintf(&b, "# HELP etcdadm_dns_degraded 1 when the last round failed (store or DNS server unreachable).\n")
	fmt.Fprintf(&b, "# TYPE etcdadm_dns_degraded gauge\n")
	fmt.Fprintf(&b, "etcdadm_dns_degraded %d\n", degraded)

	if err := atomicfile.Write(path, []byte(b.String()), 0o644, -1, -1); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
