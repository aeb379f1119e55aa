package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// call sends method path with the bearer token and JSON body (nil: none)
// and returns the status and body.
func call(t *testing.T, base, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, got
}

// tenantKeyRoutes are the routes a tenant key may call, confined to its
// tenant; publicRoutes need no credential at all (a key adds nothing).
var (
	tenantKeyRoutes = []string{
		"POST /v1/notifications",
		"GET /v1/notifications",
		"GET /v1/notifications/{id}",
		"GET /v1/deliveries",
		"GET /v1/deliveries/{id}",
		"GET /v1/recipients/{id}/preferences",
		"PUT /v1/recipients/{id}/preferences",
	}
	publicRoutes = []string{
		"GET /healthz", "GET /readyz", "GET /v1/openapi.json", "GET /ui/{file}", "GET /admin/{file...}", "GET /admin",
		"GET /v1/unsubscribe/{token}", "POST /v1/unsubscribe/{token}", "/riverui",
		// Console single sign-on: the session cookie, not a token (server/sso_test.go).
		"GET /admin/sso/login", "GET /admin/sso/callback", "POST /admin/sso/logout",
		// Verified by their own signatures: a provider's event webhook, tracked opens and clicks.
		"POST /v1/providers/{kind}/events", "GET /t/o/{token}", "GET /t/c/{token}",
		"GET /metrics", // open by design, for scrapers on a private network (server/ops.go)
	}
)

// TestTenantKeyReachesNothingElse walks every route the daemon serves (its
// own list, so a route added later is covered without touching this test):
// a tenant key gets a 403 wherever the admin token is needed, a 401 wherever
// a recipient token is, and, on the few routes it may call, a 403 for what
// belongs to another tenant.
func TestTenantKeyReachesNothingElse(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, "")
	cfg.Database.URL = url
	cfg.HTTP.Rate.Admin, cfg.HTTP.Rate.Recipient, cfg.HTTP.Rate.TenantKey = 0, 0, 0
	d, stop := startDaemon(t, cfg)
	t.Cleanup(func() { _ = stop() })
	base := "http://" + d.Addr()
	admin := servertest.AdminToken

	for _, id := range []string{"acme", "globex"} {
		if st, b := call(t, base, "PUT", "/v1/tenants/"+id, admin, map[string]any{"name": id}); st != 201 {
			t.Fatalf("PUT /v1/tenants/%s: %d %s", id, st, b)
		}
	}
	st, b := call(t, base, "POST", "/v1/tenants/acme/keys", admin, nil)
	if st != 201 {
		t.Fatalf("POST /v1/tenants/acme/keys: %d %s", st, b)
	}
	var created struct{ ID, Key string }
	if err := json.Unmarshal(b, &created); err != nil || !strings.HasPrefix(created.Key, "ntk_") {
		t.Fatalf("created key %s (%v)", b, err)
	}
	key := created.Key

	routes := d.Routes()
	if len(routes) < 60 {
		t.Fatalf("the daemon lists %d routes: %v", len(routes), routes)
	}
	for _, want := range append(slices.Clone(tenantKeyRoutes), "GET /v1/inbox/stream", "GET /metrics") {
		if !slices.Contains(routes, want) {
			t.Fatalf("route %q is not in the daemon's list %v", want, routes)
		}
	}
	fill := strings.NewReplacer("{id}", "0190b8a4-0000-7000-8000-000000000000", "{file...}", "index.html",
		"{key...}", "k-1", "{notifier}", "comment.created", "{key_id}", "0190b8a4-0000-7000-8000-000000000001",
		"{topic}", "post-9", "{recipient}", "u2", "{channel}", "email", "{address}", "a@example.test",
		"{token}", "x", "{file}", "x.js", "{path}", "x")
	for _, route := range routes {
		if slices.Contains(tenantKeyRoutes, route) || slices.Contains(publicRoutes, route) {
			continue
		}
		method, path, ok := strings.Cut(route, " ")
		if !ok {
			method, path = "GET", route
		}
		path = fill.Replace(path)
		t.Run(route, func(t *testing.T) {
			// What the admin token gets tells an admin route from a
			// recipient one: a recipient route refuses it as no credential.
			adminStatus, _ := call(t, base, method, path, admin, map[string]any{})
			st, b := call(t, base, method, path, key, map[string]any{})
			want := http.StatusForbidden
			if adminStatus == http.StatusUnauthorized {
				want = http.StatusUnauthorized
			}
			if st != want {
				t.Fatalf("%s %s with a tenant key: %d %s, want %d (the admin token got %d)", method, path, st, b,
					want, adminStatus)
			}
		})
	}

	// The routes it may call, outside its tenant.
	send := func(token, key string, tenant any) (int, []byte) {
		body := map[string]any{"notifier": "comment.created", "key": key, "recipients": []string{"u2"},
			"params": map[string]any{"post_title": "Hi", "author_name": "Ada"}}
		if tenant != nil {
			body["tenant"] = tenant
		}
		return call(t, base, "POST", "/v1/notifications", token, body)
	}
	st, b = send(admin, "globex-1", "globex")
	if st != 202 {
		t.Fatalf("admin send for globex: %d %s", st, b)
	}
	var globex struct{ ID string }
	_ = json.Unmarshal(b, &globex)
	if st, b = send(key, "acme-1", nil); st != 202 {
		t.Fatalf("tenant key send for its tenant: %d %s", st, b)
	}
	var acme struct{ ID string }
	_ = json.Unmarshal(b, &acme)
	// A delivery of globex's (an email, which this config does not send:
	// written here): its ledger row and its preview are not acme's.
	var globexDelivery string
	if err := d.Pool().QueryRow(t.Context(), `
		INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, reason, mode, status, tenant)
		VALUES (gen_random_uuid(), $1, 'comment.created', 'globex-1', 'u2', 'email', 'direct', 'immediate', 'failed', 'globex')
		RETURNING id::text`, globex.ID).Scan(&globexDelivery); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/notifications", map[string]any{"notifier": "comment.created", "key": "acme-2", "tenant": "globex",
			"recipients": []string{"u2"}, "params": map[string]any{"post_title": "Hi", "author_name": "Ada"}}},
		{"GET", "/v1/notifications/" + globex.ID, nil},
		{"GET", "/v1/notifications?tenant=globex", nil},
		{"GET", "/v1/deliveries?tenant=globex", nil},
		{"GET", "/v1/deliveries/" + globexDelivery, nil},
		{"GET", "/v1/deliveries/" + globexDelivery + "/preview", nil},
		{"GET", "/v1/recipients/u2/preferences?tenant=globex", nil},
		{"PUT", "/v1/recipients/u2/preferences", map[string]any{"rules": []any{
			map[string]any{"scope": "*", "channel": "email", "mode": "off", "tenant": "globex"}}}},
	} {
		if st, b := call(t, base, c.method, c.path, key, c.body); st != http.StatusForbidden {
			t.Errorf("%s %s outside the key's tenant: %d %s, want 403", c.method, c.path, st, b)
		}
	}
	if st, b := call(t, base, "GET", "/v1/notifications/"+acme.ID, key, nil); st != 200 ||
		!strings.Contains(string(b), `"tenant":"acme"`) {
		t.Errorf("GET its own notification: %d %s", st, b)
	}
	if st, b := call(t, base, "GET", "/v1/notifications", key, nil); st != 200 ||
		!strings.Contains(string(b), acme.ID) || strings.Contains(string(b), globex.ID) {
		t.Errorf("GET /v1/notifications with acme's key: %d %s, want acme's only", st, b)
	}

	// Revoked, it reaches nothing.
	if st, b := call(t, base, "DELETE", "/v1/tenants/acme/keys/"+created.ID, admin, nil); st != 204 {
		t.Fatalf("revoke: %d %s", st, b)
	}
	if st, b := send(key, "acme-3", nil); st != http.StatusUnauthorized {
		t.Fatalf("send with a revoked key: %d %s, want 401", st, b)
	}
	var stored int
	if err := d.Pool().QueryRow(t.Context(), `SELECT count(*) FROM notify_tenant_keys WHERE hash = sha256($1::bytea)`,
		[]byte(key)).Scan(&stored); err != nil || stored != 1 {
		t.Fatalf("the key's SHA-256 is stored %d times (%v), want once", stored, err)
	}
	if err := d.Pool().QueryRow(t.Context(), `SELECT count(*) FROM notify_tenant_keys WHERE position($1::bytea IN hash) > 0`,
		[]byte(key)).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the key itself is stored (%d rows, %v)", stored, err)
	}
}
