package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

func TestEtcdClusterTLS(t *testing.T) {
	pki := testenv.NewPKI(t)
	members := testenv.StartEtcdCluster(t, "3.6.16", 1, pki)
	cli := members[0].Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/testenv/k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	resp, err := cli.Get(ctx, "/testenv/k")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get /testenv/k = %v, want one key with value v", resp.Kvs)
	}
	members[0].Stop()
	if members[0].Running() {
		t.Fatalf("member still running after Stop")
	}
}

func TestS3Servers(t *testing.T) {
	for _, s := range testenv.S3Servers(t) {
		t.Run(s.Kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			ok, err := s.Client(t).BucketExists(ctx, s.Bucket)
			if err != nil || !ok {
				t.Fatalf("bucket %s exists = %v, %v; want true", s.Bucket, ok, err)
			}
		})
	}
}
