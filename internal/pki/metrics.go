package pki

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/textfile"
)

// WriteMetrics writes, for node_exporter's textfile collector, when each
// certificate in dir runs out and whether the last renewal run (renewErr)
// succeeded: an alert fires on a certificate close to its end, whether the
// renewal timer stopped or keeps failing.
func WriteMetrics(path, dir string, renewErr error, at time.Time) error {
	var g textfile.Gauges
	g.Set("etcdadm_pki_last_renew_timestamp_seconds", "When the certificate renewal last ran on this host.", "", float64(at.Unix()))
	g.Set("etcdadm_pki_last_renew_success", "1 if the last certificate renewal run succeeded.", "", textfile.Bool(renewErr == nil))
	exp, err := Expiry(dir)
	for _, f := range slices.Sorted(maps.Keys(exp)) {
		g.Set("etcdadm_pki_certificate_expiry_timestamp_seconds", "When the certificate runs out (its NotAfter).", fmt.Sprintf("{file=%q}", f), float64(exp[f].Unix()))
	}
	if werr := g.WriteFile(path); werr != nil {
		return werr
	}
	return err
}
