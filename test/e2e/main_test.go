//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// TestMain doubles as a helper run inside the test network's switch
// namespace (the test process itself cannot reach it): E2E_HELPER=mkbucket
// creates the store's bucket once MinIO answers.
func TestMain(m *testing.M) {
	helpers := map[string]func() error{
		"mkbucket": func() error { return mkbucket(os.Getenv("E2E_ENDPOINT"), os.Getenv("E2E_BUCKET")) },
		"load":     runLoadHelper,
		"soak":     runSoakHelper,
		"kube":     runKubeHelper,
		"files":    runFilesHelper,
	}
	if name := os.Getenv("E2E_HELPER"); name != "" {
		run, ok := helpers[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "E2E_HELPER=%s: no such helper\n", name)
			os.Exit(2)
		}
		if err := run(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	for _, dir := range built {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

func mkbucket(endpoint, bucket string) error {
	mc, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), "")})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
		cancel()
		if err == nil || minio.ToErrorResponse(err).Code == "BucketAlreadyOwnedByYou" {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var (
	buildMu sync.Mutex
	built   = map[string]string{} // build tags -> directory of binaries
)

// binaries builds the project's commands once (linux/amd64, static), for
// binding into the hosts at /opt/etcdadm/bin.
func binaries(t testing.TB) string { return buildCommands(t, "") }

// buildCommands builds the commands with the given build tags (e.g.
// crashpoints, for the crash-point sweep), once per set of tags.
func buildCommands(t testing.TB, tags string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if dir, ok := built[tags]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "etcdadm-e2e-bin-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "build", "-trimpath", "-tags", tags, "-o", dir+"/", "./cmd/...")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("go build -tags %q ./cmd/...: %v\n%s", tags, err, strings.TrimSpace(stderr.String()))
	}
	built[tags] = dir
	return dir
}
