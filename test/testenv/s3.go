package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// s3ReadyTimeout bounds how long an S3 server may take to answer.
const s3ReadyTimeout = 30 * time.Second

// S3Server is one running S3 server with an empty bucket.
type S3Server struct {
	Kind      string // "minio" or "versitygw"
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
	Bucket    string
	// DataDir holds the server's objects; LogFile its output.
	DataDir, LogFile string
}

// S3Servers starts every S3 server the project is tested against.
func S3Servers(t testing.TB) []*S3Server {
	t.Helper()
	return []*S3Server{StartMinIO(t), StartVersityGW(t)}
}

// StartMinIO starts a single-drive MinIO server with bucket etcd-backups.
func StartMinIO(t testing.TB) *S3Server {
	t.Helper()
	bin := requireBin(t, filepath.Join(CacheDir(), "bin", "minio"))
	s, base := newS3Server(t, "minio")
	console := FreePort(t)
	env := []string{
		"HOME=" + base,
		"MINIO_ROOT_USER=" + s.AccessKey,
		"MINIO_ROOT_PASSWORD=" + s.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	}
	p := startProc(t, "minio", s.LogFile, env, bin, "server", "--quiet",
		"--address", s.host(),
		"--console-address", "127.0.0.1:"+strconv.Itoa(console),
		"--certs-dir", filepath.Join(base, "certs"),
		s.DataDir)
	s.ready(t, p)
	return s
}

// StartVersityGW starts versitygw over a posix directory with bucket
// etcd-backups.
func StartVersityGW(t testing.TB) *S3Server {
	t.Helper()
	bin := requireBin(t, filepath.Join(CacheDir(), "bin", "versitygw"))
	s, base := newS3Server(t, "versitygw")
	p := startProc(t, "versitygw", s.LogFile, []string{"HOME=" + base}, bin,
		"--access", s.AccessKey, "--secret", s.SecretKey,
		"--port", s.host(), "--quiet",
		"posix", s.DataDir)
	s.ready(t, p)
	return s
}

func newS3Server(t testing.TB, kind string) (*S3Server, string) {
	t.Helper()
	base := t.TempDir()
	dataDir := filepath.Join(base, "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatalf("testenv: %s: %v", kind, err)
	}
	return &S3Server{
		Kind:      kind,
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(FreePort(t)),
		AccessKey: "testenv-access",
		SecretKey: "testenv-secret-" + kind,
		Bucket:    "etcd-backups",
		DataDir:   dataDir,
		LogFile:   filepath.Join(base, kind+".log"),
	}, base
}

// ready waits until the server answers authenticated requests, then
// creates the bucket.
func (s *S3Server) ready(t testing.TB, p *proc) {
	t.Helper()
	cli, err := s.newClient(1) // the poll retries, not each request
	if err != nil {
		t.Fatalf("testenv: %s client: %v", s.Kind, err)
	}
	err = waitFor(s3ReadyTimeout, 100*time.Millisecond, p.exited, func() error {
		conn, err := net.DialTimeout("tcp", s.host(), time.Second)
		if err != nil {
			return err
		}
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = cli.ListBuckets(ctx)
		return err
	})
	if err != nil {
		t.Fatalf("testenv: %s at %s (log %s): %v", s.Kind, s.Endpoint, s.LogFile, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cli.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("testenv: %s: create bucket %s: %v", s.Kind, s.Bucket, err)
	}
}

func (s *S3Server) host() string { return strings.TrimPrefix(s.Endpoint, "http://") }

func (s *S3Server) newClient(maxRetries int) (*minio.Client, error) {
	return minio.New(s.host(), &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   maxRetries,
	})
}

// Client is a minio-go client with the server's root credentials, for
// checks the store interface does not offer (incomplete uploads, say).
func (s *S3Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	cli, err := s.newClient(0)
	if err != nil {
		t.Fatalf("testenv: %s client: %v", s.Kind, err)
	}
	return cli
}

// URL is the store URL of prefix ("" or a path such as "run1/") in the
// server's bucket.
func (s *S3Server) URL(prefix string) string {
	u := "s3://" + s.Bucket
	if prefix != "" {
		u += "/" + strings.TrimPrefix(prefix, "/")
	}
	return u + "?endpoint=" + s.Endpoint + "&region=us-east-1"
}

// Env is a getenv for storeurl.Open that holds the server's credentials.
func (s *S3Server) Env() func(string) string { return s.EnvWithSecret(s.SecretKey) }

// EnvWithSecret is Env with another secret key, for tests of wrong
// credentials.
func (s *S3Server) EnvWithSecret(secret string) func(string) string {
	return func(key string) string {
		switch key {
		case "AWS_ACCESS_KEY_ID":
			return s.AccessKey
		case "AWS_SECRET_ACCESS_KEY":
			return secret
		}
		return ""
	}
}

func (s *S3Server) String() string { return fmt.Sprintf("%s at %s", s.Kind, s.Endpoint) }
