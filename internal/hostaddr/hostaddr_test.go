package hostaddr

import (
	"net"
	"slices"
	"testing"
)

// Certificates and the DNS registrar see the same order: global unicast
// only, IPv4 before IPv6, otherwise as listed.
func TestOrder(t *testing.T) {
	cidr := func(s string) net.Addr {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = ip
		return n
	}
	got := order([]net.Addr{
		cidr("127.0.0.1/8"), cidr("::1/128"), cidr("fe80::1/64"), cidr("2001:db8::5/64"),
		cidr("10.0.0.12/24"), cidr("169.254.1.1/16"), cidr("192.168.1.7/24"), &net.IPAddr{IP: net.ParseIP("10.9.9.9")},
	})
	var s []string
	for _, ip := range got {
		s = append(s, ip.String())
	}
	if want := []string{"10.0.0.12", "192.168.1.7", "2001:db8::5"}; !slices.Equal(s, want) {
		t.Errorf("got %v, want %v", s, want)
	}
}

func TestPrimaryGiven(t *testing.T) {
	a, err := Primary([]net.IP{net.ParseIP("10.0.0.12"), net.ParseIP("2001:db8::12")})
	if err != nil || a.String() != "10.0.0.12" {
		t.Errorf("got %v, %v; want the first given address 10.0.0.12", a, err)
	}
}
