package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
)

type received struct {
	header http.Header
	body   []byte
	path   string
}

// receiver stands in for Slack's incoming-webhook endpoint, on 127.0.0.1.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
}

func newReceiver(t *testing.T, respond func(w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rcv := &receiver{}
	rcv.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rcv.mu.Lock()
		rcv.requests = append(rcv.requests, received{header: r.Header.Clone(), body: body, path: r.URL.Path})
		rcv.mu.Unlock()
		if respond != nil {
			respond(w, r)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(rcv.Close)
	return rcv
}

func (r *receiver) got() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.requests...)
}

const tokenPath = "/services/T000/B000/XXXXSECRET"

func notifiers(url string) map[string]*Templates {
	return map[string]*Templates{
		"comment.created": {
			WebhookURL: url + tokenPath,
			Text:       "{{.author_name}} commented on *{{.post_title}}* <{{.url}}|open>",
		},
		"precompiled": {
			WebhookURL: url + tokenPath,
			Text:       "ignored: the compiled template wins",
			text:       template.Must(template.New("p").Parse("compiled {{.n}}")),
		},
		"no.slack":  {},
		"no.url":    {Text: "x"},
		"bad.param": {WebhookURL: url + tokenPath, Text: "{{.x.y}}"},
	}
}

// loopbackOnly is a tripwire for test clients given a fake lookup: it refuses
// any address off this machine, so even a broken guard cannot make a test send
// a packet to 10.0.0.1.
func loopbackOnly(ap netip.AddrPort) error {
	if ap.Addr().Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("test tripwire: refusing to connect to %s", ap)
}

func message(notifier string, params map[string]any) channels.Message {
	return channels.Message{DeliveryID: "d1", NotificationID: "n1", Notifier: notifier, Key: "k", Params: params, Attempt: 1}
}

func TestSendBulkPostsRenderedText(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, nil)
	s, err := New(&Config{AllowPrivate: true}, notifiers(rcv.URL), Options{})
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]any{"author_name": "Ada", "post_title": `Hello "world" & <you>`, "url": "https://app.example/p/9"}
	if err := s.SendBulk(context.Background(), message("comment.created", params)); err != nil {
		t.Fatalf("SendBulk: %v", err)
	}
	if err := s.SendBulk(context.Background(), message("precompiled", map[string]any{"n": 7})); err != nil {
		t.Fatalf("SendBulk(precompiled): %v", err)
	}
	reqs := rcv.got()
	if len(reqs) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(reqs))
	}
	wantTexts := []string{
		`Ada commented on *Hello "world" &amp; &lt;you&gt;* <https://app.example/p/9|open>`,
		"compiled 7",
	}
	for i, r := range reqs {
		if r.path != tokenPath {
			t.Errorf("path = %q, want %q", r.path, tokenPath)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
		var body map[string]any
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatalf("body %s: %v", r.body, err)
		}
		if len(body) != 1 || body["text"] != wantTexts[i] {
			t.Errorf("body = %s, want {\"text\": %q}", r.body, wantTexts[i])
		}
	}
}

// TestParamsCannotAddSlackMarkup: &, < and > in params, at any depth, reach
// Slack escaped, so a param cannot ping @channel, disguise a link or close the
// template's own <url|label>; the template's literal markup is sent as
// written.
func TestParamsCannotAddSlackMarkup(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, nil)
	s, err := New(&Config{AllowPrivate: true}, map[string]*Templates{"n": {
		WebhookURL: rcv.URL + tokenPath,
		Text:       "<!here> {{.who}} on <{{.url}}|{{.title}}>{{range .tags}} [{{.}}]{{end}}{{with .author}} by {{.name}}{{end}}",
	}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]any{
		"who":    "<!channel> & <@U123>",
		"url":    "https://app.example/p?a=1&b=2",
		"title":  "x|<https://evil.example|your bank>",
		"tags":   []any{"<b>", 3.0},
		"author": map[string]any{"name": "A > B"},
	}
	if err := s.SendBulk(context.Background(), message("n", params)); err != nil {
		t.Fatal(err)
	}
	reqs := rcv.got()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	var body struct{ Text string }
	if err := json.Unmarshal(reqs[0].body, &body); err != nil {
		t.Fatal(err)
	}
	want := "<!here> &lt;!channel&gt; &amp; &lt;@U123&gt; on <https://app.example/p?a=1&amp;b=2|x|&lt;https://evil.example|your bank&gt;> [&lt;b&gt;] [3] by A &gt; B"
	if body.Text != want {
		t.Fatalf("text = %q\nwant   %q", body.Text, want)
	}
	if params["who"] != "<!channel> & <@U123>" {
		t.Fatalf("the message's params were changed: %v", params["who"])
	}
}

func TestConfigured(t *testing.T) {
	t.Parallel()
	s, err := New(nil, notifiers("https://hooks.slack.test"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string]bool{"comment.created": true, "precompiled": true, "no.slack": false, "no.url": false, "unknown": false} {
		if got := s.Configured(n); got != want {
			t.Errorf("Configured(%s) = %v, want %v", n, got, want)
		}
	}
	if s.Name() != "slack" {
		t.Errorf("Name = %q", s.Name())
	}
	if s.client.Timeout != DefaultTimeout {
		t.Errorf("nil config timeout = %s, want %s", s.client.Timeout, DefaultTimeout)
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		status    int
		header    map[string]string
		body      string
		wantKind  channels.Kind
		wantAfter time.Duration
	}{
		{"rate limited", 429, map[string]string{"Retry-After": "30"}, "rate_limited", channels.KindRateLimited, 30 * time.Second},
		{"rate limited date", 429, map[string]string{"Retry-After": now.Add(time.Minute).Format(http.TimeFormat)}, "", channels.KindRateLimited, time.Minute},
		{"server error", 500, nil, "rollup_error", channels.KindTemporary, 0},
		{"invalid payload", 400, nil, "invalid_payload", channels.KindPermanent, 0},
		{"no such channel", 404, nil, "channel_not_found", channels.KindPermanent, 0},
		{"archived", 410, nil, "channel_is_archived", channels.KindGone, 0},
		{"redirect", 302, map[string]string{"Location": "https://elsewhere.test/"}, "", channels.KindPermanent, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			s, err := New(&Config{AllowPrivate: true}, notifiers(rcv.URL), Options{Clock: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			err = s.SendBulk(context.Background(), message("comment.created", nil))
			if err == nil {
				t.Fatal("SendBulk = nil, want error")
			}
			kind, after := channels.Classify(err)
			if kind != tt.wantKind || after != tt.wantAfter {
				t.Errorf("SendBulk = %v (%s, %s), want %s, %s", err, kind, after, tt.wantKind, tt.wantAfter)
			}
			if !strings.Contains(err.Error(), tt.body) {
				t.Errorf("error %q does not quote the body %q", err, tt.body)
			}
			if strings.Contains(err.Error(), "XXXXSECRET") {
				t.Errorf("error %q leaks the webhook URL's token", err)
			}
		})
	}
}

func TestPrivateDestinations(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, nil)

	s, err := New(&Config{}, notifiers(rcv.URL), Options{}) // allow_private false
	if err != nil {
		t.Fatal(err)
	}
	err = s.SendBulk(context.Background(), message("comment.created", nil))
	if kind, _ := channels.Classify(err); err == nil || kind != channels.KindPermanent || !errors.Is(err, safehttp.ErrForbiddenAddress) {
		t.Fatalf("SendBulk = %v, want permanent refusal", err)
	}
	if !strings.Contains(err.Error(), "loopback") || strings.Contains(err.Error(), "XXXXSECRET") {
		t.Errorf("error %q should say loopback and not leak the token", err)
	}
	if n := len(rcv.got()); n != 0 {
		t.Errorf("receiver got %d requests, want 0", n)
	}

	// A name that resolves to a private address, through an injected lookup
	// (the real DNS is never asked; 10.0.0.1 is refused before connect).
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == "hooks.slack.test" {
			return []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	s, err = New(nil, notifiers("https://hooks.slack.test"), Options{Client: safehttp.New(2*time.Second, false, safehttp.WithLookup(lookup), safehttp.WithDialCheck(loopbackOnly))})
	if err != nil {
		t.Fatal(err)
	}
	err = s.SendBulk(context.Background(), message("comment.created", nil))
	if kind, _ := channels.Classify(err); err == nil || kind != channels.KindPermanent || !strings.Contains(err.Error(), "destination 10.0.0.1 is a private address") {
		t.Errorf("SendBulk(→10.0.0.1) = %v, want permanent private refusal", err)
	}
}

func TestTimeoutIsTemporary(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	s, err := New(&Config{AllowPrivate: true, Timeout: config.Duration(100 * time.Millisecond)}, notifiers(rcv.URL), Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.SendBulk(context.Background(), message("comment.created", nil))
	if kind, _ := channels.Classify(err); err == nil || kind != channels.KindTemporary {
		t.Fatalf("SendBulk = %v, want temporary", err)
	}
}

func TestRefusedWithoutSending(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, nil)
	s, err := New(&Config{AllowPrivate: true}, notifiers(rcv.URL), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"no.slack", "no.url", "unknown"} {
		err := s.SendBulk(context.Background(), message(n, nil))
		if kind, _ := channels.Classify(err); err == nil || kind != channels.KindPermanent {
			t.Errorf("SendBulk(%s) = %v, want permanent", n, err)
		}
	}
	err = s.SendBulk(context.Background(), message("bad.param", map[string]any{"x": 1}))
	if kind, _ := channels.Classify(err); err == nil || kind != channels.KindPermanent || !strings.Contains(err.Error(), "render text") {
		t.Errorf("SendBulk(bad.param) = %v, want permanent render failure", err)
	}
	if n := len(rcv.got()); n != 0 {
		t.Errorf("receiver got %d requests, want 0", n)
	}
}

func TestNewRejectsBadNotifiers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		slack   *Templates
		wantErr string
	}{
		{"bad url", &Templates{WebhookURL: "hooks.slack.com/x", Text: "x"}, "notifiers.n.channels.slack.webhook_url"},
		{"empty text", &Templates{WebhookURL: "https://hooks.slack.test/x"}, "notifiers.n.channels.slack.text is empty"},
		{"bad template", &Templates{WebhookURL: "https://hooks.slack.test/x", Text: "{{.x"}, "notifiers.n.channels.slack.text"},
	}
	for _, tt := range tests {
		_, err := New(nil, map[string]*Templates{"n": tt.slack}, Options{})
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: New = %v, want error containing %q", tt.name, err, tt.wantErr)
		}
	}
}
