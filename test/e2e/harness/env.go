//go:build linux

package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/test/testenv"
	"time"
)

const (
	// cmdTimeout bounds each helper command (ip, mount, preset-all).
	cmdTimeout = 30 * time.Second
	// fixComponents is what to run when something the hosts are built
	// from is missing.
	fixComponents = "run `make components` as root (or only the e2e part: `bash images/components/install.sh e2e`)"
)

// rootfsDir is the cached host root filesystem images/hostroot/build.sh
// made of variant, checked to exist and, when the test runs inside the
// repository, to be built by the current recipe.
func rootfsDir(t testing.TB, variant string) string {
	t.Helper()
	base := filepath.Join(testenv.CacheDir(), "hostroot", variant)
	root := filepath.Join(base, "rootfs")
	if _, err := os.Stat(filepath.Join(root, "lib", "systemd", "systemd")); err != nil {
		t.Fatalf("harness: the test host rootfs %s is missing (%v): %s", root, err, fixComponents)
	}
	stamp, err := os.ReadFile(filepath.Join(base, "stamp"))
	if err != nil {
		t.Fatalf("harness: the test host rootfs has no stamp (%v): %s", err, fixComponents)
	}
	if script, ok := repoFile("images/hostroot/build.sh"); ok {
		sum := sha256.Sum256(script)
		if strings.TrimSpace(string(stamp)) != hex.EncodeToString(sum[:]) {
			t.Fatalf("harness: the test host rootfs %s was built by an older images/hostroot/build.sh: %s", root, fixComponents)
		}
	}
	return root
}

// repoFile reads a file of this repository, found by walking up from the
// working directory (a test's package directory) to the go.mod.
func repoFile(rel string) ([]byte, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, false
	}
	for range 32 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
			return b, err == nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return nil, false
}

// ignitionApply is the cached ignition-apply binary.
func ignitionApply(t testing.TB) string {
	t.Helper()
	p := filepath.Join(testenv.CacheDir(), "bin", "ignition-apply")
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("harness: %s is missing: %s", p, fixComponents)
	}
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("harness: %s is not an executable (%v): %s", p, err, fixComponents)
	}
	return p
}

// requireHost checks what the harness needs of the machine itself.
func requireHost(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("harness: e2e hosts need root (network namespaces, mounts, cgroups): run the e2e tests as root, e.g. `sudo -E go test ./test/e2e/...`")
	}
	tools := []struct{ bin, fix string }{
		{"ip", "apt-get install iproute2"},
		{"nsenter", "apt-get install util-linux"},
		{"systemd-nspawn", "apt-get install systemd-container, or " + fixComponents},
		{"systemctl", "apt-get install systemd"},
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool.bin); err != nil {
			t.Fatalf("harness: %s is not installed: %s", tool.bin, tool.fix)
		}
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		t.Fatalf("harness: no network namespaces here (%v)", err)
	}
}

// run runs a helper command to completion, bounded by cmdTimeout, and
// returns its combined output in the error when it fails.
func run(name string, args ...string) error {
	_, err := output(nil, name, args...)
	return err
}

// output is run with extra environment, returning combined output.
func output(env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}, env...)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}
