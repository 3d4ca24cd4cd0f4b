package volumeflags

import (
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/volume"
)

// The flag rules are volume's.
func TestChecks(t *testing.T) {
	if err := CheckProvider("ebs"); err == nil || !strings.Contains(err.Error(), "want none, local or pool") {
		t.Errorf("ebs: %v", err)
	}
	for _, p := range []string{volume.ProviderNone, volume.ProviderLocal, volume.ProviderPool} {
		if err := CheckProvider(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if err := CheckLease(5 * time.Second); err == nil {
		t.Error("a 5s lease passes")
	}
	if err := CheckLease(volume.DefaultLease); err != nil {
		t.Error(err)
	}
	if err := CheckSize("lots"); err == nil {
		t.Error("size lots passes")
	}
	var _ cli.Flag = Flags()[0]
}
