package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestDemoLocal runs the README's 'make demo-local' script: it must end
// with "demo OK" and exit 0 (it used to print "demo OK" and exit 143 from
// its own cleanup, so make reported an error).
func TestDemoLocal(t *testing.T) {
	binary(t, "etcdadm") // builds every binary into the shared bin dir
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../demo/local.sh")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "ETCDADM_CACHE=" + testenv.CacheDir(),
		"ETCDADM_BIN=" + filepath.Dir(binary(t, "etcdadm")), "DEMO_DIR=" + t.TempDir(),
		"DEMO_CLIENT_PORT=" + strconv.Itoa(testenv.FreePort(t)), "DEMO_PEER_PORT=" + strconv.Itoa(testenv.FreePort(t))}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "demo OK") {
		t.Fatalf("demo-local: %v\n%s", err, out)
	}
}
