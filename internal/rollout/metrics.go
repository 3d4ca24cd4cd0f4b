package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/textfile"
)

// WriteMetrics writes the rollout's state for node_exporter's textfile
// collector: a dashboard shows the target and state, an alert fires on a
// stopped rollout or on a switcher failing run after run.
func WriteMetrics(ctx context.Context, path string, st store.Store, out Outcome, runErr error, at time.Time) error {
	rec := out.Record
	if rec == nil {
		var err error
		if rec, _, err = Load(ctx, st); err != nil {
			return err
		}
	}
	var g textfile.Gauges
	gauge, b2f := g.Set, textfile.Bool
	gauge("etcdadm_switcher_last_run_timestamp_seconds", "When the version switcher last ran on this host.", "", float64(at.Unix()))
	gauge("etcdadm_switcher_last_run_success", "1 if the last run ended without error.", "", b2f(runErr == nil))
	gauge("etcdadm_switcher_switches", "Versions this host's member moved to in the last run.", "", float64(len(out.Switched)))
	if rec != nil {
		gauge("etcdadm_rollout_info", "The cluster's rollout: target version and state (running, done, failed).", fmt.Sprintf(`{target=%q,state=%q}`, rec.Target, rec.State), 1)
		gauge("etcdadm_rollout_failed", "1 while a rollout is stopped because a member failed at the new version.", "", b2f(rec.State == Failed))
		gauge("etcdadm_rollout_running", "1 while a rollout is in progress.", "", b2f(rec.State == Running))
		gauge("etcdadm_rollout_started_timestamp_seconds", "When the current rollout was declared.", "", float64(rec.Started.Unix()))
	}
	return g.WriteFile(path)
}
