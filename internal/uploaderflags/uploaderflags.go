// Package uploaderflags holds etcd-snapshot-uploader's flags, each with
// its ETCDADM_* variable, so the binary and 'etcdadm render --env'
// (internal/settings) read them from one definition. Imported by
// cmd/etcd-snapshot-uploader and internal/settings; it links no D-Bus.
package uploaderflags

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
)

// Flags are the uploader's flags, new values on every call.
func Flags() []cli.Flag {
	return append(append([]cli.Flag{
		cliflags.Store(),
		&cli.StringFlag{Name: "metrics-file", EnvVars: []string{"ETCDADM_METRICS_FILE"}, Usage: "write Prometheus metrics here for node_exporter's textfile collector (e.g. /var/lib/node_exporter/textfile/etcd_backup.prom)"},
		&cli.IntFlag{Name: "gzip-level", Value: backup.DefaultGzipLevel, EnvVars: []string{"ETCDADM_GZIP_LEVEL"}, Usage: "1 (fastest, the default) to 9 (smallest)"},
		&cli.DurationFlag{Name: "timeout", Value: 30 * time.Minute, EnvVars: []string{"ETCDADM_UPLOAD_TIMEOUT"}, Usage: "give up after this long; every etcd call ends within --dial-timeout of its own"},
		cliflags.LogLevel(),
	}, etcdclient.Flags("https://127.0.0.1:2379")...), cliflags.Retention()...)
}
