// Package etcdclient builds an etcd v3 client from the flags every binary
// shares: endpoints and, by default, mutual TLS.
package etcdclient

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
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
	// TLS, when set, is used instead of CACert, Cert and Key: a client
	// certificate made in memory (etcd-volume-attach's claimant check)
	// is never written to disk.
	TLS *tls.Config
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
	if c.Insecure || c.TLS != nil {
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
	tlsCfg := c.TLS
	if tlsCfg == nil && c.CACert != "" {
		info := transport.TLSInfo{CertFile: c.Cert, KeyFile: c.Key, TrustedCAFile: c.CACert}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("etcd: TLS files: %w (on a master member join writes them; elsewhere give --cacert, --cert and --key of a certificate from 'etcdadm pki issue-client')", err)
		}
		if cert, err := tls.LoadX509KeyPair(c.Cert, c.Key); err == nil && cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter) {
			return nil, fmt.Errorf("etcd: the client certificate %s expired at %s: on a master 'etcdadm pki renew'; elsewhere a new one from 'etcdadm pki issue-client'", c.Cert, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
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

// Explain adds what to do to an error whose cause is TLS: the client does
// not trust the server's CA, or a certificate is expired or refused.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return fmt.Errorf("%w: --cacert is not the CA that signed etcd's server certificate (on a master: /etc/etcd/pki/ca.crt; elsewhere the cluster's CA: etcdadm pki show)", err)
	case strings.Contains(msg, "expired certificate") || strings.Contains(msg, "certificate has expired"):
		return fmt.Errorf("%w: a certificate has expired: on a master 'etcdadm pki renew'; a client gets a new one with 'etcdadm pki issue-client'", err)
	case strings.Contains(msg, "bad certificate") || strings.Contains(msg, "unknown certificate authority"):
		return fmt.Errorf("%w: etcd refused the client certificate (--cert/--key): it must come from the cluster's CA ('etcdadm pki issue-client')", err)
	}
	return err
}

// Why explains an error of a call that found no connection in time: it
// dials the endpoints' TLS itself and adds what the handshake says (the
// etcd client only reports "context deadline exceeded").
func (c Config) Why(err error) error {
	if err == nil || c.Insecure || !strings.Contains(err.Error(), "deadline exceeded") && !strings.Contains(err.Error(), "Unavailable") {
		return Explain(err)
	}
	cfg, cerr := transport.TLSInfo{CertFile: c.Cert, KeyFile: c.Key, TrustedCAFile: c.CACert}.ClientConfig()
	if cerr != nil {
		return err
	}
	for _, ep := range c.Endpoints {
		u, perr := url.Parse(ep)
		if perr != nil || u.Host == "" {
			continue
		}
		conn, herr := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", u.Host, cfg)
		if herr == nil {
			// TLS 1.3: a refused client certificate shows on the first read.
			conn.SetReadDeadline(time.Now().Add(time.Second))
			_, herr = conn.Read(make([]byte, 1))
			conn.Close()
			if ne, ok := herr.(net.Error); ok && ne.Timeout() {
				continue // the handshake is fine
			}
		}
		if herr != nil && (strings.Contains(herr.Error(), "tls:") || strings.Contains(herr.Error(), "x509:")) {
			return fmt.Errorf("%w (%s: %w)", err, u.Host, Explain(herr))
		}
	}
	return err
}
