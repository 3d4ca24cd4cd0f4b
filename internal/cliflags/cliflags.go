// Package cliflags holds the flags several commands share (store, etcd
// connection, logging), each also readable from an ETCDADM_* environment
// variable so units can set them with EnvironmentFile=. Only cmd/ imports it.
package cliflags

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/envfile"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
)

// Store is the --store flag.
func Store() cli.Flag {
	return &cli.StringFlag{
		Name:     "store",
		Usage:    "the shared store: " + storeurl.Help,
		EnvVars:  []string{"ETCDADM_STORE"},
		Required: true,
	}
}

// HostCredentialsFile is where Ignition puts a master's S3 credentials.
const HostCredentialsFile = "/etc/etcdadm/s3-credentials"

// OpenStore opens the store named by --store; credentials from the
// environment, else (on a master, as root) the host's credentials file.
func OpenStore(c *cli.Context) (store.Store, error) {
	getenv := func(k string) string {
		v := os.Getenv(k)
		if k == "AWS_SHARED_CREDENTIALS_FILE" && v == "" && os.Getenv("AWS_ACCESS_KEY_ID") == "" {
			if f, err := os.Open(HostCredentialsFile); err == nil {
				f.Close()
				return HostCredentialsFile
			}
		}
		return v
	}
	st, err := storeurl.Open(c.Context, c.String("store"), getenv)
	if err != nil {
		return nil, cli.Exit(err, ExitUsage) // the URL (opening dials nothing)
	}
	return st, nil
}

// LoadHostEnv sets the ETCDADM_* variables of a master's environment file
// (/etc/etcdadm/etcdadm.env, written by Ignition) that are not set yet, so
// an operator on a host need not repeat --store.
func LoadHostEnv(path string) {
	vars, err := envfile.Read(path)
	if err != nil {
		return // not a master, or a file the units cannot read either
	}
	for k, v := range vars {
		if strings.HasPrefix(k, "ETCDADM_") && os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
}

// Logger is the process logger: text to stderr (journald adds time and
// unit), level from --log-level (checked when the flags are parsed).
func Logger(c *cli.Context) *slog.Logger {
	lvl, lvlErr := ParseLogLevel(c.String("log-level"))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		Level: lvl,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 && os.Getenv("JOURNAL_STREAM") != "" {
				return slog.Attr{} // journald stamps the time
			}
			return a
		},
	}))
	if lvlErr != nil { // only a command that skipped LogLevel's check gets here
		log.Warn("logging at info", "err", lvlErr)
	}
	return log
}

// ParseLogLevel reads a --log-level value: debug, info, warn or error
// (any case, with slog's offsets such as debug-4); "" is info.
func ParseLogLevel(s string) (slog.Level, error) {
	lvl := slog.LevelInfo
	if s == "" {
		return lvl, nil
	}
	if err := lvl.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return lvl, nil
}

// LogLevel is the --log-level flag. An unknown level fails the command
// before it runs.
func LogLevel() cli.Flag {
	return &cli.StringFlag{
		Name: "log-level", Value: "info", EnvVars: []string{"ETCDADM_LOG_LEVEL"}, Usage: "debug, info, warn or error",
		Action: func(_ *cli.Context, s string) error {
			if _, err := ParseLogLevel(s); err != nil {
				return cli.Exit(err, ExitUsage)
			}
			return nil
		},
	}
}

// Retention returns the retention flags (etcd-manager's policy).
func Retention() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "retain-all", Value: time.Hour, EnvVars: []string{"ETCDADM_RETAIN_ALL"}, Usage: "keep every backup younger than this"},
		&cli.IntFlag{Name: "retain-hourly-days", Value: 7, EnvVars: []string{"ETCDADM_RETAIN_HOURLY_DAYS"}, Usage: "keep the oldest backup of each hour for this many days"},
		&cli.IntFlag{Name: "retain-daily-days", Value: 90, EnvVars: []string{"ETCDADM_RETAIN_DAILY_DAYS"}, Usage: "keep the oldest backup of each day for this many days; older ones are deleted (the newest backup is always kept)"},
		&cli.DurationFlag{Name: "stale-after", Value: time.Hour, EnvVars: []string{"ETCDADM_STALE_AFTER"}, Usage: "remove what an interrupted upload left once it is this old (an upload still running is younger)"},
	}
}
