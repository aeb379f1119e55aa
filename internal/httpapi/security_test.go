package httpapi_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/notifyd/notifyd/channels/webhook"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/internal/wire"
)

// TestAdminResponsesAreNeverFramedOrCached: every admin endpoint, its
// refusals included, and a route mounted through AdminExtra answer with
// X-Frame-Options: DENY, frame-ancestors 'none' and Cache-Control: no-store,
// even when the handler set a Cache-Control of its own.
func TestAdminResponsesAreNeverFramedOrCached(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: func(o *httpapi.Options) {
		o.AdminExtra = map[string]http.Handler{"GET /admin-page": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "public, max-age=86400")
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{}`))
		})}
	}})
	tests := []struct {
		method, path, token string
		body                any
		status              int
	}{
		{"PUT", "/v1/recipients/u1", adminToken, `{"email":"u1@example.com"}`, 200},
		{"GET", "/v1/recipients/u1", adminToken, nil, 200},
		{"GET", "/v1/recipients/nobody", adminToken, nil, 404},
		{"GET", "/v1/recipients/u1", "", nil, 401},
		{"GET", "/v1/recipients/u1", recipientToken(t, "u1"), nil, 401},
		{"GET", "/v1/recipients/u1/inbox", adminToken, nil, 200},
		{"GET", "/v1/recipients/u1/preferences", adminToken, nil, 200},
		{"GET", "/v1/recipients/u1/mutes", adminToken, nil, 200},
		{"GET", "/v1/recipients/u1/subscriptions", adminToken, nil, 200},
		{"GET", "/v1/topics/t/subscribers", adminToken, nil, 200},
		{"PUT", "/v1/topics/t/subscribers/u1", adminToken, nil, 200},
		{"POST", "/v1/notifications", adminToken, `{`, 400},
		{"GET", "/v1/notifications/01900000-0000-7000-8000-000000000000", adminToken, nil, 404},
		{"DELETE", "/v1/notifications/comment.created/nope", adminToken, nil, 404},
		{"GET", "/admin-page", adminToken, nil, 200},
		{"GET", "/admin-page", "", nil, 401},
	}
	for _, tt := range tests {
		r := b.do(t, tt.method, tt.path, tt.token, tt.body)
		if r.status != tt.status {
			t.Fatalf("%s %s = %d, want %d: %s", tt.method, tt.path, r.status, tt.status, r.raw)
		}
		if got := r.header.Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("%s %s: X-Frame-Options %q, want DENY", tt.method, tt.path, got)
		}
		if got := r.header.Values("Content-Security-Policy"); len(got) != 1 || got[0] != "frame-ancestors 'none'" {
			t.Errorf("%s %s: Content-Security-Policy %q, want frame-ancestors 'none'", tt.method, tt.path, got)
		}
		if got := r.header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s %s: Cache-Control %q, want no-store", tt.method, tt.path, got)
		}
	}
}

// TestRateLimits: a recipient's requests and the admin token's are token
// buckets (http.rate); an empty bucket answers 429 rate_limited with
// Retry-After and the error shape, writes nothing, and is counted in
// notifyd_http_limited_total. One recipient's bucket is not another's.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, setupOpts{options: func(o *httpapi.Options) {
		// Slow refill: the test's requests are far quicker than one token.
		o.Config.HTTP.Rate = config.Rate{Recipient: 0.01, RecipientBurst: 3, Admin: 0.01, AdminBurst: 2}
		o.Metrics = m
	}})
	u1, u2 := recipientToken(t, "u1"), recipientToken(t, "u2")
	for range 3 {
		expect(t, b.do(t, "GET", "/v1/inbox/counts", u1, nil), 200, "")
	}
	before := dbState(t, b.pool)
	r := b.do(t, "POST", "/v1/inbox/read", u1, `{"all":true}`)
	expect(t, r, 429, wire.CodeRateLimited)
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("Retry-After %q, want whole seconds >= 1", r.header.Get("Retry-After"))
	}
	if changed := changedTables(before, dbState(t, b.pool)); len(changed) > 0 {
		t.Fatalf("a refused request wrote to %v", changed)
	}
	// u1 minting another token changes nothing: the bucket is the recipient's.
	expect(t, b.do(t, "GET", "/v1/inbox", recipientToken(t, "u1"), nil), 429, wire.CodeRateLimited)
	// Another recipient has a bucket of its own.
	expect(t, b.do(t, "GET", "/v1/inbox/counts", u2, nil), 200, "")

	expect(t, b.do(t, "GET", "/v1/recipients/u1/inbox", adminToken, nil), 200, "")
	expect(t, b.do(t, "PUT", "/v1/recipients/u1", adminToken, `{}`), 200, "")
	before = dbState(t, b.pool)
	r = b.do(t, "PUT", "/v1/recipients/u3", adminToken, `{"email":"u3@example.com"}`)
	expect(t, r, 429, wire.CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("admin 429 without Retry-After")
	}
	if changed := changedTables(before, dbState(t, b.pool)); len(changed) > 0 {
		t.Fatalf("a refused admin request wrote to %v", changed)
	}
	// A wrong token is refused as unauthorized, not counted against the bucket's owner.
	expect(t, b.do(t, "GET", "/v1/recipients/u1", "wrong", nil), 401, wire.CodeUnauthorized)

	for limit, want := range map[string]float64{"recipient_rate": 2, "admin_rate": 1, "topics": 0} {
		if got := counterValue(t, reg, "notifyd_http_limited_total", limit); got != want {
			t.Errorf("notifyd_http_limited_total{limit=%q} = %v, want %v", limit, got, want)
		}
	}
}

// TestSendCaps: more topics than http.max_topics, or a recipients array
// longer than ten times the notifier's max_recipients before duplicates
// collapse, is a 422 that writes nothing and is counted.
func TestSendCaps(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, setupOpts{options: func(o *httpapi.Options) { o.Metrics = m }})
	topics := make([]string, 101)
	for i := range topics {
		topics[i] = fmt.Sprintf("t%d", i)
	}
	same := make([]string, 31) // max_recipients is 3: 31 copies of one id is one recipient, but 31 > 30
	for i := range same {
		same[i] = "u1"
	}
	before := dbState(t, b.pool)
	expect(t, b.do(t, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "k",
		"topics": topics, "params": map[string]any{"post_title": "x"}}), 422, httpapi.CodeTooManyTopics)
	expect(t, b.do(t, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "k",
		"recipients": same, "params": map[string]any{"post_title": "x"}}), 422, wire.CodeTooManyRecipients)
	if changed := changedTables(before, dbState(t, b.pool)); len(changed) > 0 {
		t.Fatalf("wrote to %v", changed)
	}
	// At the caps: accepted.
	expect(t, b.do(t, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "k",
		"topics": topics[:100], "recipients": same[:30], "params": map[string]any{"post_title": "x"}}), 202, "")
	for limit, want := range map[string]float64{"topics": 1, "recipients": 1} {
		if got := counterValue(t, reg, "notifyd_http_limited_total", limit); got != want {
			t.Errorf("notifyd_http_limited_total{limit=%q} = %v, want %v", limit, got, want)
		}
	}
}

// counterValue reads the counter name{limit=label} from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limit" && l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{limit=%q}", name, label)
	return 0
}

// TestWebhookSecrets: the admin sees a recipient's webhook secret in its
// profile, the recipient at GET /v1/webhook-secret; each recipient's is its
// own, the one the webhook channel signs its webhooks with; a profile read
// and written back (webhook_secret included) is accepted and the secret is
// not writable. Without a webhook channel the field is null.
func TestWebhookSecrets(t *testing.T) {
	t.Parallel()
	const channelSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	sender, err := webhook.New(&webhook.Config{Secret: channelSecret}, nil, webhook.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, setupOpts{options: func(o *httpapi.Options) { o.WebhookSecret = sender.RecipientSecret }})
	want := map[string]string{}
	for _, id := range []string{"u1", "u2"} {
		s, err := webhook.RecipientSecret(channelSecret, id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = s
		r := b.do(t, "GET", "/v1/webhook-secret", recipientToken(t, id), nil)
		expect(t, r, 200, "")
		if r.body["secret"] != s {
			t.Fatalf("%s's /v1/webhook-secret = %s, want %s", id, r.raw, s)
		}
	}
	if want["u1"] == want["u2"] || want["u1"] == channelSecret {
		t.Fatalf("secrets are not per recipient: %v", want)
	}

	put := b.do(t, "PUT", "/v1/recipients/u1", adminToken, `{"email":"u1@example.com","webhook_url":"https://hooks.example.com/u1"}`)
	expect(t, put, 200, "")
	got := b.do(t, "GET", "/v1/recipients/u1", adminToken, nil)
	expect(t, got, 200, "")
	if put.body["webhook_secret"] != want["u1"] || got.body["webhook_secret"] != want["u1"] {
		t.Fatalf("profile webhook_secret: PUT %v, GET %v, want %s", put.body["webhook_secret"], got.body["webhook_secret"], want["u1"])
	}
	// Written back as read: accepted. A different secret: ignored.
	expect(t, b.do(t, "PUT", "/v1/recipients/u1", adminToken, got.raw), 200, "")
	forged := b.do(t, "PUT", "/v1/recipients/u1", adminToken, `{"email":"u1@example.com","webhook_secret":"whsec_AAAA"}`)
	expect(t, forged, 200, "")
	if forged.body["webhook_secret"] != want["u1"] {
		t.Fatalf("webhook_secret after writing another: %v", forged.body["webhook_secret"])
	}

	plain := setup(t)
	expect(t, plain.do(t, "PUT", "/v1/recipients/u1", adminToken, `{}`), 200, "")
	r := plain.do(t, "GET", "/v1/recipients/u1", adminToken, nil)
	if v, ok := r.body["webhook_secret"]; !ok || v != nil {
		t.Fatalf("webhook_secret without a webhook channel = %v (present %v), want null", v, ok)
	}
	expect(t, plain.do(t, "GET", "/v1/webhook-secret", recipientToken(t, "u1"), nil), 404, wire.CodeNotFound)
}
