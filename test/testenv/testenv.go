// Package testenv starts the real components integration tests run against:
// etcd clusters (every supported version, mutual TLS) and S3 servers (MinIO,
// versitygw), all on loopback ports with data in t.TempDir(). Everything a
// helper starts is stopped by t.Cleanup. Only _test.go files may import it.
//
// The binaries come from the component cache that `make components`
// (images/components/install.sh) fills; a missing binary fails the test
// with a message saying so rather than skipping it.
package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// CacheDir is where install.sh puts the component binaries:
// $ETCDADM_CACHE, else $XDG_CACHE_HOME/etcdadm, else ~/.cache/etcdadm.
func CacheDir() string {
	if d := os.Getenv("ETCDADM_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "etcdadm")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "etcdadm")
	}
	return filepath.Join(home, ".cache", "etcdadm")
}

// EtcdVersions are the etcd releases install.sh builds, oldest first.
func EtcdVersions() []string {
	return []string{"3.5.35", "3.6.16", "3.7.3"}
}

// PreviousPatch is the patch before EtcdVersions' 3.6 (make components
// builds it): the version the sysupdate scenario updates from.
func PreviousPatch() string { return "3.6.15" }

// EtcdBin is the path of tool (etcd, etcdctl or etcdutl) of an etcd version.
func EtcdBin(t testing.TB, version, tool string) string {
	t.Helper()
	switch tool {
	case "etcd", "etcdctl", "etcdutl":
	default:
		t.Fatalf("testenv: unknown etcd tool %q (want etcd, etcdctl or etcdutl)", tool)
	}
	return requireBin(t, filepath.Join(CacheDir(), "etcd", "v"+strings.TrimPrefix(version, "v"), tool))
}

func requireBin(t testing.TB, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("testenv: component binary %s is missing: run `make components` to build it", path)
	}
	if err != nil {
		t.Fatalf("testenv: component binary %s: %v (run `make components`)", path, err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("testenv: component binary %s is not an executable file: run `make components`", path)
	}
	return path
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	// Below the kernel's ephemeral range (32768-60999 here): a port from
	// ":0" is free now but may be handed to some outgoing connection
	// before the server under test binds it, which made a founding etcd
	// fail now and then under load. Ports are handed out in turn from a
	// random start, so one test process never gets the same port twice.
	for range 200 {
		port := portLow + int(nextPort.Add(1)%portSpan)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatalf("testenv: no free port in %d-%d after 200 tries", portLow, portLow+portSpan)
	return 0
}

const portLow, portSpan = 15000, 17000

// nextPort is the one piece of package state: the test process' cursor
// through the port range (see FreePort).
var nextPort = func() *atomic.Int64 {
	var n atomic.Int64
	n.Store(rand.Int64N(portSpan))
	return &n
}()

// waitFor polls cond every interval until it returns nil, the process
// behind exited (when not nil) or timeout passes; it returns the last
// error from cond, or why it stopped.
func waitFor(timeout, interval time.Duration, exited <-chan struct{}, cond func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", timeout, err)
		}
		select {
		case <-exited:
			return fmt.Errorf("process exited: %w", err)
		case <-tick.C:
		}
	}
}
