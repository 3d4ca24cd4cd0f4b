package dns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	tmp := f.Name()
	_, werr := f.WriteString(b.String())
	if werr == nil {
		werr = f.Chmod(0o644)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("metrics: %s: %w", path, werr)
	}
	return nil
}
