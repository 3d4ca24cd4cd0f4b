//go:build linux && demo

package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDemo is `make demo`: bootDemo's cluster, left running until `make
// demo-down` removes $ETCDADM_DEMO_DIR/running. Built only with -tags demo.
func TestDemo(t *testing.T) {
	dir := os.Getenv("ETCDADM_DEMO_DIR")
	if dir == "" {
		t.Fatal("ETCDADM_DEMO_DIR is not set: run make demo")
	}
	bootDemo(t, dir)
	running := filepath.Join(dir, "running")
	os.WriteFile(running, nil, 0o644)
	os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
	for deadline := time.Now().Add(24 * time.Hour); time.Now().Before(deadline); time.Sleep(time.Second) {
		if _, err := os.Stat(running); err != nil {
			return // make demo-down: the harness tears everything down
		}
	}
}
