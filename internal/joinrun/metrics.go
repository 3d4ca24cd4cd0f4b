package joinrun

import (
	"fmt"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/textfile"
)

// WriteMetrics writes what the reconcile run saw, for node_exporter's
// textfile collector: each voting member's health as this host sees it
// and whether a standby host watches it to replace it (an alert fires on
// a member down past the replacement grace that no standby watches).
func WriteMetrics(path string, seen []member.Seen, lookErr error, at time.Time) error {
	var g textfile.Gauges
	g.Set("etcdadm_reconcile_last_run_timestamp_seconds", "When the reconcile timer last ran on this host.", "", float64(at.Unix()))
	g.Set("etcdadm_reconcile_members_seen", "1 if the last reconcile run could list and probe the members.", "", textfile.Bool(lookErr == nil))
	for _, s := range seen {
		l := fmt.Sprintf("{member=%q}", s.Name)
		g.Set("etcdadm_member_healthy", "1 if the voting member answers this host (its status, within 2 s).", l, textfile.Bool(s.Healthy))
		g.Set("etcdadm_member_replacement_watched", "1 if a standby host watches this member to replace it once unreachable for the grace.", l, textfile.Bool(s.Watched))
	}
	return g.WriteFile(path)
}
