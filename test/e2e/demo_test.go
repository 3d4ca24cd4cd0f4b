//go:build linux && demo

package e2e

import (
	"os"
	"testing"
)

// TestDemo is `make demo`: bootDemo's cluster, serving test/demo/cluster.sh's
// requests until `make demo-down`. Built only with -tags demo.
func TestDemo(t *testing.T) {
	dir := os.Getenv("ETCDADM_DEMO_DIR")
	if dir == "" {
		t.Fatal("ETCDADM_DEMO_DIR is not set: run make demo")
	}
	bootDemo(t, dir).serve(t)
}
