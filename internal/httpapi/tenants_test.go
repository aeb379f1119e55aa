package httpapi_test

import (
	"context"

	"github.com/jackc/pgx/v5"

	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/wire"
)

// Tenants are checked before anything is written: the id, the branding's
// fields, default rules (no tenant of their own); a tenant that does not
// exist cannot be named by a rule or a filter.
func TestTenantInputIsChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		path  string
		body  any
		field string
	}{
		{"/v1/tenants/a%01b", map[string]any{"name": "x"}, "id"},
		{"/v1/tenants/" + strings.Repeat("a", 256), map[string]any{"name": "x"}, "id"},
		{"/v1/tenants/acme", map[string]any{"branding": map[string]any{"logo_url": "javascript:alert(1)"}}, "branding.logo_url"},
		{"/v1/tenants/acme", map[string]any{"branding": map[string]any{"email_from": "not an address"}}, "branding.email_from"},
		{"/v1/tenants/acme", map[string]any{"branding": map[string]any{"colour": "#fff"}}, "branding.colour"},
		{"/v1/tenants/acme", map[string]any{"preferences": []any{map[string]any{"scope": "*", "channel": "email", "mode": "loud"}}}, "preferences[0].mode"},
		{"/v1/tenants/acme", map[string]any{"preferences": []any{map[string]any{"scope": "*", "channel": "email", "mode": "off", "tenant": "x"}}}, "preferences[0].tenant"},
	} {
		r := b.do(t, "PUT", c.path, adminToken, c.body)
		if r.status != 400 && r.status != 422 {
			t.Fatalf("PUT %s %v: %d %s, want 400 or 422", c.path, c.body, r.status, r.raw)
		}
		if d := r.errDetails(); len(d) == 0 || d[0].(map[string]any)["field"] != c.field {
			t.Errorf("PUT %s %v: details %v, want field %s", c.path, c.body, d, c.field)
		}
	}
	if n := countRows(t, b.pool, `SELECT count(*) FROM notify_tenants`); n != 0 {
		t.Fatalf("%d tenants written by refused requests", n)
	}
	r := b.do(t, "PUT", "/v1/recipients/u1/preferences", adminToken, map[string]any{"rules": []any{
		map[string]any{"scope": "*", "channel": "email", "mode": "off", "tenant": "nobody"}}})
	expect(t, r, 422, wire.CodeInvalidRequest)
	if n := countRows(t, b.pool, `SELECT count(*) FROM notify_tenant_preferences`); n != 0 {
		t.Fatalf("%d scoped rules written for an unknown tenant", n)
	}
	expect(t, b.do(t, "GET", "/v1/inbox?tenant=a%01b", recipientToken(t, "u1"), nil), 400, wire.CodeBadRequest)
}

// A recipient's rules scoped to a tenant are listed and replaced per tenant;
// the effective map for the tenant reads its defaults and those rules, and
// a token with a tenant claim reaches only its tenant's.
func TestTenantScopedPreferences(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"acme", "globex"} {
		expect(t, b.do(t, "PUT", "/v1/tenants/"+id, adminToken, map[string]any{"name": id,
			"preferences": []any{map[string]any{"scope": "*", "channel": "in_app", "mode": "off"}}}), 201, "")
	}
	r := b.do(t, "PUT", "/v1/recipients/u1/preferences", adminToken, map[string]any{"rules": []any{
		map[string]any{"scope": "notifier:comment.created", "channel": "in_app", "mode": "immediate"},
		map[string]any{"scope": "*", "channel": "in_app", "mode": "off", "tenant": "acme"},
		map[string]any{"scope": "notifier:other", "channel": "*", "mode": "off", "tenant": "globex"}}})
	expect(t, r, 200, "")
	if rules := r.body["rules"].([]any); len(rules) != 3 {
		t.Fatalf("rules %v, want all three", rules)
	}

	acme := func(token string) response {
		return b.do(t, "GET", "/v1/preferences", token, nil)
	}
	tok, err := notifyd.TenantRecipientTokenAt(tokenSecret, "u1", "acme", time.Hour, fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	r = acme(tok)
	expect(t, r, 200, "")
	if rules := r.body["rules"].([]any); len(rules) != 1 || rules[0].(map[string]any)["tenant"] != "acme" {
		t.Fatalf("acme's token lists %v, want acme's one rule", rules)
	}
	inApp := func(r response) any {
		t.Helper()
		expect(t, r, 200, "")
		return r.body["effective"].(map[string]any)["comment.created"].(map[string]any)["channels"].(map[string]any)["in_app"]
	}
	// acme's scoped "*" off beats the more specific global rule.
	if got := inApp(r); got != "off" {
		t.Fatalf("acme: in_app %v, want off (the rule scoped to acme)", got)
	}
	// globex's default off loses to the global rule (globex's scoped rule
	// does not apply to this notifier).
	if got := inApp(b.do(t, "GET", "/v1/preferences?tenant=globex", recipientToken(t, "u1"), nil)); got != "immediate" {
		t.Fatalf("globex: in_app %v, want immediate (the global rule beats globex's default)", got)
	}
	if got := inApp(b.do(t, "GET", "/v1/preferences", recipientToken(t, "u1"), nil)); got != "immediate" {
		t.Fatalf("without a tenant: in_app %v, want immediate", got)
	}
	expect(t, b.do(t, "DELETE", "/v1/tenants/nobody", adminToken, nil), 404, wire.CodeNotFound)

	// acme's token replaces acme's rules only; naming globex is a 403.
	expect(t, b.do(t, "PUT", "/v1/preferences", tok, map[string]any{"rules": []any{
		map[string]any{"scope": "*", "channel": "email", "mode": "off", "tenant": "globex"}}}), http.StatusForbidden, wire.CodeForbidden)
	expect(t, b.do(t, "PUT", "/v1/preferences", tok, map[string]any{"rules": []any{
		map[string]any{"scope": "*", "channel": "email", "mode": "digest"}}}), 200, "")
	got := countRows(t, b.pool, `SELECT count(*) FROM notify_tenant_preferences WHERE tenant = 'acme' AND channel = 'email' AND mode = 'digest'`) +
		10*countRows(t, b.pool, `SELECT count(*) FROM notify_tenant_preferences WHERE tenant = 'globex'`) +
		100*countRows(t, b.pool, `SELECT count(*) FROM notify_preferences WHERE recipient = 'u1'`)
	if got != 111 {
		t.Fatalf("after acme's PUT: %d (want acme's new rule 1, globex's kept 10, the global kept 100)", got)
	}
	expect(t, b.do(t, "GET", "/v1/preferences?tenant=globex", tok, nil), http.StatusForbidden, wire.CodeForbidden)
}

// A tenant key has its own token bucket: with rate and burst of its own, the
// second request in a row is a 429 with Retry-After, and the admin token is
// not held back by it.
func TestTenantKeyRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expect(t, b.do(t, "PUT", "/v1/tenants/acme", adminToken, map[string]any{"name": "Acme"}), 201, "")
	r := b.do(t, "POST", "/v1/tenants/acme/keys", adminToken, map[string]any{"rate": 0.001, "burst": 1})
	expect(t, r, 201, "")
	key := r.body["key"].(string)
	expect(t, b.do(t, "GET", "/v1/deliveries", key, nil), 200, "")
	r = b.do(t, "GET", "/v1/deliveries", key, nil)
	expect(t, r, http.StatusTooManyRequests, wire.CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	expect(t, b.do(t, "GET", "/v1/deliveries", adminToken, nil), 200, "")
	expect(t, b.do(t, "POST", "/v1/tenants/acme/keys", adminToken, map[string]any{"rate": 0}), 422, wire.CodeInvalidRequest)
	expect(t, b.do(t, "POST", "/v1/tenants/nobody/keys", adminToken, nil), 404, wire.CodeNotFound)
}

func countRows(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
