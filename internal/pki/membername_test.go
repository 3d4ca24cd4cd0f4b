package pki_test

import (
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/dns"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/volume"
)

// Member join, the DNS registrar and volume attach accept and refuse the
// same member names: a name one of them takes must not stop another at
// boot. Volume names are also ext4 labels, so at most 16 characters.
func TestMemberNameEverywhere(t *testing.T) {
	checks := map[string]func(string) error{
		"pki":    pki.CheckMemberName,
		"member": func(n string) error { return member.Config{Name: n}.Validate() },
		"dns":    dns.CheckName,
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"etcd-a", true},
		{"a", true},
		{"master-0", true},
		{"0etcd9", true},
		{strings.Repeat("a", 63), true},
		{"Etcd_A", false},
		{"etcd_a", false},
		{"Etcd-A", false},
		{"etcd.a", false},
		{"-etcd", false},
		{"etcd-", false},
		{"etcd a", false},
		{"etcd=a", false},
		{"etcd,a", false},
		{"etcd/a", false},
		{"", false},
		{strings.Repeat("a", 64), false},
	} {
		for who, check := range checks {
			if err := check(tc.name); (err == nil) != tc.ok {
				t.Errorf("%s: %q: %v, want ok=%v", who, tc.name, err, tc.ok)
			} else if err != nil && tc.name != "" && !strings.Contains(err.Error(), "DNS label") {
				t.Errorf("%s: %q: %v, want the rule stated", who, tc.name, err)
			}
		}
		volOK := tc.ok && len(tc.name) <= 16
		if err := volume.CheckName(tc.name); (err == nil) != volOK {
			t.Errorf("volume: %q: %v, want ok=%v", tc.name, err, volOK)
		}
	}
}
