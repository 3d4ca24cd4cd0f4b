package uploader

import (
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/textfile"
)

const lastSuccessMetric = "etcdadm_backup_last_success_timestamp_seconds"

// WriteTextfile writes the run's metrics for node_exporter's textfile
// collector, atomically (temp file + rename). A failed run keeps the
// previous last-success time, so an alert on its age fires.
func WriteTextfile(path string, out Outcome, runErr error, at time.Time) error {
	lastSuccess := textfile.Previous(path, lastSuccessMetric)
	ok := runErr == nil
	if ok && !out.Skipped {
		lastSuccess = float64(at.Unix())
	}
	var g textfile.Gauges
	gauge := func(name, help string, v float64) { g.Set(name, help, "", v) }
	gauge("etcdadm_backup_last_run_timestamp_seconds", "When the snapshot uploader last ran.", float64(at.Unix()))
	gauge("etcdadm_backup_last_run_success", "1 if the last run succeeded (uploaded, or skipped on a non-leader).", textfile.Bool(ok))
	gauge("etcdadm_backup_last_run_skipped", "1 if the last run skipped because this member is not the leader.", textfile.Bool(out.Skipped))
	gauge(lastSuccessMetric, "When this host last uploaded a backup.", lastSuccess)
	if ok && !out.Skipped {
		gauge("etcdadm_backup_last_duration_seconds", "Duration of the last upload, snapshot to retention.", out.Duration.Seconds())
		gauge("etcdadm_backup_last_size_bytes", "Size of the last uploaded backup (gzip).", float64(out.Integrity.GzipSize))
		gauge("etcdadm_backup_last_snapshot_bytes", "Size of the last snapshot before compression.", float64(out.Integrity.SnapshotSize))
		gauge("etcdadm_backup_last_revision", "Revision the last backup holds at least.", float64(out.Integrity.MinRevision))
		gauge("etcdadm_backup_retained_count", "Backups kept by retention after the last run.", float64(out.Prune.Kept))
	}
	return g.WriteFile(path)
}
