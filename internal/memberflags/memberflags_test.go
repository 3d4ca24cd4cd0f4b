package memberflags

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// A host whose member name comes from its volume never falls back to the
// hostname (the root file system's data) when the volume is not attached.
func TestNoIdentityWithAVolumeProvider(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		refused bool
	}{
		{[]string{"--volume-provider", "pool"}, true},
		{[]string{"--volume-provider", "local"}, true},
		{[]string{"--volume-provider", "pool", "--name", "etcd-a", "--ip", "10.0.0.1"}, false},
		{[]string{"--volume-provider", "none", "--ip", "10.0.0.1"}, false},
	} {
		var err error
		app := &cli.App{Flags: Flags(), Action: func(c *cli.Context) error { _, err = Config(c); return nil }}
		if rerr := app.Run(append([]string{"x", "--etcd-user="}, tc.args...)); rerr != nil {
			t.Fatal(rerr)
		}
		if refused := err != nil && strings.Contains(err.Error(), "identity.env is missing"); refused != tc.refused {
			t.Errorf("%v: err %v, want refused=%v", tc.args, err, tc.refused)
		}
	}
}
