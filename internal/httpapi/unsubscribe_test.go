package httpapi_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels/unsubscribe"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/wire"
)

// unsubscribeToken mints the token of a List-Unsubscribe link for recipient
// on the email channel, as the email channel does.
func unsubscribeToken(t *testing.T, recipient string, scopes ...string) string {
	t.Helper()
	s, err := unsubscribe.NewSigner(tokenSecret)
	if err != nil {
		t.Fatal(err)
	}
	// Issued an hour before the test server's clock, valid for the default.
	tok, err := s.Sign(unsubscribe.Token{Channel: "email", Recipient: recipient, Scopes: scopes, IssuedAt: fixedNow.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// emailConfig is testConfig with the email channel configured, so rules on
// it are valid and the effective preferences list it.
const emailTestConfig = testConfig + `      email: {subject: "s", text: "t"}
  security.login:
    category: security
    required: true
    channels:
      email: {subject: "s", text: "t"}
channels:
  email: {from: "a@acme.test", smtp: {host: 127.0.0.1, port: 25}, unsubscribe_url: "https://notify.acme.test"}
`

func TestOneClickUnsubscribe(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: emailTestConfig})
	tok := unsubscribeToken(t, "u/1", "category:comments")
	path := "/v1/unsubscribe/" + tok

	// GET shows the page and changes nothing.
	r := b.raw(t, "GET", path, nil, nil)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(r.raw), `<form method="post">`) || !strings.Contains(string(r.raw), "comments") {
		t.Fatalf("GET page: %d %s %s", r.status, r.header.Get("Content-Type"), r.raw)
	}
	checkPageHeaders(t, r)
	if n := count(t, b.pool, `SELECT count(*) FROM notify_preferences`); n != 0 {
		t.Fatalf("GET wrote %d rules", n)
	}

	// RFC 8058's POST, as a mailbox provider sends it (multipart).
	body := "--XyZ\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--XyZ--\r\n"
	r = b.raw(t, "POST", path, strings.NewReader(body), http.Header{"Content-Type": {"multipart/form-data; boundary=XyZ"}})
	if r.status != 200 || r.body["unsubscribed"] != true {
		t.Fatalf("POST: %d %s", r.status, r.raw)
	}
	checkPageHeaders(t, r)
	prefs := b.do(t, "GET", "/v1/preferences", recipientToken(t, "u/1"), nil)
	expect(t, prefs, 200, "")
	rules, _ := json.Marshal(prefs.body["rules"])
	if string(rules) != `[{"channel":"email","mode":"off","scope":"category:comments"}]` {
		t.Fatalf("rules after unsubscribe: %s", rules)
	}
	eff := prefs.body["effective"].(map[string]any)
	if m := eff["comment.created"].(map[string]any)["channels"].(map[string]any)["email"]; m != "off" {
		t.Errorf("effective email of comment.created = %v, want off", m)
	}
	if m := eff["security.login"].(map[string]any)["channels"].(map[string]any)["email"]; m != "immediate" {
		t.Errorf("effective email of the required notifier = %v, want immediate", m)
	}

	// Form-encoded and empty bodies work too; other rules are kept; a
	// browser gets a page.
	put := b.do(t, "PUT", "/v1/preferences", recipientToken(t, "u/1"), map[string]any{"rules": []any{
		map[string]any{"scope": "*", "channel": "in_app", "mode": "off"}}})
	expect(t, put, 200, "")
	r = b.raw(t, "POST", path, strings.NewReader("List-Unsubscribe=One-Click"),
		http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Accept": {"text/html"}})
	if r.status != 200 || !strings.Contains(string(r.raw), "You are unsubscribed") {
		t.Fatalf("form POST: %d %s", r.status, r.raw)
	}
	expect(t, b.do(t, "POST", path, "", nil), 200, "")
	if n := count(t, b.pool, `SELECT count(*) FROM notify_preferences WHERE recipient = 'u/1'`); n != 2 {
		t.Fatalf("%d rules, want the in_app one and the unsubscribe", n)
	}

	// Tampered, foreign, or for another channel than registered: 404 in the
	// API's error shape, nothing written.
	other, _ := unsubscribe.NewSigner("another-secret-0123456789abcdef012345")
	issued := fixedNow.Add(-time.Hour)
	foreign, _ := other.Sign(unsubscribe.Token{Channel: "email", Recipient: "u2", Scopes: []string{"category:comments"}, IssuedAt: issued})
	s, _ := unsubscribe.NewSigner(tokenSecret)
	unknown, _ := s.Sign(unsubscribe.Token{Channel: "pager", Recipient: "u2", Scopes: []string{"category:comments"}, IssuedAt: issued})
	badScope, _ := s.Sign(unsubscribe.Token{Channel: "email", Recipient: "u2", Scopes: []string{"everything"}, IssuedAt: issued})
	expired, _ := s.Sign(unsubscribe.Token{Channel: "email", Recipient: "u2", Scopes: []string{"category:comments"},
		IssuedAt: fixedNow.Add(-unsubscribe.DefaultTTL - time.Hour)})
	tampered := []byte(tok)
	tampered[3] ^= 1
	for _, bad := range []string{foreign, unknown, badScope, expired, string(tampered), tok[:len(tok)-2], "x"} {
		for _, m := range []string{"GET", "POST"} {
			r := b.do(t, m, "/v1/unsubscribe/"+bad, "", nil)
			expect(t, r, 404, wire.CodeNotFound)
			checkPageHeaders(t, r)
		}
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_preferences WHERE recipient <> 'u/1'`); n != 0 {
		t.Fatalf("a bad token wrote %d rules", n)
	}
	// A body that says something else is refused.
	expect(t, b.do(t, "POST", path, "", "List-Unsubscribe=No"), 400, wire.CodeBadRequest)
}

func checkPageHeaders(t *testing.T, r response) {
	t.Helper()
	if r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("Cache-Control") != "no-store" ||
		!slices.Contains(r.header.Values("Content-Security-Policy"), "frame-ancestors 'none'") ||
		r.header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("headers %v: want no framing, no-store, no referrer", r.header)
	}
}

// raw sends a request with the given body and headers and decodes a JSON
// answer.
func (b *bundle) raw(t *testing.T, method, path string, body io.Reader, h http.Header) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := response{status: resp.StatusCode, header: resp.Header, raw: data}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(data, &out.body)
	}
	return out
}

// An unsubscribe link minted before its recipient was erased writes nothing
// (the erased recipient's settings do not come back) and is a 404; one
// minted after the erasure works. Each valid link spends one of the
// recipient's http.rate.recipient tokens. The request log shows no token.
func TestUnsubscribeAfterErasureRateLimitAndLogs(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	var mu sync.Mutex
	b := setup(t, setupOpts{yaml: emailTestConfig, options: func(o *httpapi.Options) {
		o.Config.HTTP.Rate = config.Rate{Recipient: 0.001, RecipientBurst: 2, Admin: 0, AdminBurst: 1}
		o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	}})
	// Dated by the real clock, as the erasure is (the server's is fixed).
	s, _ := unsubscribe.NewSigner(tokenSecret)
	before, _ := s.Sign(unsubscribe.Token{Channel: "email", Recipient: "gone", Scopes: []string{"category:comments"},
		IssuedAt: time.Now().Add(-time.Hour), Expires: fixedNow.Add(time.Hour)})
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO notify_preferences (recipient, scope, channel, mode) VALUES ('gone', '*', 'in_app', 'off')`); err != nil {
		t.Fatal(err)
	}
	expect(t, b.do(t, "DELETE", "/v1/recipients/gone", adminToken, nil), 200, "")
	expect(t, b.do(t, "POST", "/v1/unsubscribe/"+before, "", nil), 404, wire.CodeNotFound)
	if n := count(t, b.pool, `SELECT count(*) FROM notify_preferences WHERE recipient = 'gone'`); n != 0 {
		t.Fatalf("an unsubscribe after the erasure wrote %d rules back", n)
	}
	after, _ := s.Sign(unsubscribe.Token{Channel: "email", Recipient: "gone", Scopes: []string{"category:comments"},
		IssuedAt: time.Now().Add(time.Minute), Expires: fixedNow.Add(time.Hour)}) // after the erasure's now()
	expect(t, b.do(t, "POST", "/v1/unsubscribe/"+after, "", nil), 200, "")

	// The burst of 2 is spent (the 404 above verified too): a third is 429.
	tok := unsubscribeToken(t, "u7", "category:comments")
	if r := b.raw(t, "GET", "/v1/unsubscribe/"+tok, nil, nil); r.status != 200 {
		t.Fatalf("GET page: %d", r.status)
	}
	expect(t, b.do(t, "POST", "/v1/unsubscribe/"+tok, "", nil), 200, "")
	r := b.do(t, "POST", "/v1/unsubscribe/"+tok, "", nil)
	expect(t, r, 429, wire.CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, full := range []string{before, after, tok} {
		if strings.Contains(logs.String(), full) || strings.Contains(logs.String(), full[8:20]) {
			t.Fatalf("the request log shows an unsubscribe token:\n%s", logs.String())
		}
	}
	if !strings.Contains(logs.String(), "/v1/unsubscribe/"+tok[:8]+"…") {
		t.Fatalf("the request log does not show the shortened token:\n%s", logs.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
