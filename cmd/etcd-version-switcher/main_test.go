package main

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
)

// A stopped rollout exits 3 (someone must look), any other failure 1.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("%w: etcd-b failed at 3.6.16: not healthy", rollout.ErrStopped), 3},
		{errors.New("store unreachable"), 1},
		{cli.Exit("--timeout: bad", 2), 2},
	} {
		app := &cli.App{Name: "etcd-version-switcher", ErrWriter: io.Discard, Action: func(*cli.Context) error { return tc.err }}
		if got := cliflags.Run(app, []string{"etcd-version-switcher"}, exitCode); got != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.err, got, tc.want)
		}
	}
}
