package cliflags

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runWithLogLevel runs an app with the --log-level flag and a subcommand
// that builds the logger, and returns the level the logger logs at.
func runWithLogLevel(t *testing.T, args ...string) (slog.Level, error) {
	t.Helper()
	lvl := slog.Level(100)
	app := &cli.App{
		Name:      "x",
		Writer:    io.Discard,
		ErrWriter: io.Discard,
		Flags:     []cli.Flag{LogLevel()},
		Commands: []*cli.Command{{Name: "sub", Action: func(c *cli.Context) error {
			log := Logger(c)
			for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
				if log.Enabled(context.Background(), l) {
					lvl = l
					break
				}
			}
			return nil
		}}},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.Run(append([]string{"x"}, args...))
	return lvl, err
}

func TestLogLevel(t *testing.T) {
	t.Setenv("ETCDADM_LOG_LEVEL", "")
	os.Unsetenv("ETCDADM_LOG_LEVEL")
	for _, tc := range []struct {
		args []string
		want slog.Level
	}{
		{[]string{"sub"}, slog.LevelInfo},
		{[]string{"--log-level", "debug", "sub"}, slog.LevelDebug},
		{[]string{"--log-level", "WARN", "sub"}, slog.LevelWarn},
		{[]string{"--log-level", "error", "sub"}, slog.LevelError},
	} {
		if got, err := runWithLogLevel(t, tc.args...); err != nil || got != tc.want {
			t.Errorf("%q: logs at %v, %v; want %v", tc.args, got, err, tc.want)
		}
	}
	for _, args := range [][]string{{"--log-level", "loud", "sub"}, {"--log-level", "verbose", "sub"}} {
		_, err := runWithLogLevel(t, args...)
		if err == nil || !strings.Contains(err.Error(), args[1]) || !strings.Contains(err.Error(), "debug, info, warn or error") {
			t.Errorf("%q: %v, want an error naming the value and the valid levels", args, err)
		}
	}
	t.Setenv("ETCDADM_LOG_LEVEL", "loud")
	if _, err := runWithLogLevel(t, "sub"); err == nil || !strings.Contains(err.Error(), "loud") {
		t.Errorf("ETCDADM_LOG_LEVEL=loud: %v, want an error", err)
	}
}

// An operator on a master need not repeat --store: etcdadm.env as render
// writes it (quoted where needed) fills what the environment leaves unset.
func TestLoadHostEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etcdadm.env")
	os.WriteFile(path, []byte("# Settings every master shares\nETCDADM_STORE=\"s3://b/p?endpoint=https://h:9000&region=r\"\nETCDADM_LOG_LEVEL=debug\nOTHER=x\n"), 0o644)
	t.Setenv("ETCDADM_STORE", "")
	os.Unsetenv("ETCDADM_STORE")
	t.Setenv("ETCDADM_LOG_LEVEL", "warn")
	t.Setenv("OTHER", "")
	LoadHostEnv(path)
	for k, want := range map[string]string{"ETCDADM_STORE": "s3://b/p?endpoint=https://h:9000&region=r", "ETCDADM_LOG_LEVEL": "warn", "OTHER": ""} {
		if got := os.Getenv(k); got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
}
