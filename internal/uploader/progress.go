package uploader

import (
	"io"
	"log/slog"
	"time"
)

// progress logs how far a long snapshot stream has come, at most every
// interval, so `journalctl -u etcd-snapshot-uploader -f` shows it moving.
type progress struct {
	r        io.Reader
	total    int64 // the database size etcd reported; 0 if unknown
	done     int64
	last     time.Time
	interval time.Duration
	log      *slog.Logger
	start    time.Time
}

func newProgress(r io.Reader, total int64, log *slog.Logger) *progress {
	now := time.Now()
	return &progress{r: r, total: total, last: now, start: now, interval: 10 * time.Second, log: log}
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	if now := time.Now(); now.Sub(p.last) >= p.interval {
		p.last = now
		attrs := []any{"streamedMiB", p.done >> 20, "MiBps", float64(p.done>>20) / now.Sub(p.start).Seconds()}
		if p.total > 0 {
			attrs = append(attrs, "totalMiB", p.total>>20, "percent", 100*p.done/p.total)
		}
		p.log.Info("snapshot in progress", attrs...)
	}
	return n, err
}
