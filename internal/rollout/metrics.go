package rollout

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
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
	var b bytes.Buffer
	gauge := func(name, help, labels string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s%s %s\n", name, help, name, name, labels, strconv.FormatFloat(v, 'g', -1, 64))
	}
	b2f := func(ok bool) float64 {
		if ok {
			return 1
		}
		return 0
	}
	gauge("etcdadm_switcher_last_run_timestamp_seconds", "When the version switcher last ran on this host.", "", float64(at.Unix()))
	gauge("etcdadm_switcher_last_run_success", "1 if the last run ended without error.", "", b2f(runErr == nil))
	gauge("etcdadm_switcher_switches", "Versions this host's member moved to in the last run.", "", float64(len(out.Switched)))
	if rec != nil {
		gauge("etcdadm_rollout_info", "The cluster's rollout: target version and state (running, done, failed).", fmt.Sprintf(`{target=%q,state=%q}`, rec.Target, rec.State), 1)
		gauge("etcdadm_rollout_failed", "1 while a rollout is stopped because a member failed at the new version.", "", b2f(rec.State == Failed))
		gauge("etcdadm_rollout_running", "1 while a rollout is in progress.", "", b2f(rec.State == Running))
		gauge("etcdadm_rollout_started_timestamp_seconds", "When the current rollout was declared.", "", float64(rec.Started.Unix()))
	}
	if err := atomicfile.Write(path, b.Bytes(), 0o644, -1, -1); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
