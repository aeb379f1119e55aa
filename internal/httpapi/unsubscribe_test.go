package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/channels/unsubscribe"
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
	tok, err := s.Sign(unsubscribe.Token{Channel: "email", Recipient: recipient, Scopes: scopes})
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
	foreign, _ := other.Sign(unsubscribe.Token{Channel: "email", Recipient: "u2", Scopes: []string{"category:comments"}})
	s, _ := unsubscribe.NewSigner(tokenSecret)
	unknown, _ := s.Sign(unsubscribe.Token{Channel: "pager", Recipient: "u2", Scopes: []string{"category:comments"}})
	badScope, _ := s.Sign(unsubscribe.Token{Channel: "email", Recipient: "u2", Scopes: []string{"everything"}})
	tampered := []byte(tok)
	tampered[3] ^= 1
	for _, bad := range []string{foreign, unknown, badScope, string(tampered), tok[:len(tok)-2], "x"} {
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
