package safehttp

import (
	"net/netip"
	"testing"
)

// TestForbiddenSpecialPurposeRanges walks IANA's IPv4 and IPv6
// special-purpose registries: for every range that is not globally reachable,
// its first and last address are refused, and an address just outside it
// that is global unicast is allowed. Ranges that embed an IPv4 address are
// judged by it.
func TestForbiddenSpecialPurposeRanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		first, last   string
		outside       string // a global unicast neighbour, "" when there is none worth naming
		wantForbidden bool
	}{
		// IPv4.
		{"0.0.0.0/8 this network", "0.0.0.0", "0.255.255.255", "1.0.0.1", true},
		{"10.0.0.0/8 private", "10.0.0.0", "10.255.255.255", "11.0.0.1", true},
		{"100.64.0.0/10 shared (CGNAT)", "100.64.0.0", "100.127.255.255", "100.128.0.1", true},
		{"127.0.0.0/8 loopback", "127.0.0.0", "127.255.255.255", "128.0.0.1", true},
		{"169.254.0.0/16 link-local", "169.254.0.0", "169.254.255.255", "169.255.0.1", true},
		{"172.16.0.0/12 private", "172.16.0.0", "172.31.255.255", "172.32.0.1", true},
		{"192.0.0.0/24 IETF protocol assignments", "192.0.0.0", "192.0.0.255", "192.0.1.1", true},
		{"192.0.2.0/24 TEST-NET-1", "192.0.2.0", "192.0.2.255", "192.0.3.1", true},
		{"192.88.99.0/24 6to4 relay anycast", "192.88.99.0", "192.88.99.255", "192.88.100.1", true},
		{"192.168.0.0/16 private", "192.168.0.0", "192.168.255.255", "192.169.0.1", true},
		{"198.18.0.0/15 benchmarking", "198.18.0.0", "198.19.255.255", "198.20.0.1", true},
		{"198.51.100.0/24 TEST-NET-2", "198.51.100.0", "198.51.100.255", "198.51.101.1", true},
		{"203.0.113.0/24 TEST-NET-3", "203.0.113.0", "203.0.113.255", "203.0.114.1", true},
		{"224.0.0.0/4 multicast", "224.0.0.0", "239.255.255.255", "223.255.255.254", true},
		{"240.0.0.0/4 reserved and broadcast", "240.0.0.0", "255.255.255.255", "", true},
		{"192.31.196.0/24 AS112 (globally reachable)", "192.31.196.0", "192.31.196.255", "", false},
		{"192.175.48.0/24 AS112 (globally reachable)", "192.175.48.0", "192.175.48.255", "", false},

		// IPv6.
		{"::/128 unspecified", "::", "::", "", true},
		{"::1/128 loopback", "::1", "::1", "", true},
		{"::/96 IPv4-compatible", "::2", "::ffff:ffff", "", true},
		{"::ffff:0:0/96 IPv4-mapped, of private and loopback", "::ffff:10.0.0.0", "::ffff:127.255.255.255", "::ffff:8.8.8.8", true},
		{"::ffff:0:0/96 IPv4-mapped, of the reserved 240/4", "::ffff:240.0.0.0", "::ffff:255.255.255.255", "::ffff:1.1.1.1", true},
		{"::ffff:0:0:0/96 SIIT", "::ffff:0:0:0", "::ffff:0:ffff:ffff", "", true},
		{"64:ff9b::/96 NAT64 of private", "64:ff9b::10.0.0.0", "64:ff9b::10.255.255.255", "64:ff9b::8.8.8.8", true},
		{"64:ff9b::/96 NAT64 of loopback, CGNAT, link-local", "64:ff9b::127.0.0.1", "64:ff9b::169.254.169.254", "64:ff9b::1.1.1.1", true},
		{"64:ff9b::/96 NAT64 of CGNAT", "64:ff9b::100.64.0.0", "64:ff9b::100.127.255.255", "64:ff9b::100.128.0.1", true},
		{"64:ff9b:1::/48 local-use NAT64", "64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "", true},
		{"100::/64 discard-only", "100::", "100::ffff:ffff:ffff:ffff", "", true},
		{"2001::/32 Teredo", "2001::", "2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "2001:200::1", true},
		{"2001::/23 IETF protocol assignments", "2001:2::", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:200::1", true},
		{"2001:db8::/32 documentation", "2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::1", true},
		{"2002::/16 6to4 of private", "2002:a00::", "2002:aff:ffff:ffff:ffff:ffff:ffff:ffff", "2002:808:808::1", true},
		{"2002::/16 6to4 of loopback", "2002:7f00::", "2002:7fff:ffff::1", "2002:101:101::1", true},
		{"2002::/16 6to4 of the reserved 240/4", "2002:f000::", "2002:ffff:ffff::1", "", true},
		{"3fff::/20 documentation", "3fff::", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "3ffe:ffff::1", true},
		{"5f00::/16 SRv6 SIDs", "5f00::", "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", true},
		{"fc00::/7 unique local", "fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", true},
		{"fe80::/10 link-local", "fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", true},
		{"fec0::/10 site-local", "fec0::", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", true},
		{"ff00::/8 multicast", "ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", true},
		{"outside 2000::/3, unassigned", "4000::", "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2606:4700:4700::1111", true},
		{"2620:4f:8000::/48 AS112 (globally reachable)", "2620:4f:8000::", "2620:4f:8000:ffff:ffff:ffff:ffff:ffff", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range []string{tt.first, tt.last} {
				err := Forbidden(netip.MustParseAddr(s))
				if tt.wantForbidden && err == nil {
					t.Errorf("Forbidden(%s) = nil, want a refusal", s)
				}
				if !tt.wantForbidden && err != nil {
					t.Errorf("Forbidden(%s) = %v, want nil (globally reachable)", s, err)
				}
			}
			if tt.outside != "" {
				if err := Forbidden(netip.MustParseAddr(tt.outside)); err != nil {
					t.Errorf("Forbidden(%s) = %v, want nil: it is outside the range", tt.outside, err)
				}
			}
		})
	}
}
