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
	if os.Getenv("E2E_HELPER") == "mkbucket" {
		if err := mkbucket(os.Getenv("E2E_ENDPOINT"), os.Getenv("E2E_BUCKET")); err != nil {
			fmt.Fprintln(os.Stderr, "mkbucket:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("E2E_HELPER") == "load" {
		if err := runLoadHelper(); err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
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
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds the project's commands once (linux/amd64, static), for
// binding into the hosts at /opt/etcdadm/bin.
func binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "etcdadm-e2e-bin-"); buildErr != nil {
			return
		}
		os.Chmod(binDir, 0o755)
		_, file, _, _ := runtime.Caller(0)
		cmd := exec.Command("go", "build", "-trimpath", "-o", binDir+"/", "./cmd/...")
		cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/...: %w\n%s", err, strings.TrimSpace(stderr.String()))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}
