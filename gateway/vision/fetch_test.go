package vision

import (
	"net/netip"
	"testing"
)

func TestURLGuardAddresses(t *testing.T) {
	t.Parallel()
	g := newURLGuard(nil)
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1", false}, {"127.8.9.1", false}, {"::1", false},
		{"10.1.2.3", false}, {"172.16.0.1", false}, {"172.31.255.255", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"fd00:ec2::254", false}, {"fe80::1", false},
		{"100.64.0.1", false}, {"100.127.255.254", false},
		{"224.0.0.1", false}, {"ff02::1", false}, {"0.0.0.0", false}, {"::", false}, {"255.255.255.255", false},
		{"::ffff:127.0.0.1", false}, {"::ffff:10.0.0.1", false},
		{"8.8.8.8", true}, {"172.32.0.1", true}, {"100.128.0.1", true}, {"2606:4700::1111", true},
	} {
		if got := g.allowedAddr(netip.MustParseAddr(c.addr)); got != c.ok {
			t.Errorf("%s allowed=%v, want %v", c.addr, got, c.ok)
		}
	}
	a := newURLGuard([]string{"10.0.0.0/8", "127.0.0.1", "images.internal"})
	if !a.allowedAddr(netip.MustParseAddr("10.9.9.9")) || !a.allowedAddr(netip.MustParseAddr("127.0.0.1")) || a.allowedAddr(netip.MustParseAddr("127.0.0.2")) {
		t.Error("allowlist prefixes not applied")
	}
	if !a.hosts["images.internal"] {
		t.Error("allowlist host not kept")
	}
}
