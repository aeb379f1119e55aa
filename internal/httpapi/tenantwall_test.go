package httpapi_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
)

// A tenant named "" or with a control character, and a tenant key's burst
// beyond what the database stores, are the caller's mistakes: 4xx in the
// API's error shape, never a 500, wherever a tenant or a burst is taken.
func TestTenantInputNeverAnswers500(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expectStatus := func(method, path, token string, body any) {
		t.Helper()
		r := b.do(t, method, path, token, body)
		if r.status < 400 || r.status >= 500 || r.errCode() == "" {
			t.Errorf("%s %s %v: %d %s, want a 4xx in the error shape", method, path, body, r.status, r.raw)
		}
	}
	expect(t, b.do(t, "PUT", "/v1/tenants/acme", adminToken, map[string]any{"name": "acme"}), 201, "")
	for _, bad := range []string{"", "a\u0001b", "a\u007fb", "a\u0085b"} {
		expectStatus("POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "k-" + bad,
			"recipients": []string{"u1"}, "params": map[string]any{"post_title": "x", "author_name": "y"}, "tenant": bad})
		expectStatus("PUT", "/v1/tenants/acme", adminToken, map[string]any{"preferences": []any{
			map[string]any{"scope": "*", "channel": "email", "mode": "off", "tenant": bad}}})
		expectStatus("GET", "/v1/deliveries?tenant="+url.QueryEscape(bad), adminToken, nil)
		expectStatus("GET", "/v1/inbox?tenant="+url.QueryEscape(bad), recipientToken(t, "u1"), nil)
	}
	for _, burst := range []any{2147483648, 1e12, -1, 0} {
		expectStatus("POST", "/v1/tenants/acme/keys", adminToken, map[string]any{"burst": burst})
	}
	for _, rate := range []any{0, -1} {
		expectStatus("POST", "/v1/tenants/acme/keys", adminToken, map[string]any{"rate": rate})
	}
}

// A recipient's mutes are theirs across every tenant: neither a token with
// a tenant claim nor a tenant key learns them through the effective
// preferences, while the recipient's own unconfined token does.
func TestConfinedPreferencesShowNoMutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expect(t, b.do(t, "PUT", "/v1/tenants/acme", adminToken, map[string]any{"name": "acme"}), 201, "")
	expect(t, b.do(t, "PUT", "/v1/mutes", recipientToken(t, "u1"), map[string]any{"target": "notifier:comment.created"}), 200, "")
	r := b.do(t, "POST", "/v1/tenants/acme/keys", adminToken, nil)
	expect(t, r, 201, "")
	key := r.body["key"].(string)
	tok, err := notifyd.TenantRecipientTokenAt(tokenSecret, "u1", "acme", time.Hour, fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	muted := func(method, path, token string) bool {
		t.Helper()
		r := b.do(t, method, path, token, nil)
		expect(t, r, 200, "")
		return r.body["effective"].(map[string]any)["comment.created"].(map[string]any)["muted"].(bool)
	}
	if !muted("GET", "/v1/preferences", recipientToken(t, "u1")) {
		t.Fatal("the recipient's own token does not see their mute")
	}
	if muted("GET", "/v1/preferences", tok) {
		t.Error("a token confined to acme sees the recipient's mute")
	}
	if muted("GET", "/v1/recipients/u1/preferences", key) {
		t.Error("acme's tenant key sees the recipient's mute")
	}
}
