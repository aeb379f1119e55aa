// Package safehttp builds the HTTP client that webhook and Slack deliveries go
// through, and turns a delivery's HTTP outcome into a classified channel error.
//
// The client refuses to connect to loopback, private, link-local, multicast,
// unspecified, shared (CGNAT) and other reserved addresses unless it was built
// with allowPrivate. The check runs on the address actually being connected to
// (net.Dialer.Control, after name resolution), so a hostname that resolves to a
// private address — including one that changes its answer between a static check
// and the connection (DNS rebinding) — is refused too. Redirects are never
// followed: a 3xx is returned to the caller as it is.
package safehttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// DefaultTimeout bounds one request (connect, TLS, headers and body) when New is
// given a zero or negative timeout.
const DefaultTimeout = 10 * time.Second

// ErrForbiddenAddress is matched (errors.Is) by every refusal to connect to an
// address the client is not allowed to reach. The refusal itself is an
// *AddressError, which names the address and the reason.
var ErrForbiddenAddress = errors.New("forbidden destination address")

// AddressError is the refusal to connect to Addr. Its message says which address
// and why: "destination 10.0.0.5 is a private address; set allow_private to allow it".
type AddressError struct {
	Addr netip.Addr
	// Reason is what the address is, with its article: "a private address".
	Reason string
}

func (e *AddressError) Error() string {
	return fmt.Sprintf("destination %s is %s; set allow_private to allow it", e.Addr, e.Reason)
}

// Unwrap makes errors.Is(err, ErrForbiddenAddress) true.
func (e *AddressError) Unwrap() error { return ErrForbiddenAddress }

// LookupFunc resolves host to its IP addresses. It has the shape of
// (*net.Resolver).LookupNetIP with the network fixed to "ip".
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// Option changes how New builds the client.
type Option func(*settings)

type settings struct {
	lookup    LookupFunc
	dialCheck func(netip.AddrPort) error
}

// WithLookup replaces the DNS resolver (net.DefaultResolver) with fn. Tests use
// it to make a hostname resolve to an address of their choosing; the resolved
// addresses are still checked when the connection is made. A nil fn keeps the
// default resolver.
func WithLookup(fn LookupFunc) Option {
	return func(s *settings) {
		if fn != nil {
			s.lookup = fn
		}
	}
}

// WithDialCheck adds fn to the checks made on every address just before
// connecting, after (never instead of) the private-address guard; an error from
// fn fails that connection attempt. Tests use it as a tripwire that refuses any
// address off the machine, so that even a broken guard cannot send a packet
// anywhere.
func WithDialCheck(fn func(netip.AddrPort) error) Option {
	return func(s *settings) { s.dialCheck = fn }
}

// New returns a client for outbound deliveries. A zero or negative timeout means
// DefaultTimeout. Unless allowPrivate is true, every connection to a forbidden
// address (see Forbidden) fails with an *AddressError before any packet is sent.
// The client never follows redirects (it returns the 3xx response) and ignores
// HTTP_PROXY and friends, because a proxy would connect on our behalf to
// addresses this client never sees.
func New(timeout time.Duration, allowPrivate bool, opts ...Option) *http.Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	s := settings{lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}}
	for _, o := range opts {
		o(&s)
	}
	d := &dialer{
		lookup: s.lookup,
		dialer: net.Dialer{
			Timeout:   timeout,
			KeepAlive: 30 * time.Second,
			Control:   control(allowPrivate, s.dialCheck),
		},
	}
	transport := &http.Transport{
		// No proxy, on purpose: see the doc comment.
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   10,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// control is the net.Dialer.Control callback. It runs after the socket is
// created and before connect(2), with the numeric address being connected to:
// this, not any earlier look at the URL, is what keeps the client off private
// networks, so it must stay on every dial path.
func control(allowPrivate bool, extra func(netip.AddrPort) error) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			// Fail closed: an address we cannot read is an address we cannot vet.
			return fmt.Errorf("%w: cannot parse %q", ErrForbiddenAddress, address)
		}
		if !allowPrivate {
			if err := Forbidden(ap.Addr()); err != nil {
				return err
			}
		}
		if extra != nil {
			return extra(ap)
		}
		return nil
	}
}

// dialer resolves names itself (so tests can inject answers) and dials the
// resolved addresses one by one; net.Dialer.Control vets each one.
type dialer struct {
	lookup LookupFunc
	dialer net.Dialer
}

// DialContext connects to addr ("host:port"), trying each resolved address in
// turn with a share of the remaining time, the way net.Dialer does.
func (d *dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		ips, err = d.lookup(ctx, host)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		if len(ips) == 0 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
		}
	}
	var firstErr error
	for i, ip := range ips {
		attemptCtx, cancel := partialDeadline(ctx, len(ips)-i)
		conn, err := d.dialer.DialContext(attemptCtx, network, net.JoinHostPort(ip.String(), port))
		cancel()
		if err == nil {
			return conn, nil
		}
		// Report the refusal in preference to a later connection error: it is
		// the reason an operator needs to see.
		if firstErr == nil || (errors.Is(err, ErrForbiddenAddress) && !errors.Is(firstErr, ErrForbiddenAddress)) {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// partialDeadline gives one of n remaining addresses its share of the time left,
// but at least 2 seconds (or whatever is left, if less).
func partialDeadline(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || n <= 1 {
		return context.WithCancel(ctx)
	}
	left := time.Until(deadline)
	share := left / time.Duration(n)
	const minShare = 2 * time.Second
	if share < minShare {
		share = min(minShare, left)
	}
	return context.WithTimeout(ctx, share)
}

// special is a special-purpose range of IANA's IPv4 and IPv6 Special-Purpose
// Address Registries (RFC 6890 and its updates) that is not globally
// reachable, or that only exists inside an operator's own network, with what
// the refusal calls it.
type special struct {
	prefix netip.Prefix
	reason string
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// special4 are the IPv4 ranges refused besides the ones netip classifies
// (loopback, RFC 1918, link-local, multicast, unspecified). The registry's
// globally reachable entries (AS112 192.31.196.0/24 and 192.175.48.0/24, AMT
// 192.52.193.0/24) stay allowed.
var special4 = []special{
	{mustPrefix("0.0.0.0/8"), "a reserved address"},            // RFC 791 "this network"
	{mustPrefix("100.64.0.0/10"), "a shared (CGNAT) address"},  // RFC 6598
	{mustPrefix("192.0.0.0/24"), "a reserved address"},         // RFC 6890 IETF protocol assignments
	{mustPrefix("192.0.2.0/24"), "a documentation address"},    // RFC 5737 TEST-NET-1
	{mustPrefix("192.88.99.0/24"), "a reserved address"},       // RFC 7526 deprecated 6to4 relay anycast
	{mustPrefix("198.18.0.0/15"), "a reserved address"},        // RFC 2544 benchmarking
	{mustPrefix("198.51.100.0/24"), "a documentation address"}, // RFC 5737 TEST-NET-2
	{mustPrefix("203.0.113.0/24"), "a documentation address"},  // RFC 5737 TEST-NET-3
	{mustPrefix("240.0.0.0/4"), "a reserved address"},          // RFC 1112 reserved, and the broadcast address
}

// Ranges of IPv6 addresses that carry an IPv4 address.
var (
	mapped6  = mustPrefix("::ffff:0:0/96") // RFC 4291 IPv4-mapped: the connection is IPv4
	nat64    = mustPrefix("64:ff9b::/96")  // RFC 6052 well-known NAT64 prefix: globally reachable, judged by its IPv4 address
	six2four = mustPrefix("2002::/16")     // RFC 3056 6to4: judged by its IPv4 address
	global6  = mustPrefix("2000::/3")      // IANA's global unicast space; everything else is refused
)

// special6 are the IPv6 ranges refused besides the ones netip classifies.
// Outside 2000::/3 nothing is global unicast; the names here only make the
// refusal say what the address is.
var special6 = []special{
	{mustPrefix("::/96"), "a reserved address"},                          // deprecated IPv4-compatible (RFC 4291)
	{mustPrefix("::ffff:0:0:0/96"), "an IPv4-translated (SIIT) address"}, // RFC 2765: a translator on the operator's network
	{mustPrefix("64:ff9b:1::/48"), "a reserved address"},                 // RFC 8215 local-use NAT64
	{mustPrefix("100::/64"), "a reserved address"},                       // RFC 6666 discard-only
	{mustPrefix("100:0:0:1::/64"), "a reserved address"},                 // RFC 9780 dummy prefix
	{mustPrefix("2001::/32"), "a Teredo address"},                        // RFC 4380: tunnels to an embedded client address
	{mustPrefix("2001::/23"), "a reserved address"},                      // RFC 2928 IETF protocol assignments (benchmarking, ORCHID, ...)
	{mustPrefix("2001:db8::/32"), "a documentation address"},             // RFC 3849
	{mustPrefix("3fff::/20"), "a documentation address"},                 // RFC 9637
	{mustPrefix("5f00::/16"), "a reserved address"},                      // RFC 9602 SRv6 SIDs
	{mustPrefix("fec0::/10"), "a reserved address"},                      // deprecated site-local (RFC 3879)
}

// Forbidden returns an *AddressError when a client built without allowPrivate
// must not connect to ip, and nil when it may: only global unicast addresses
// are allowed, as IANA's special-purpose registries define them. IPv4-mapped
// IPv6 addresses (::ffff:10.0.0.1) are judged as the IPv4 address they carry,
// and so are the IPv4 addresses embedded in well-known NAT64 (64:ff9b::/96)
// and 6to4 (2002::/16) addresses. An invalid (zero) Addr is refused.
func Forbidden(ip netip.Addr) error {
	if reason := classify(ip); reason != "" {
		return &AddressError{Addr: ip, Reason: reason}
	}
	return nil
}

// classify names what ip is when it is off limits, or returns "".
func classify(ip netip.Addr) string {
	if !ip.IsValid() {
		return "an invalid address"
	}
	ip = ip.WithZone("")
	if mapped6.Contains(ip) {
		ip = ip.Unmap()
	}
	if ip.Is6() {
		// Addresses that carry an IPv4 address the network may route to.
		switch {
		case nat64.Contains(ip):
			b := ip.As16()
			return classify(netip.AddrFrom4([4]byte(b[12:16])))
		case six2four.Contains(ip):
			b := ip.As16()
			return classify(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	switch {
	case ip.IsUnspecified():
		return "an unspecified address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsPrivate():
		return "a private address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "a multicast address"
	}
	ranges := special4
	if ip.Is6() {
		ranges = special6
	}
	// The most specific range names the address (2001::/32 before 2001::/23).
	for _, r := range ranges {
		if r.prefix.Contains(ip) {
			return r.reason
		}
	}
	if ip.Is6() && !global6.Contains(ip) {
		return "a reserved address"
	}
	return ""
}

// CheckURL validates a destination URL statically, as config and profile
// validation do: it must parse, use http or https, and name a host. It does not
// resolve the host; the client checks the address it connects to.
func CheckURL(raw string) error {
	if raw == "" {
		return errors.New("url is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the URL; the caller already knows which one it passed.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("invalid url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		if u.Scheme == "" {
			return errors.New("url has no scheme; use http:// or https://")
		}
		return fmt.Errorf("url scheme %q is not supported; use http or https", u.Scheme)
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return errors.New("url has no host")
	}
	return nil
}

// CheckHostName validates host, a URL's Hostname(), as the name of a public
// service a URL given by a user (a push endpoint) may point at, without
// resolving it: it must be a DNS name of letters, digits, hyphens and dots
// (an internationalised name in its xn-- form), not "localhost" or under it,
// and not spell an address in any form. Browsers and the Go resolver read
// "127.1", "2130706433", "0x7f.0.0.1" and "0177.0.0.1" as IPv4 addresses
// (a name whose last label is a number is an address, WHATWG URL), so any
// such name is refused, as is every IP literal and a name ending with a dot
// ("localhost." resolves as "localhost" does). The client still checks the
// addresses the name resolves to when it connects.
func CheckHostName(host string) error {
	if host == "" {
		return errors.New("url has no host")
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return fmt.Errorf("host %q is an IP address: use the service's host name", host)
	}
	if strings.HasSuffix(host, ".") {
		return fmt.Errorf("host %q ends with a dot", host)
	}
	if len(host) > 253 {
		return errors.New("host name is longer than 253 bytes")
	}
	labels := strings.Split(strings.ToLower(host), ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("host %q is not a valid DNS name", host)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("host %q is not a valid DNS name (letters, digits, hyphens; xn-- for international names)", host)
			}
		}
	}
	if last := labels[len(labels)-1]; numericLabel(last) {
		return fmt.Errorf("host %q spells an IP address: use the service's host name", host)
	}
	if n := len(labels); labels[n-1] == "localhost" {
		return fmt.Errorf("host %q is loopback", host)
	}
	return nil
}

// numericLabel reports whether a host name's label is a number as inet_aton
// and the WHATWG URL parser read one: decimal, 0-prefixed octal or 0x hex.
func numericLabel(l string) bool {
	digits := l
	if strings.HasPrefix(l, "0x") {
		digits = l[2:]
		for _, c := range digits {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true // "0x" alone is zero too
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return digits != ""
}
