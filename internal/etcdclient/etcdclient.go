// Package etcdclient builds an etcd v3 client from the flags every binary
// shares: endpoints and, by default, mutual TLS.
package etcdclient

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Config says how to reach etcd.
type Config struct {
	Endpoints []string
	CACert    string
	Cert      string
	Key       string
	// Insecure allows plain http endpoints without client certificates.
	Insecure    bool
	DialTimeout time.Duration
}

// Validate checks the TLS settings before anything dials.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return fmt.Errorf("etcd: no endpoints (set --endpoints)")
	}
	for _, ep := range c.Endpoints {
		if strings.HasPrefix(ep, "http://") && !c.Insecure {
			return fmt.Errorf("etcd: endpoint %s is plaintext; use https with --cacert/--cert/--key, or pass --insecure to accept an unencrypted, unauthenticated connection", ep)
		}
	}
	if c.Insecure {
		return nil
	}
	if c.CACert == "" || c.Cert == "" || c.Key == "" {
		return fmt.Errorf("etcd: mutual TLS needs --cacert, --cert and --key (or --insecure for a plaintext test cluster)")
	}
	return nil
}

// New dials etcd. The caller closes the client.
func New(c Config) (*clientv3.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	if c.CACert != "" {
		info := transport.TLSInfo{CertFile: c.Cert, KeyFile: c.Key, TrustedCAFile: c.CACert}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("etcd: TLS files: %w", err)
		}
	}
	dt := c.DialTimeout
	if dt == 0 {
		dt = 5 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints,
		TLS:         tlsCfg,
		DialTimeout: dt,
		Logger:      zap.NewNop(),
		// Fixed 1 MiB flow-control windows: gRPC's dynamic window grows to
		// 16 MiB while etcd streams a snapshot faster than it is gzipped.
		DialOptions: []grpc.DialOption{grpc.WithInitialWindowSize(1 << 20), grpc.WithInitialConnWindowSize(1 << 20)},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: connect %s: %w", strings.Join(c.Endpoints, ","), err)
	}
	return cli, nil
}
