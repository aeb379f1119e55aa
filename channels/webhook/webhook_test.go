package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
)

// The Standard Webhooks reference test vector (libraries/*/tests).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// received is one request the test receiver got.
type received struct {
	header http.Header
	body   []byte
	path   string
}

// receiver is an httptest webhook endpoint on 127.0.0.1. Each request is
// recorded, then answered by respond (200 when nil).
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
	respond  func(n int, w http.ResponseWriter, r *http.Request) // n counts from 1
}

func newReceiver(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rcv := &receiver{respond: respond}
	rcv.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rcv.mu.Lock()
		rcv.requests = append(rcv.requests, received{header: r.Header.Clone(), body: body, path: r.URL.RequestURI()})
		n := len(rcv.requests)
		rcv.mu.Unlock()
		if rcv.respond != nil {
			rcv.respond(n, w, r)
		}
	}))
	t.Cleanup(rcv.Close)
	return rcv
}

func (r *receiver) got() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.requests...)
}

type bundle struct {
	rcv    *receiver
	sender *Sender
	msg    channels.Message // per-recipient, addressed to rcv
}

// setup starts a receiver and a Sender allowed to reach it (it is on loopback).
// cfg and opts adjust the defaults: the vector secret, allow_private, the real
// clock (the official verifier checks the timestamp against time.Now).
func setup(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request), adjust func(*Config, map[string]string, *Options)) *bundle {
	t.Helper()
	rcv := newReceiver(t, respond)
	cfg := &Config{Secret: vectorSecret, AllowPrivate: true, Timeout: config.Duration(5 * time.Second)}
	notifiers := map[string]string{"comment.created": rcv.URL + "/bulk?token=bulk-secret"}
	var opts Options
	if adjust != nil {
		adjust(cfg, notifiers, &opts)
	}
	s, err := New(cfg, notifiers, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &bundle{rcv: rcv, sender: s, msg: channels.Message{
		DeliveryID:     "0194a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
		NotificationID: "0194a1b2-0000-7000-8000-000000000001",
		Notifier:       "comment.created",
		Key:            "comment-123",
		Category:       "comments",
		Actor:          "u1",
		Reason:         "author",
		Recipient:      &channels.Recipient{ID: "u2", Name: "Ada", WebhookURL: rcv.URL + "/hook?token=recipient-secret"},
		Params:         map[string]any{"post_title": "Hello", "n": 3},
		CreatedAt:      time.Date(2025, 1, 2, 15, 4, 5, 123456000, time.UTC),
		Attempt:        1,
	}}
}

func kindOf(t *testing.T, err error) (channels.Kind, time.Duration) {
	t.Helper()
	if err == nil {
		t.Fatal("got nil error, want a classified failure")
	}
	return channels.Classify(err)
}

func TestSignMatchesReferenceVector(t *testing.T) {
	t.Parallel()
	got, err := Sign(vectorSecret, vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorPayload))
	if err != nil || got != vectorSignature {
		t.Fatalf("Sign = %q, %v; want %q", got, err, vectorSignature)
	}

	// A raw (non-whsec_) secret is used as bytes, as the official NewWebhookRaw does.
	raw := "a plain text secret"
	got, err = Sign(raw, vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorPayload))
	if err != nil {
		t.Fatal(err)
	}
	wh, _ := standardwebhooks.NewWebhookRaw([]byte(raw))
	want, _ := wh.Sign(vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorPayload))
	if got != want {
		t.Errorf("Sign(raw) = %q, official = %q", got, want)
	}

	// Unpadded base64 after whsec_ is the same key.
	unpadded := "whsec_" + strings.TrimRight(base64Of("sixteen byte key"), "=")
	a, err1 := Sign(unpadded, "id", time.Unix(1, 0), nil)
	b, err2 := Sign("sixteen byte key", "id", time.Unix(1, 0), nil)
	if err1 != nil || err2 != nil || a != b {
		t.Errorf("unpadded whsec_ = %q (%v), raw key = %q (%v); want equal", a, err1, b, err2)
	}

	for _, bad := range []string{"", "whsec_", "whsec_!!not base64!!"} {
		if _, err := Sign(bad, "id", time.Now(), nil); err == nil {
			t.Errorf("Sign(secret %q) succeeded, want error", bad)
		} else if len(bad) > len("whsec_") && strings.Contains(err.Error(), bad) {
			t.Errorf("error %q quotes the secret", err)
		}
	}
}

func TestSendIsSignedPerStandardWebhooks(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	before := time.Now().Unix()
	if err := b.sender.Send(context.Background(), b.msg); err != nil {
		t.Fatalf("Send: %v", err)
	}
	reqs := b.rcv.got()
	if len(reqs) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.path != "/hook?token=recipient-secret" {
		t.Errorf("path = %q, want the recipient's webhook_url", r.path)
	}
	for k, want := range map[string]string{
		"Content-Type": "application/json",
		"User-Agent":   "notifyd",
		"webhook-id":   b.msg.DeliveryID,
	} {
		if got := r.header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
	if err != nil || ts < before || ts > time.Now().Unix() {
		t.Errorf("webhook-timestamp = %q, want unix seconds of the send", r.header.Get("webhook-timestamp"))
	}

	// The official library accepts it with the recipient's own secret (and
	// checks the timestamp tolerance too).
	u2Secret := mustDerive(t, RecipientSecret, vectorSecret, "u2")
	if got := b.sender.RecipientSecret("u2"); got != u2Secret {
		t.Fatalf("Sender.RecipientSecret = %q, RecipientSecret = %q", got, u2Secret)
	}
	wh, err := standardwebhooks.NewWebhook(u2Secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(r.body, r.header); err != nil {
		t.Errorf("official Verify: %v", err)
	}
	if err := Verify(u2Secret, r.header, r.body, 0); err != nil {
		t.Errorf("Verify: %v", err)
	}
	// And it rejects a tampered body: the check above can fail.
	if err := wh.Verify(append(r.body, ' '), r.header); err == nil {
		t.Error("official Verify accepted a tampered body")
	}

	var got map[string]any
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.body)
	}
	want := map[string]any{
		"type":      "comment.created",
		"timestamp": "2025-01-02T15:04:05Z",
		"data": map[string]any{
			"id":              b.msg.DeliveryID,
			"notification_id": b.msg.NotificationID,
			"notifier":        "comment.created",
			"key":             "comment-123",
			"category":        "comments",
			"actor":           "u1",
			"reason":          "author",
			"recipient":       map[string]any{"id": "u2", "name": "Ada", "webhook_url": b.msg.Recipient.WebhookURL},
			"params":          map[string]any{"post_title": "Hello", "n": float64(3)},
			"created_at":      "2025-01-02T15:04:05.123456Z",
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("body =\n%s\nwant\n%v", r.body, want)
	}
}

func TestRawSecretVerifiesWithOfficialLibrary(t *testing.T) {
	t.Parallel()
	const raw = "correct horse battery staple"
	b := setup(t, nil, func(c *Config, _ map[string]string, _ *Options) { c.Secret = raw })
	if err := b.sender.Send(context.Background(), b.msg); err != nil {
		t.Fatal(err)
	}
	r := b.rcv.got()[0]
	wh, _ := standardwebhooks.NewWebhook(mustDerive(t, RecipientSecret, raw, "u2"))
	if err := wh.Verify(r.body, r.header); err != nil {
		t.Errorf("official Verify with the secret derived from a raw key: %v", err)
	}
	if err := Verify(mustDerive(t, RecipientSecret, raw, "u2"), r.header, r.body, 0); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestRotationSignsWithEverySecret(t *testing.T) {
	t.Parallel()
	const oldRaw = "the old secret"
	newSecret := "whsec_" + base64Of("the new secret key, 32 bytes lng")
	b := setup(t, nil, func(c *Config, _ map[string]string, _ *Options) {
		c.Secret = newSecret
		c.Secrets = []string{oldRaw}
	})
	if err := b.sender.Send(context.Background(), b.msg); err != nil {
		t.Fatal(err)
	}
	r := b.rcv.got()[0]
	sigs := strings.Fields(r.header.Get("webhook-signature"))
	if len(sigs) != 2 {
		t.Fatalf("webhook-signature = %q, want two signatures", r.header.Get("webhook-signature"))
	}
	// The recipient's secrets, derived from the new and the old one.
	newDerived, oldDerived := mustDerive(t, RecipientSecret, newSecret, "u2"), mustDerive(t, RecipientSecret, oldRaw, "u2")
	if got := b.sender.RecipientSecret("u2"); got != newDerived {
		t.Errorf("the secret shown during a rotation is %q, want the new secret's %q", got, newDerived)
	}
	newWH, _ := standardwebhooks.NewWebhook(newDerived)
	oldWH, _ := standardwebhooks.NewWebhook(oldDerived)
	otherWH, _ := standardwebhooks.NewWebhookRaw([]byte("some other secret"))
	only := func(sig string) http.Header {
		h := r.header.Clone()
		h.Set("webhook-signature", sig)
		return h
	}
	// Each signature alone verifies with its own secret, and only with it.
	for i, tc := range []struct {
		wh     *standardwebhooks.Webhook
		secret string
	}{{newWH, newDerived}, {oldWH, oldDerived}} {
		if err := tc.wh.Verify(r.body, only(sigs[i])); err != nil {
			t.Errorf("signature %d with its secret: %v", i, err)
		}
		if err := tc.wh.Verify(r.body, only(sigs[1-i])); err == nil {
			t.Errorf("signature %d verified with the other secret", 1-i)
		}
		if err := Verify(tc.secret, r.header, r.body, 0); err != nil {
			t.Errorf("Verify(secret %d, both signatures): %v", i, err)
		}
	}
	if err := otherWH.Verify(r.body, r.header); err == nil {
		t.Error("an unrelated secret verified")
	}
}

func TestRetryKeepsWebhookID(t *testing.T) {
	t.Parallel()
	b := setup(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "try later")
		}
	}, nil)
	err := b.sender.Send(context.Background(), b.msg)
	if kind, _ := kindOf(t, err); kind != channels.KindTemporary {
		t.Fatalf("first Send = %v (%s), want temporary", err, kind)
	}
	if !strings.Contains(err.Error(), "HTTP 503 Service Unavailable: try later") {
		t.Errorf("error %q should carry the status and body", err)
	}
	b.msg.Attempt = 2
	if err := b.sender.Send(context.Background(), b.msg); err != nil {
		t.Fatalf("second Send = %v, want nil", err)
	}
	reqs := b.rcv.got()
	if len(reqs) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(reqs))
	}
	id1, id2 := reqs[0].header.Get("webhook-id"), reqs[1].header.Get("webhook-id")
	if id1 != b.msg.DeliveryID || id1 != id2 {
		t.Errorf("webhook-id %q then %q, want %q both times", id1, id2, b.msg.DeliveryID)
	}
	if string(reqs[0].body) != string(reqs[1].body) {
		t.Errorf("retry changed the body:\n%s\n%s", reqs[0].body, reqs[1].body)
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		status    int
		header    map[string]string
		wantKind  channels.Kind
		wantAfter time.Duration
	}{
		{"503 with Retry-After seconds", 503, map[string]string{"Retry-After": "7"}, channels.KindTemporary, 7 * time.Second},
		{"500", 500, nil, channels.KindTemporary, 0},
		{"408", 408, nil, channels.KindTemporary, 0},
		{"429 with Retry-After date", 429, map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, channels.KindRateLimited, 90 * time.Second},
		{"429 with Retry-After seconds", 429, map[string]string{"Retry-After": "3"}, channels.KindRateLimited, 3 * time.Second},
		{"404", 404, nil, channels.KindPermanent, 0},
		{"400", 400, nil, channels.KindPermanent, 0},
		{"410", 410, nil, channels.KindGone, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
			}, func(_ *Config, _ map[string]string, o *Options) {
				o.Clock = func() time.Time { return now }
			})
			err := b.sender.Send(context.Background(), b.msg)
			kind, after := kindOf(t, err)
			if kind != tt.wantKind || after != tt.wantAfter {
				t.Errorf("Send = %v (%s, %s), want %s, %s", err, kind, after, tt.wantKind, tt.wantAfter)
			}
			if !strings.Contains(err.Error(), "HTTP "+strconv.Itoa(tt.status)) {
				t.Errorf("error %q does not name the status", err)
			}
			if strings.Contains(err.Error(), "recipient-secret") {
				t.Errorf("error %q leaks the URL's query", err)
			}
		})
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	target := newReceiver(t, nil)
	b := setup(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/stolen", http.StatusTemporaryRedirect)
	}, nil)
	err := b.sender.Send(context.Background(), b.msg)
	if kind, _ := kindOf(t, err); kind != channels.KindPermanent || !strings.Contains(err.Error(), "redirects are not followed") {
		t.Fatalf("Send = %v (%s), want permanent 'redirects are not followed'", err, kind)
	}
	if n := len(target.got()); n != 0 {
		t.Errorf("redirect target got %d requests, want 0", n)
	}
}

func TestPrivateDestinations(t *testing.T) {
	t.Parallel()

	t.Run("loopback refused without allow_private", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, func(c *Config, _ map[string]string, _ *Options) { c.AllowPrivate = false })
		err := b.sender.Send(context.Background(), b.msg)
		if kind, _ := kindOf(t, err); kind != channels.KindPermanent || !errors.Is(err, safehttp.ErrForbiddenAddress) {
			t.Fatalf("Send = %v (%s), want permanent refusal", err, kind)
		}
		if !strings.Contains(err.Error(), "is a loopback address; set allow_private to allow it") {
			t.Errorf("error %q should say loopback and allow_private", err)
		}
		if err := b.sender.SendBulk(context.Background(), b.msg); !errors.Is(err, safehttp.ErrForbiddenAddress) {
			t.Errorf("SendBulk = %v, want refusal", err)
		}
		if n := len(b.rcv.got()); n != 0 {
			t.Errorf("receiver got %d requests, want 0", n)
		}
	})

	t.Run("loopback delivered with allow_private", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, nil) // AllowPrivate: true
		if err := b.sender.Send(context.Background(), b.msg); err != nil {
			t.Fatalf("Send = %v, want nil", err)
		}
		if n := len(b.rcv.got()); n != 1 {
			t.Errorf("receiver got %d requests, want 1", n)
		}
	})

	t.Run("hostname resolving to a private address refused", func(t *testing.T) {
		t.Parallel()
		rcv := newReceiver(t, nil)
		port := mustPort(t, rcv.URL)
		// The names resolve only through this table; the client never asks DNS,
		// and the refusal happens before connect(2), so nothing reaches 10.0.0.1.
		lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
			switch host {
			case "evil.test":
				return []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil
			case "loop.test":
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		s, err := New(&Config{Secret: vectorSecret}, nil, Options{
			Client: safehttp.New(2*time.Second, false, safehttp.WithLookup(lookup), safehttp.WithDialCheck(loopbackOnly)),
		})
		if err != nil {
			t.Fatal(err)
		}
		msg := channels.Message{DeliveryID: "d1", Notifier: "n", Recipient: &channels.Recipient{ID: "u", WebhookURL: "https://evil.test/hook"}}
		err = s.Send(context.Background(), msg)
		if kind, _ := kindOf(t, err); kind != channels.KindPermanent || !errors.Is(err, safehttp.ErrForbiddenAddress) {
			t.Fatalf("Send(evil.test→10.0.0.1) = %v (%s), want permanent refusal", err, kind)
		}
		if want := "destination 10.0.0.1 is a private address; set allow_private to allow it"; !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}

		msg.Recipient.WebhookURL = "http://loop.test:" + port + "/hook"
		if err := s.Send(context.Background(), msg); !errors.Is(err, safehttp.ErrForbiddenAddress) || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Send(loop.test→127.0.0.1) = %v, want loopback refusal", err)
		}
		if n := len(rcv.got()); n != 0 {
			t.Errorf("receiver got %d requests, want 0", n)
		}
	})
}

func TestTimeoutIsTemporary(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}, func(c *Config, _ map[string]string, _ *Options) {
		c.Timeout = config.Duration(100 * time.Millisecond)
	})
	err := b.sender.Send(context.Background(), b.msg)
	if kind, _ := kindOf(t, err); kind != channels.KindTemporary {
		t.Fatalf("Send = %v (%s), want temporary", err, kind)
	}
}

func TestSendBulk(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	if !b.sender.Configured("comment.created") {
		t.Error("Configured(comment.created) = false, want true")
	}
	for _, n := range []string{"post.published", "unknown"} {
		if b.sender.Configured(n) {
			t.Errorf("Configured(%s) = true, want false", n)
		}
	}

	msg := b.msg
	msg.Recipient, msg.Reason = nil, ""
	if err := b.sender.SendBulk(context.Background(), msg); err != nil {
		t.Fatalf("SendBulk: %v", err)
	}
	reqs := b.rcv.got()
	if len(reqs) != 1 || reqs[0].path != "/bulk?token=bulk-secret" {
		t.Fatalf("requests = %+v, want one to the notifier URL", reqs)
	}
	if err := Verify(mustDerive(t, NotifierSecret, vectorSecret, "comment.created"), reqs[0].header, reqs[0].body, 0); err != nil {
		t.Errorf("Verify: %v", err)
	}
	var body struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(reqs[0].body, &body); err != nil {
		t.Fatal(err)
	}
	if got := string(body.Data["recipient"]); got != "null" {
		t.Errorf("bulk recipient = %s, want null", got)
	}

	msg.Notifier = "post.published"
	err := b.sender.SendBulk(context.Background(), msg)
	if kind, _ := kindOf(t, err); kind != channels.KindPermanent {
		t.Errorf("SendBulk(unconfigured) = %v (%s), want permanent", err, kind)
	}
}

func TestAddressable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	tests := []struct {
		url     string
		wantErr string
	}{
		{"", "recipient has no webhook_url"},
		{"https://hooks.example.com/u2", ""},
		{"ftp://hooks.example.com/u2", "recipient webhook_url"},
		{"hooks.example.com/u2", "recipient webhook_url"},
	}
	for _, tt := range tests {
		err := b.sender.Addressable("comment.created", channels.Recipient{ID: "u2", WebhookURL: tt.url})
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("Addressable(%q) = %v, want nil", tt.url, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("Addressable(%q) = %v, want %q", tt.url, err, tt.wantErr)
		}
	}

	msg := b.msg
	msg.Recipient = &channels.Recipient{ID: "u2"}
	if kind, _ := kindOf(t, b.sender.Send(context.Background(), msg)); kind != channels.KindPermanent {
		t.Errorf("Send without webhook_url: kind %s, want permanent", kind)
	}
	msg.Recipient = nil
	if kind, _ := kindOf(t, b.sender.Send(context.Background(), msg)); kind != channels.KindPermanent {
		t.Errorf("Send without recipient: kind %s, want permanent", kind)
	}
	if n := len(b.rcv.got()); n != 0 {
		t.Errorf("receiver got %d requests, want 0", n)
	}
	if b.sender.Name() != "webhook" {
		t.Errorf("Name = %q", b.sender.Name())
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       *Config
		notifiers map[string]string
		wantErr   string
	}{
		{"nil config", nil, nil, "not configured"},
		{"no secret", &Config{}, nil, "channels.webhook.secret is required"},
		{"bad whsec", &Config{Secret: "whsec_%%%"}, nil, "channels.webhook.secret: "},
		{"bad rotation secret", &Config{Secret: "ok", Secrets: []string{"ok2", ""}}, nil, "channels.webhook.secrets[1]"},
		{"bad notifier url", &Config{Secret: "ok"}, map[string]string{"n": "gopher://x"},
			"notifiers.n.channels.webhook.url"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg, tt.notifiers, Options{})
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: New = %v, want error containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"x"}`)
	headers := func(secret string, id string, ts time.Time, body []byte) http.Header {
		sig, err := Sign(secret, id, ts, body)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		h.Set("webhook-signature", sig)
		return h
	}
	now := time.Now()
	good := headers(vectorSecret, "msg_1", now, body)
	if err := Verify(vectorSecret, good, body, 0); err != nil {
		t.Fatalf("Verify(good) = %v", err)
	}
	// Several signatures, other versions ignored.
	multi := good.Clone()
	multi.Set("webhook-signature", "v1a,abc v1,AAAA "+good.Get("webhook-signature"))
	if err := Verify(vectorSecret, multi, body, 0); err != nil {
		t.Errorf("Verify(multi) = %v", err)
	}

	without := func(k string) http.Header { h := good.Clone(); h.Del(k); return h }
	with := func(k, v string) http.Header { h := good.Clone(); h.Set(k, v); return h }
	old := headers(vectorSecret, "msg_1", now.Add(-10*time.Minute), body)
	tests := []struct {
		name      string
		secret    string
		h         http.Header
		body      []byte
		tolerance time.Duration
	}{
		{"tampered body", vectorSecret, good, []byte(`{"type":"y"}`), 0},
		{"wrong secret", "whsec_" + base64Of("another key"), good, body, 0},
		{"other id", vectorSecret, with("webhook-id", "msg_2"), body, 0},
		{"missing id", vectorSecret, without("webhook-id"), body, 0},
		{"missing timestamp", vectorSecret, without("webhook-timestamp"), body, 0},
		{"missing signature", vectorSecret, without("webhook-signature"), body, 0},
		{"non-numeric timestamp", vectorSecret, with("webhook-timestamp", "yesterday"), body, 0},
		{"too old", vectorSecret, old, body, 0},
		{"too new", vectorSecret, headers(vectorSecret, "msg_1", now.Add(10*time.Minute), body), body, 0},
		{"outside a short tolerance", vectorSecret, headers(vectorSecret, "msg_1", now.Add(-time.Minute), body), body, 30 * time.Second},
		{"wrong version", vectorSecret, with("webhook-signature", "v2,"+strings.TrimPrefix(good.Get("webhook-signature"), "v1,")), body, 0},
	}
	for _, tt := range tests {
		if err := Verify(tt.secret, tt.h, tt.body, tt.tolerance); !errors.Is(err, ErrInvalidSignature) {
			t.Errorf("%s: Verify = %v, want ErrInvalidSignature", tt.name, err)
		}
	}
	if err := Verify(vectorSecret, old, body, -1); err != nil {
		t.Errorf("negative tolerance should skip the timestamp check: %v", err)
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

func base64Of(s string) string {
	return base64.StdEncoding.EncodeToString([]byte(s))
}

func mustPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func mustDerive(t *testing.T, derive func(secret, name string) (string, error), secret, name string) string {
	t.Helper()
	d, err := derive(secret, name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestNoDestinationCanVerifyOrForgeAnothers: each destination's webhooks
// verify with its own derived secret and with no other: not another
// recipient's, not the notifier-level one's, not the channel secret. A
// receiver holding its secret cannot make a message another destination
// accepts, nor replay one of its own to another destination.
func TestNoDestinationCanVerifyOrForgeAnothers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	u3 := b.msg
	u3.DeliveryID = "0194a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"
	u3.Recipient = &channels.Recipient{ID: "u3", WebhookURL: b.rcv.URL + "/u3"}
	bulk := b.msg
	bulk.DeliveryID = "0194a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5d"
	bulk.Recipient, bulk.Reason = nil, ""
	// A recipient whose id reads like the notifier's purpose string.
	tricky := b.msg
	tricky.DeliveryID = "0194a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5e"
	tricky.Recipient = &channels.Recipient{ID: "notifier:comment.created", WebhookURL: b.rcv.URL + "/tricky"}
	for _, m := range []channels.Message{b.msg, u3, tricky} {
		if err := b.sender.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.sender.SendBulk(context.Background(), bulk); err != nil {
		t.Fatal(err)
	}
	reqs := b.rcv.got()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	secrets := []string{b.sender.RecipientSecret("u2"), b.sender.RecipientSecret("u3"),
		b.sender.RecipientSecret("notifier:comment.created"), b.sender.NotifierSecret("comment.created")}
	for i, r := range reqs {
		for j, secret := range secrets {
			err := Verify(secret, r.header, r.body, 0)
			if i == j && err != nil {
				t.Errorf("message %d does not verify with its own secret: %v", i, err)
			}
			if i != j && err == nil {
				t.Errorf("message %d verifies with destination %d's secret", i, j)
			}
		}
		if err := Verify(vectorSecret, r.header, r.body, 0); err == nil {
			t.Errorf("message %d verifies with the channel secret: it must sign nothing itself", i)
		}
	}
	// u3 knows its secret and forges a message signed with it: u2's
	// receiver, verifying with u2's secret, refuses it; so it does u3's
	// genuine message replayed to it.
	forged := reqs[0].header.Clone()
	sig, err := Sign(secrets[1], forged.Get(HeaderID), time.Now(), reqs[0].body)
	if err != nil {
		t.Fatal(err)
	}
	forged.Set(HeaderSignature, sig)
	if err := Verify(secrets[0], forged, reqs[0].body, 0); err == nil {
		t.Error("u2 accepted a message u3 signed")
	}
	if err := Verify(secrets[0], reqs[1].header, reqs[1].body, 0); err == nil {
		t.Error("u2 accepted u3's message replayed to it")
	}
	// Each secret is distinct and none is the channel secret.
	seen := map[string]bool{vectorSecret: true}
	for _, s := range secrets {
		if seen[s] {
			t.Errorf("secret %q repeats", s)
		}
		seen[s] = true
	}
}
