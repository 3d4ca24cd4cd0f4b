// Package storeurl opens a store.Store from the URL operators write in
// their configuration: file:///path or s3://bucket/prefix?endpoint=...
// Commands call it once in main and pass the store down.
package storeurl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/internal/store/s3store"
)

// Help describes the accepted URLs, for --help texts.
const Help = `file:///path (a local or NFS directory), or
s3://BUCKET[/PREFIX][?endpoint=https://host:port&region=R&path-style=true&ca-file=/path/ca.pem]
(AWS S3 when no endpoint is given). S3 credentials come from the environment
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or from a shared
credentials file (AWS_SHARED_CREDENTIALS_FILE, profile AWS_PROFILE), never
from the URL or a flag.`

// Open returns the store named by raw. getenv supplies credentials
// (os.Getenv in commands, a map in tests).
func Open(ctx context.Context, raw string, getenv func(string) string) (store.Store, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %w; expected %s", raw, err, Help)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("store URL %q: file URLs need three slashes (file:///path)", raw)
		}
		if u.RawQuery != "" {
			return nil, fmt.Errorf("store URL %q: file URLs take no parameters (?%s)", raw, u.RawQuery)
		}
		return filestore.New(u.Path)
	case "s3":
		return openS3(u, getenv)
	default:
		return nil, fmt.Errorf("store URL %q: unsupported scheme %q; expected %s", raw, u.Scheme, Help)
	}
}

func openS3(u *url.URL, getenv func(string) string) (store.Store, error) {
	if u.User != nil {
		return nil, fmt.Errorf("store URL: credentials do not belong in the URL; use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_SHARED_CREDENTIALS_FILE")
	}
	bucket := u.Host
	if bucket == "" {
		return nil, fmt.Errorf("store URL %s: no bucket; expected s3://BUCKET[/PREFIX]", u.Redacted())
	}
	if err := s3utils.CheckValidBucketName(bucket); err != nil {
		return nil, fmt.Errorf("store URL %s: bucket %q: %w", u.Redacted(), bucket, err)
	}
	q := u.Query()
	if err := checkParams(q); err != nil {
		return nil, fmt.Errorf("store URL %s: %w", u.Redacted(), err)
	}
	endpoint, secure := "s3.amazonaws.com", true
	if ep := q.Get("endpoint"); ep != "" {
		eu, err := url.Parse(ep)
		if err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") {
			return nil, fmt.Errorf("store URL: endpoint %q must look like https://host:port", ep)
		}
		endpoint, secure = eu.Host, eu.Scheme == "https"
	}
	lookup := minio.BucketLookupAuto
	if ps := q.Get("path-style"); ps != "" {
		v, err := strconv.ParseBool(ps)
		if err != nil {
			return nil, fmt.Errorf("store URL: path-style=%q is not true or false", ps)
		}
		if v {
			lookup = minio.BucketLookupPath
		} else {
			lookup = minio.BucketLookupDNS
		}
	} else if q.Get("endpoint") != "" {
		lookup = minio.BucketLookupPath // MinIO, versitygw, Ceph: path style unless told
	}
	creds, err := credsFrom(getenv)
	if err != nil {
		return nil, err
	}
	opts := &minio.Options{Creds: creds, Secure: secure, Region: q.Get("region"), BucketLookup: lookup}
	if ca := q.Get("ca-file"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("store URL: ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("store URL: ca-file %s holds no PEM certificate", ca)
		}
		tr, err := minio.DefaultTransport(secure)
		if err != nil {
			return nil, fmt.Errorf("store URL: %w", err)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		opts.Transport = http.RoundTripper(tr)
	}
	client, err := minio.New(endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("store URL %s: %w", u.Redacted(), err)
	}
	shown := *u
	return s3store.New(client, bucket, strings.TrimPrefix(u.Path, "/"), shown.String()), nil
}

// s3Params are the parameters an s3:// URL takes.
var s3Params = []string{"endpoint", "region", "path-style", "ca-file"}

// checkParams refuses a parameter Open would not read (a misspelt
// endpoint would otherwise send the store's requests to AWS) and a
// parameter given twice.
func checkParams(q url.Values) error {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(s3Params, k) {
			return fmt.Errorf("unknown parameter %q: s3:// URLs take %s", k, strings.Join(s3Params, ", "))
		}
		if len(q[k]) > 1 {
			return fmt.Errorf("parameter %q given %d times", k, len(q[k]))
		}
	}
	return nil
}

func credsFrom(getenv func(string) string) (*credentials.Credentials, error) {
	if id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"); id != "" || secret != "" {
		if id == "" || secret == "" {
			return nil, fmt.Errorf("S3 credentials: set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
		}
		return credentials.NewStaticV4(id, secret, getenv("AWS_SESSION_TOKEN")), nil
	}
	if f := getenv("AWS_SHARED_CREDENTIALS_FILE"); f != "" {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("S3 credentials: AWS_SHARED_CREDENTIALS_FILE: %w", err)
		}
		profile := getenv("AWS_PROFILE")
		if profile == "" {
			profile = "default"
		}
		return credentials.NewFileAWSCredentials(f, profile), nil
	}
	return nil, fmt.Errorf("S3 credentials: none found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_SHARED_CREDENTIALS_FILE (on a master the units load /etc/etcdadm/s3-credentials as a systemd credential, LoadCredential=aws:, and etcdadm run as root reads that file)")
}
