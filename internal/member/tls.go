package member

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/etcdadm/etcdadm-immutable/internal/pki"
)

func (j *joiner) setupTLS(ctx context.Context) error {
	if j.cluster.Settings.TLS == "insecure" {
		j.log.Warn("TLS is OFF for this cluster (settings tls=insecure): peer and client traffic is plaintext and unauthenticated")
		return nil
	}
	ca, err := pki.LoadCA(ctx, j.d.Store)
	if err != nil {
		return err
	}
	if err := ca.IssueMember(ctx, j.cfg.PKIDir, j.certRequest(), j.cfg.Owner); err != nil {
		return fmt.Errorf("member join: certificates: %w", err)
	}
	return j.loadClientTLS()
}

// loadClientTLS builds the client TLS configuration from the certificate
// directory as it is now (a client keeps the CA bundle it was built with).
func (j *joiner) loadClientTLS() error {
	info := transport.TLSInfo{
		CertFile:      filepath.Join(j.cfg.PKIDir, "client.crt"),
		KeyFile:       filepath.Join(j.cfg.PKIDir, "client.key"),
		TrustedCAFile: filepath.Join(j.cfg.PKIDir, "ca.crt"),
	}
	cfg, err := info.ClientConfig()
	if err != nil {
		return fmt.Errorf("member join: client TLS: %w", err)
	}
	j.tls = cfg
	return nil
}

// certRequest names this member in its certificates: its name, its DNS
// names and its addresses.
func (j *joiner) certRequest() pki.MemberRequest {
	var dns []string
	if u, _ := url.Parse(j.me.PeerURL); u != nil && net.ParseIP(u.Hostname()) == nil {
		dns = append(dns, u.Hostname())
	}
	if sfx := j.cluster.Settings.DNSSuffix; sfx != "" {
		dns = append(dns, j.cfg.Name+"."+sfx)
	}
	ips := slices.Clone(j.cfg.IPs)
	if u, _ := url.Parse(j.me.PeerURL); u != nil {
		if ip := net.ParseIP(u.Hostname()); ip != nil {
			ips = append(ips, ip)
		}
	}
	return pki.MemberRequest{Name: j.cfg.Name, DNSNames: dns, IPs: ips, Validity: j.cfg.CertValidity}
}
