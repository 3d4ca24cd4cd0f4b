package volume_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/internal/volume"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"8G", 8 << 30}, {"512m", 512 << 20}, {" 1T ", 1 << 40}, {"4096", 4096}, {"2K", 2048},
		{"", 0}, {"0G", 0}, {"-1M", 0}, {"8GB", 0}, {"9999999999T", 0},
	} {
		got, err := volume.ParseSize(tc.in)
		if tc.want == 0 {
			if err == nil {
				t.Errorf("%q: %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// What etcd-volume-attach refuses before touching anything: each a
// configuration error (exit 2) naming the flag.
func TestCommandConfigErrors(t *testing.T) {
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pool := func(mod func(*volume.Command)) volume.Command {
		c := volume.Command{
			Config: volume.Config{Provider: volume.ProviderPool, Volumes: []string{"etcd-a"}, Lease: time.Minute, HostID: "h1", Root: t.TempDir()},
			Driver: volume.DriverLoopfile, LoopfileDir: t.TempDir(), Size: "8G", Mounter: volume.MounterPlain, Timeout: time.Second,
		}
		mod(&c)
		return c
	}
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name    string
		cmd     volume.Command
		noStore bool
		want    string
	}{
		{"no store", pool(func(*volume.Command) {}), true, "--store"},
		{"small image", pool(func(c *volume.Command) { c.Size = "100M" }), false, "--size 100M: at least 256M"},
		{"bad size", pool(func(c *volume.Command) { c.Size = "big" }), false, "--size"},
		{"unknown driver", pool(func(c *volume.Command) { c.Driver = "ebs" }), false, `--driver "ebs"`},
		{"unknown mounter", pool(func(c *volume.Command) { c.Mounter = "fuse" }), false, `--mounter "fuse"`},
		{"short lease", pool(func(c *volume.Command) { c.Lease = time.Second }), false, "--lease"},
		{"local without device", volume.Command{Config: volume.Config{Provider: volume.ProviderLocal, Name: "etcd-a"}, Timeout: time.Second}, false, "--device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s store.Store = st
			if tc.noStore {
				s = nil
			}
			err := tc.cmd.Attach(context.Background(), s, log)
			if !errors.Is(err, volume.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a configuration error naming %q", err, tc.want)
			}
		})
	}
}
