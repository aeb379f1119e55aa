package safehttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
)

func TestForbidden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ip     string
		reason string // "" = allowed
	}{
		{"127.0.0.1", "a loopback address"},
		{"127.1.2.3", "a loopback address"},
		{"::1", "a loopback address"},
		{"::ffff:127.0.0.1", "a loopback address"},
		{"10.0.0.5", "a private address"},
		{"172.16.0.1", "a private address"},
		{"172.31.255.255", "a private address"},
		{"192.168.1.1", "a private address"},
		{"::ffff:10.0.0.1", "a private address"},
		{"::ffff:192.168.0.1", "a private address"},
		{"fc00::1", "a private address"},
		{"fd12:3456::1", "a private address"},
		{"169.254.169.254", "a link-local address"},
		{"fe80::1", "a link-local address"},
		{"fe80::1%eth0", "a link-local address"},
		{"::ffff:169.254.169.254", "a link-local address"},
		{"224.0.0.1", "a multicast address"},
		{"239.255.255.250", "a multicast address"},
		{"ff02::1", "a multicast address"},
		{"ff0e::1", "a multicast address"},
		{"0.0.0.0", "an unspecified address"},
		{"::", "an unspecified address"},
		{"100.64.0.1", "a shared (CGNAT) address"},
		{"100.127.255.254", "a shared (CGNAT) address"},
		{"0.1.2.3", "a reserved address"},
		{"255.255.255.255", "a reserved address"},
		{"240.0.0.1", "a reserved address"},
		{"198.18.0.1", "a reserved address"},
		{"192.0.0.192", "a reserved address"},
		{"::10.0.0.1", "a reserved address"},
		{"fec0::1", "a reserved address"},
		{"64:ff9b:1::1", "a reserved address"},
		{"64:ff9b::10.0.0.1", "a private address"},    // NAT64 of a private address
		{"64:ff9b::127.0.0.1", "a loopback address"},  // NAT64 of loopback
		{"2002:a00:1::1", "a private address"},        // 6to4 of 10.0.0.1
		{"2002:7f00:1::1", "a loopback address"},      // 6to4 of 127.0.0.1
		{"2002:a9fe:a9fe::1", "a link-local address"}, // 6to4 of 169.254.169.254
		// Public addresses: classified only, never connected to.
		{"8.8.8.8", ""},
		{"172.15.255.255", ""},
		{"172.32.0.1", ""},
		{"100.63.255.255", ""},
		{"100.128.0.1", ""},
		{"::ffff:8.8.8.8", ""},
		{"2606:4700:4700::1111", ""},
		{"64:ff9b::8.8.8.8", ""},
		{"2002:808:808::1", ""},
	}
	for _, tt := range tests {
		err := Forbidden(netip.MustParseAddr(tt.ip))
		if tt.reason == "" {
			if err != nil {
				t.Errorf("Forbidden(%s) = %v, want nil", tt.ip, err)
			}
			continue
		}
		var ae *AddressError
		if !errors.As(err, &ae) || !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("Forbidden(%s) = %v, want an *AddressError matching ErrForbiddenAddress", tt.ip, err)
			continue
		}
		if ae.Reason != tt.reason {
			t.Errorf("Forbidden(%s) reason = %q, want %q", tt.ip, ae.Reason, tt.reason)
		}
	}
	if err := Forbidden(netip.Addr{}); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("Forbidden(zero Addr) = %v, want refusal", err)
	}
}

func TestControl(t *testing.T) {
	t.Parallel()
	deny, allow := control(false, nil), control(true, nil)

	err := deny("tcp4", "10.0.0.5:80", nil)
	if want := "destination 10.0.0.5 is a private address; set allow_private to allow it"; err == nil || err.Error() != want {
		t.Errorf("control(10.0.0.5:80) = %v, want %q", err, want)
	}
	if err := deny("tcp6", "[::ffff:127.0.0.1]:443", nil); !errors.Is(err, ErrForbiddenAddress) || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("control(mapped loopback) = %v, want loopback refusal", err)
	}
	if err := deny("tcp6", "[fe80::1%lo]:80", nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("control(zoned link-local) = %v, want refusal", err)
	}
	if err := deny("tcp", "not-an-address", nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("control(unparseable) = %v, want refusal (fail closed)", err)
	}
	if err := deny("tcp4", "8.8.8.8:443", nil); err != nil {
		t.Errorf("control(8.8.8.8:443) = %v, want nil", err)
	}
	if err := allow("tcp4", "10.0.0.5:80", nil); err != nil {
		t.Errorf("allowPrivate control(10.0.0.5:80) = %v, want nil", err)
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw     string
		wantErr string // substring; "" = valid
	}{
		{"https://hooks.example.com/x?token=1", ""},
		{"http://127.0.0.1:8080/hook", ""}, // static check only: the dial decides
		{"http://[::1]:80/", ""},
		{"", "empty"},
		{"ftp://example.com/", `scheme "ftp"`},
		{"file:///etc/passwd", `scheme "file"`},
		{"example.com/hook", "no scheme"},
		{"https://", "no host"},
		{"https:example.com", "no host"},
		{"http://:8080/", "no host"},
		{"http://exa mple.com/", "invalid url"},
		{"http://example.com:port/", "invalid url"},
	}
	for _, tt := range tests {
		err := CheckURL(tt.raw)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("CheckURL(%q) = %v, want nil", tt.raw, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("CheckURL(%q) = %v, want error containing %q", tt.raw, err, tt.wantErr)
		}
	}
}

// receiver is an httptest server on 127.0.0.1 that counts the requests it got.
type receiver struct {
	*httptest.Server
	hits atomic.Int64
}

func newReceiver(t *testing.T, h http.HandlerFunc) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		if h != nil {
			h(w, req)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) port(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// loopbackOnly is a tripwire for every test client that is given a lookup: it
// refuses any address off this machine, so even a broken guard cannot make a
// test send a packet to 10.0.0.1 or anywhere else.
func loopbackOnly(ap netip.AddrPort) error {
	if ap.Addr().Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("test tripwire: refusing to connect to %s", ap)
}

// fakeLookup resolves names from a table and fails for any other name, so no
// test ever asks real DNS.
func fakeLookup(table map[string][]string) LookupFunc {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		ips, ok := table[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var out []netip.Addr
		for _, ip := range ips {
			out = append(out, netip.MustParseAddr(ip))
		}
		return out, nil
	}
}

func TestClientRefusesLoopbackUnlessAllowed(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, nil)

	_, err := New(2*time.Second, false).Get(rcv.URL)
	var ae *AddressError
	if !errors.As(err, &ae) || !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("Get(%s) error = %v, want an *AddressError", rcv.URL, err)
	}
	if !strings.Contains(err.Error(), "is a loopback address; set allow_private to allow it") {
		t.Errorf("error = %q, want it to say loopback and allow_private", err)
	}
	if n := rcv.hits.Load(); n != 0 {
		t.Errorf("receiver got %d requests, want 0", n)
	}

	resp, err := New(2*time.Second, true).Get(rcv.URL)
	if err != nil {
		t.Fatalf("allowPrivate Get: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || rcv.hits.Load() != 1 {
		t.Errorf("allowPrivate: status %d, hits %d; want 200 and 1", resp.StatusCode, rcv.hits.Load())
	}
}

func TestClientChecksResolvedAddress(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, nil)
	lookup := fakeLookup(map[string][]string{
		"evil.test":    {"127.0.0.1"},
		"private.test": {"10.0.0.1"},
		"multi.test":   {"10.0.0.1", "169.254.169.254"},
	})

	// A hostname that resolves to loopback is refused like the literal...
	evil := "http://evil.test:" + rcv.port(t) + "/hook"
	_, err := New(2*time.Second, false, WithLookup(lookup), WithDialCheck(loopbackOnly)).Get(evil)
	if !errors.Is(err, ErrForbiddenAddress) || !strings.Contains(err.Error(), "destination 127.0.0.1 is a loopback address") {
		t.Errorf("Get(evil.test→127.0.0.1) error = %v, want loopback refusal", err)
	}
	if n := rcv.hits.Load(); n != 0 {
		t.Errorf("receiver got %d requests, want 0", n)
	}
	// ...and the client really dials what the lookup returned: allowed, it arrives.
	resp, err := New(2*time.Second, true, WithLookup(lookup), WithDialCheck(loopbackOnly)).Get(evil)
	if err != nil {
		t.Fatalf("allowPrivate Get(evil.test): %v", err)
	}
	resp.Body.Close()
	if n := rcv.hits.Load(); n != 1 {
		t.Errorf("receiver got %d requests, want 1", n)
	}

	// A private answer is refused in the Control callback, before connect(2):
	// nothing is sent to 10.0.0.1. (Never run these with allowPrivate.)
	client := New(2*time.Second, false, WithLookup(lookup), WithDialCheck(loopbackOnly))
	_, err = client.Get("http://private.test/hook")
	if want := "destination 10.0.0.1 is a private address; set allow_private to allow it"; !errors.Is(err, ErrForbiddenAddress) || !strings.Contains(err.Error(), want) {
		t.Errorf("Get(private.test) error = %v, want %q", err, want)
	}
	_, err = client.Get("https://multi.test/hook")
	if !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("Get(multi.test) error = %v, want refusal", err)
	}
	_, err = client.Get("http://unknown.test/")
	if err == nil || errors.Is(err, ErrForbiddenAddress) || !strings.Contains(err.Error(), "no such host") {
		t.Errorf("Get(unknown.test) error = %v, want a lookup failure", err)
	}
}

func TestDialCheckRunsAfterTheGuard(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, nil)
	var seen atomic.Int64
	refuse := func(ap netip.AddrPort) error {
		seen.Add(1)
		return errors.New("refused by dial check")
	}
	_, err := New(2*time.Second, true, WithDialCheck(refuse)).Get(rcv.URL)
	if err == nil || !strings.Contains(err.Error(), "refused by dial check") || rcv.hits.Load() != 0 {
		t.Errorf("Get = %v with %d hits, want the dial check's refusal and no request", err, rcv.hits.Load())
	}
	// Without allowPrivate the guard refuses first and the check is not consulted.
	seen.Store(0)
	_, err = New(2*time.Second, false, WithDialCheck(refuse)).Get(rcv.URL)
	if !errors.Is(err, ErrForbiddenAddress) || seen.Load() != 0 {
		t.Errorf("Get = %v, check called %d times; want the guard's refusal first", err, seen.Load())
	}
}

func TestClientDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	target := newReceiver(t, nil)
	origin := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusFound)
	})
	resp, err := New(2*time.Second, true).Get(origin.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Errorf("status = %d, want 302 returned as is", resp.StatusCode)
	}
	if n := target.hits.Load(); n != 0 {
		t.Errorf("redirect target got %d requests, want 0", n)
	}
}

func TestClientIgnoresProxyEnvironment(t *testing.T) {
	t.Parallel()
	tr, ok := New(0, false).Transport.(*http.Transport)
	if !ok {
		t.Fatalf("Transport is %T, want *http.Transport", New(0, false).Transport)
	}
	if tr.Proxy != nil {
		t.Error("Transport.Proxy is set; a proxy would connect to addresses the dial check never sees")
	}
	if c := New(0, false); c.Timeout != DefaultTimeout {
		t.Errorf("zero timeout gave %s, want %s", c.Timeout, DefaultTimeout)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"120", 120 * time.Second},
		{" 5 ", 5 * time.Second},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{"1.5", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"Sat, 01 Mar 2025 12:00:30 GMT", 30 * time.Second},
		{"Saturday, 01-Mar-25 12:01:00 GMT", time.Minute}, // RFC 850
		{"Sat Mar  1 12:00:10 2025", 10 * time.Second},    // asctime
		{"999999999999999999", MaxRetryAfter},
		{now.Add(72 * time.Hour).Format(http.TimeFormat), MaxRetryAfter},
	}
	for _, tt := range tests {
		if got := ParseRetryAfter(tt.v, now); got != tt.want {
			t.Errorf("ParseRetryAfter(%q) = %s, want %s", tt.v, got, tt.want)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw      string
		keepPath bool
		want     string
	}{
		{"https://user:pw@hooks.example.com/a/b?token=x#f", true, "https://hooks.example.com/a/b"},
		{"https://hooks.slack.com/services/T0/B0/secret", false, "https://hooks.slack.com"},
		{"http://127.0.0.1:9/x", false, "http://127.0.0.1:9"},
		{"::bad", true, "(invalid url)"},
	}
	for _, tt := range tests {
		if got := Redact(tt.raw, tt.keepPath); got != tt.want {
			t.Errorf("Redact(%q, %v) = %q, want %q", tt.raw, tt.keepPath, got, tt.want)
		}
	}
}

func TestDeliverClassifiesResponses(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tests := []struct {
		status     int
		header     map[string]string
		body       string
		wantNil    bool
		wantKind   string
		wantAfter  time.Duration
		wantSubstr string
	}{
		{status: 200, wantNil: true},
		{status: 201, wantNil: true},
		{status: 204, wantNil: true},
		{status: 301, header: map[string]string{"Location": "https://elsewhere.example/"}, wantKind: "permanent", wantSubstr: "HTTP 301 Moved Permanently: redirects are not followed (location https://elsewhere.example/)"},
		{status: 304, wantKind: "permanent", wantSubstr: "redirects are not followed"},
		{status: 400, body: "bad payload", wantKind: "permanent", wantSubstr: "HTTP 400 Bad Request: bad payload"},
		{status: 401, wantKind: "permanent"},
		{status: 404, body: "no such hook\n", wantKind: "permanent", wantSubstr: "HTTP 404 Not Found: no such hook"},
		{status: 408, wantKind: "temporary"},
		{status: 410, body: "gone", wantKind: "gone", wantSubstr: "HTTP 410 Gone: gone"},
		{status: 422, wantKind: "permanent"},
		{status: 429, header: map[string]string{"Retry-After": "30"}, wantKind: "rate_limited", wantAfter: 30 * time.Second},
		{status: 429, header: map[string]string{"Retry-After": now.Add(2 * time.Minute).Format(http.TimeFormat)}, wantKind: "rate_limited", wantAfter: 2 * time.Minute},
		{status: 429, wantKind: "rate_limited"},
		{status: 500, body: "boom", wantKind: "temporary", wantSubstr: "HTTP 500 Internal Server Error: boom"},
		{status: 502, wantKind: "temporary"},
		{status: 503, header: map[string]string{"Retry-After": "120"}, wantKind: "temporary", wantAfter: 120 * time.Second},
		{status: 599, wantKind: "temporary", wantSubstr: "HTTP 599"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			req, _ := http.NewRequest(http.MethodPost, rcv.URL, strings.NewReader("{}"))
			err := Deliver(New(2*time.Second, true), req, "POST dest", clock)
			if tt.wantNil {
				if err != nil {
					t.Fatalf("Deliver = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Deliver = nil, want an error")
			}
			kind, after := classify2(err)
			if kind != tt.wantKind || after != tt.wantAfter {
				t.Errorf("Deliver = %v (%s, %s), want %s, %s", err, kind, after, tt.wantKind, tt.wantAfter)
			}
			if !strings.HasPrefix(err.Error(), "POST dest: ") {
				t.Errorf("error %q does not start with the destination", err)
			}
			if tt.wantSubstr != "" && !strings.Contains(err.Error(), tt.wantSubstr) {
				t.Errorf("error %q does not contain %q", err, tt.wantSubstr)
			}
		})
	}
}

func TestDeliverQuotesBodyTruncated(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("é", 100<<10) // 200 KiB, multi-byte runes
	rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, big)
	})
	req, _ := http.NewRequest(http.MethodPost, rcv.URL, nil)
	err := Deliver(New(2*time.Second, true), req, "POST dest", nil)
	if err == nil {
		t.Fatal("want error")
	}
	msg := err.Error()
	if len(msg) > maxErrorBody+100 || !strings.HasSuffix(msg, "é…") {
		t.Errorf("error is %d bytes ending %q; want the body cut at a rune boundary near %d bytes", len(msg), msg[len(msg)-10:], maxErrorBody)
	}
}

func TestDeliverTransportFailures(t *testing.T) {
	t.Parallel()

	t.Run("refused destination is permanent and not contacted", func(t *testing.T) {
		t.Parallel()
		rcv := newReceiver(t, nil)
		req, _ := http.NewRequest(http.MethodPost, rcv.URL+"/hook?token=secret", nil)
		err := Deliver(New(2*time.Second, false), req, "POST redacted", nil)
		if kind, _ := classify2(err); kind != "permanent" || !errors.Is(err, ErrForbiddenAddress) {
			t.Fatalf("Deliver = %v (%s), want permanent refusal", err, kind)
		}
		if !strings.Contains(err.Error(), "loopback") || strings.Contains(err.Error(), "secret") {
			t.Errorf("error %q should name loopback and not quote the URL", err)
		}
		if rcv.hits.Load() != 0 {
			t.Error("refused receiver was contacted")
		}
	})

	t.Run("timeout is temporary", func(t *testing.T) {
		t.Parallel()
		rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		})
		req, _ := http.NewRequest(http.MethodPost, rcv.URL, nil)
		err := Deliver(New(100*time.Millisecond, true), req, "POST dest", nil)
		if kind, _ := classify2(err); kind != "temporary" {
			t.Fatalf("Deliver = %v (%s), want temporary", err, kind)
		}
	})

	t.Run("connection refused is temporary", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", nil)
		err = Deliver(New(2*time.Second, true), req, "POST dest", nil)
		if kind, _ := classify2(err); kind != "temporary" {
			t.Fatalf("Deliver = %v (%s), want temporary", err, kind)
		}
	})

	t.Run("cancelled context is temporary", func(t *testing.T) {
		t.Parallel()
		rcv := newReceiver(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rcv.URL, nil)
		err := Deliver(New(2*time.Second, true), req, "POST dest", nil)
		if kind, _ := classify2(err); kind != "temporary" || !errors.Is(err, context.Canceled) {
			t.Fatalf("Deliver = %v (%s), want temporary wrapping context.Canceled", err, kind)
		}
	})
}

// classify2 returns err's kind name and RetryAfter, or "" for nil.
func classify2(err error) (string, time.Duration) {
	if err == nil {
		return "", 0
	}
	kind, after := channels.Classify(err)
	return kind.String(), after
}
