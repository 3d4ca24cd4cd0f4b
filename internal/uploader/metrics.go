package uploader

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
)

const lastSuccessMetric = "etcdadm_backup_last_success_timestamp_seconds"

// WriteTextfile writes the run's metrics for node_exporter's textfile
// collector, atomically (temp file + rename). A failed run keeps the
// previous last-success time, so an alert on its age fires.
func WriteTextfile(path string, out Outcome, runErr error, at time.Time) error {
	lastSuccess := previousValue(path, lastSuccessMetric)
	ok := runErr == nil
	if ok && !out.Skipped {
		lastSuccess = float64(at.Unix())
	}
	var b bytes.Buffer
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name, strconv.FormatFloat(v, 'g', -1, 64))
	}
	gauge("etcdadm_backup_last_run_timestamp_seconds", "When the snapshot uploader last ran.", float64(at.Unix()))
	gauge("etcdadm_backup_last_run_success", "1 if the last run succeeded (uploaded, or skipped on a non-leader).", b2f(ok))
	gauge("etcdadm_backup_last_run_skipped", "1 if the last run skipped because this member is not the leader.", b2f(out.Skipped))
	gauge(lastSuccessMetric, "When this host last uploaded a backup.", lastSuccess)
	if ok && !out.Skipped {
		gauge("etcdadm_backup_last_duration_seconds", "Duration of the last upload, snapshot to retention.", out.Duration.Seconds())
		gauge("etcdadm_backup_last_size_bytes", "Size of the last uploaded backup (gzip).", float64(out.Integrity.GzipSize))
		gauge("etcdadm_backup_last_snapshot_bytes", "Size of the last snapshot before compression.", float64(out.Integrity.SnapshotSize))
		gauge("etcdadm_backup_last_revision", "Revision the last backup holds at least.", float64(out.Integrity.MinRevision))
		gauge("etcdadm_backup_retained_count", "Backups kept by retention after the last run.", float64(out.Prune.Kept))
	}
	if err := atomicfile.Write(path, b.Bytes(), 0o644, -1, -1); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

func b2f(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

func previousValue(path, name string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			x, _ := strconv.ParseFloat(v, 64)
			return x
		}
	}
	return 0
}
