package dns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
)

// The provider the flags ask for, or an error naming the flag.
func TestProviderConfigNew(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "tsig")
	os.WriteFile(key, []byte("hmac-sha256:k:c2VjcmV0\n"), 0o600)
	for _, tc := range []struct {
		pc       ProviderConfig
		provider string // Name() of the provider, or the error text
	}{
		{ProviderConfig{Kind: ProviderHosts, Root: dir}, "hosts " + filepath.Join(dir, "etc", "hosts")},
		{ProviderConfig{Kind: ProviderRFC2136, Server: "ns:53", TSIGFile: key}, "rfc2136 ns:53 zone c.test."},
		{ProviderConfig{Kind: ProviderRFC2136, Server: "ns:53", TSIGFile: key, Zone: "zone.test"}, "rfc2136 ns:53 zone zone.test."},
		{ProviderConfig{Kind: ProviderRFC2136, TSIGFile: key}, "needs --rfc2136-server"},
		{ProviderConfig{Kind: ProviderRFC2136, Server: "ns", TSIGFile: key}, "want host:port"},
		{ProviderConfig{Kind: "bind"}, `--provider "bind"`},
	} {
		p, err := tc.pc.New("c.test")
		switch {
		case err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.provider)):
			t.Errorf("%+v: %v, want ErrInvalid saying %q", tc.pc, err, tc.provider)
		case err == nil && p.Name() != tc.provider:
			t.Errorf("%+v: provider %q, want %q", tc.pc, p.Name(), tc.provider)
		}
	}
}

// Without --dns-suffix the registrar uses the cluster's settings.
func TestDefaultsSuffixFromStore(t *testing.T) {
	st := fileStore(t)
	ctx := context.Background()
	cfg := Config{Name: "etcd-a"}
	if err := cfg.Defaults(ctx, st); err == nil || !strings.Contains(err.Error(), "--dns-suffix not set") {
		t.Errorf("unseeded store: %v, want --dns-suffix named", err)
	}
	c := clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}, Settings: clusterspec.Settings{DNSSuffix: "c.test"}}
	if err := c.Defaults(); err != nil {
		t.Fatal(err)
	}
	if err := clusterspec.Seed(ctx, st, c, false); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Defaults(ctx, st); err != nil || cfg.Suffix != "c.test" {
		t.Errorf("got suffix %q, %v; want c.test from the settings", cfg.Suffix, err)
	}
}

// What the registrar publishes: --address as given, else the first --ip
// (ETCDADM_IPS, the addresses member join uses).
func TestAddresses(t *testing.T) {
	for _, tc := range []struct {
		address string
		ips     []string
		want    string // addresses, or the error text
	}{
		{"10.1.2.3, 2001:db8::1", nil, "[10.1.2.3 2001:db8::1]"},
		{"10.1.2.3", []string{"10.9.9.9"}, "[10.1.2.3]"},
		{"", []string{"2001:db8::12", "10.0.0.12"}, "[2001:db8::12]"},
		{"", []string{"::ffff:10.0.0.12"}, "[10.0.0.12]"},
		{"10.1.2", nil, "--address"},
		{"", []string{"host-a"}, `--ip "host-a"`},
	} {
		got, err := Addresses(tc.address, tc.ips)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q %q: %v, want an error naming %s", tc.address, tc.ips, err, tc.want)
			}
			continue
		}
		if s := fmt.Sprint(got); s != tc.want {
			t.Errorf("%q %q: %s, want %s", tc.address, tc.ips, s, tc.want)
		}
	}
}
