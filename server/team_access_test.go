package server_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// staffRoutes is the role each admin route needs, and whether an operator
// confined to tenants may call it (tenant-scoped: it acts on one tenant's
// objects, checked). It is this test's own statement of the policy: a
// route the daemon adds must be listed here, or the walk fails.
var staffRoutes = map[string]struct {
	role   string
	scoped bool
}{
	"POST /v1/notifications":                            {"operator", true},
	"GET /v1/notifications/{id}":                        {"viewer", true},
	"DELETE /v1/notifications/{notifier}/{key...}":      {"operator", false},
	"PUT /v1/recipients/{id}":                           {"admin", false},
	"GET /v1/recipients/{id}":                           {"viewer", false},
	"GET /v1/recipients/{id}/inbox":                     {"viewer", false},
	"DELETE /v1/recipients/{id}":                        {"admin", false},
	"GET /v1/recipients/{id}/preferences":               {"viewer", true},
	"PUT /v1/recipients/{id}/preferences":               {"admin", false},
	"GET /v1/recipients/{id}/mutes":                     {"viewer", false},
	"PUT /v1/recipients/{id}/mutes":                     {"admin", false},
	"DELETE /v1/recipients/{id}/mutes":                  {"admin", false},
	"GET /v1/recipients/{id}/subscriptions":             {"viewer", false},
	"GET /v1/topics/{topic}/subscribers":                {"viewer", false},
	"PUT /v1/topics/{topic}/subscribers/{recipient}":    {"admin", false},
	"DELETE /v1/topics/{topic}/subscribers/{recipient}": {"admin", false},
	"GET /v1/tenants":                                   {"viewer", false},
	"PUT /v1/tenants/{id}":                              {"admin", false},
	"GET /v1/tenants/{id}":                              {"viewer", false},
	"DELETE /v1/tenants/{id}":                           {"admin", false},
	"POST /v1/tenants/{id}/keys":                        {"admin", false},
	"GET /v1/tenants/{id}/keys":                         {"admin", false},
	"DELETE /v1/tenants/{id}/keys/{key_id}":             {"admin", false},
	"GET /v1/notifications":                             {"viewer", true},
	"DELETE /v1/notifications/{id}":                     {"operator", true},
	"GET /v1/deliveries":                                {"viewer", true},
	"POST /v1/deliveries/retry":                         {"operator", true},
	"GET /v1/deliveries/{id}":                           {"viewer", true},
	"POST /v1/deliveries/{id}/retry":                    {"operator", true},
	"GET /v1/deliveries/{id}/preview":                   {"viewer", true},
	"GET /v1/overview":                                  {"viewer", false},
	"GET /v1/recipients/{id}/deliveries":                {"viewer", false},
	"GET /v1/notifiers":                                 {"viewer", true},
	"GET /v1/notifiers/{notifier}/preview/{channel}":    {"viewer", true},
	"GET /v1/suppressions":                              {"viewer", false},
	"PUT /v1/suppressions/{channel}/{address}":          {"operator", false},
	"DELETE /v1/suppressions/{channel}/{address}":       {"operator", false},
	"POST /v1/bounces":                                  {"admin", false},
	"GET /v1/recipients/{id}/devices":                   {"viewer", false},
	"GET /v1/recipients/{id}/quiet-hours":               {"viewer", false},
	"PUT /v1/recipients/{id}/quiet-hours":               {"admin", false},
	"GET /v1/me":                                        {"viewer", true},
	"GET /v1/operators":                                 {"admin", false},
	"PUT /v1/operators/{id}":                            {"admin", false},
	"DELETE /v1/operators/{id}":                         {"admin", false},
	"POST /v1/operator-tokens":                          {"admin", false},
	"GET /v1/operator-tokens":                           {"admin", false},
	"DELETE /v1/operator-tokens/{id}":                   {"admin", false},
	"GET /v1/audit":                                     {"admin", false},
	"/riverui/":                                         {"admin", false},
}

var roleRank = map[string]int{"viewer": 1, "operator": 2, "admin": 3}

// createToken makes an operator token with the admin token and returns it.
func createToken(t *testing.T, base string, body map[string]any) (id, token string) {
	t.Helper()
	st, b := call(t, base, "POST", "/v1/operator-tokens", servertest.AdminToken, body)
	if st != 201 {
		t.Fatalf("POST /v1/operator-tokens %v: %d %s", body, st, b)
	}
	var c struct{ ID, Token string }
	if err := json.Unmarshal(b, &c); err != nil || !strings.HasPrefix(c.Token, "nto_") {
		t.Fatalf("created token %s (%v)", b, err)
	}
	return c.ID, c.Token
}

// TestEachRoleOnEveryAdminRoute walks every route the daemon serves (its own
// list) with an operator token of each role, unconfined and confined to a
// tenant: a route the role reaches is never refused (401/403), one above the
// role is a 403 in the API's error shape, a confined token is refused on
// every route that reaches across tenants, and a recipient route refuses
// every operator token as no credential (401).
func TestEachRoleOnEveryAdminRoute(t *testing.T) {
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
	type cred struct {
		role, token string
		confined    bool
	}
	var creds []cred
	for _, role := range []string{"viewer", "operator", "admin"} {
		_, tok := createToken(t, base, map[string]any{"name": role, "role": role})
		creds = append(creds, cred{role, tok, false})
		_, tok = createToken(t, base, map[string]any{"name": role + " of acme", "role": role, "tenants": []string{"acme"}})
		creds = append(creds, cred{role, tok, true})
	}

	routes := d.Routes()
	probe := strings.NewReplacer("{id}", "0190b8a4-0000-7000-8000-000000000000", "{file...}", "index.html",
		"{key...}", "k-1", "{notifier}", "comment.created", "{key_id}", "0190b8a4-0000-7000-8000-000000000001",
		"{topic}", "post-9", "{recipient}", "u2", "{channel}", "email", "{address}", "a@example.test",
		"{token}", "x", "{file}", "x.js", "{path}", "x")
	walked := 0
	for _, route := range routes {
		if slices.Contains(publicRoutes, route) {
			continue
		}
		method, path, ok := strings.Cut(route, " ")
		if !ok {
			method, path = "GET", route
		}
		path = probe.Replace(path)
		t.Run(route, func(t *testing.T) {
			adminStatus, _ := call(t, base, method, path, admin, map[string]any{})
			rule, listed := staffRoutes[route]
			if !listed {
				if adminStatus != http.StatusUnauthorized {
					t.Fatalf("%s is an admin route (the admin token got %d) that this test does not list in staffRoutes", route, adminStatus)
				}
				// A recipient route: no operator token is a credential.
				for _, c := range creds {
					if st, b := call(t, base, method, path, c.token, map[string]any{}); st != http.StatusUnauthorized {
						t.Errorf("%s with a %s token: %d %s, want 401", route, c.role, st, b)
					}
				}
				return
			}
			walked++
			for _, c := range creds {
				st, b := call(t, base, method, path, c.token, map[string]any{})
				allowed := roleRank[c.role] >= roleRank[rule.role] && (!c.confined || rule.scoped)
				if allowed {
					if st == http.StatusUnauthorized || st == http.StatusForbidden {
						t.Errorf("%s with a %s token (confined %v): %d %s, want it allowed", route, c.role, c.confined, st, b)
					}
					continue
				}
				var e struct {
					Error *struct{ Code, Message string } `json:"error"`
				}
				if st != http.StatusForbidden || json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Code != "forbidden" {
					t.Errorf("%s with a %s token (confined %v): %d %s, want a 403 forbidden", route, c.role, c.confined, st, b)
				}
			}
		})
	}
	if walked < len(staffRoutes) {
		t.Errorf("walked %d admin routes, the table lists %d: a listed route is no longer served", walked, len(staffRoutes))
	}
}

// TestTenantConfinedOperatorSeesOnlyItsTenants: an operator token confined
// to acme reads and cancels acme's notifications and is refused globex's;
// one confined to acme and globex names the tenant it reads.
func TestTenantConfinedOperatorSeesOnlyItsTenants(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, "")
	cfg.Database.URL = url
	cfg.HTTP.Rate.Admin = 0
	d, stop := startDaemon(t, cfg)
	t.Cleanup(func() { _ = stop() })
	base := "http://" + d.Addr()
	admin := servertest.AdminToken
	for _, id := range []string{"acme", "globex"} {
		if st, b := call(t, base, "PUT", "/v1/tenants/"+id, admin, map[string]any{"name": id}); st != 201 {
			t.Fatalf("PUT /v1/tenants/%s: %d %s", id, st, b)
		}
	}
	send := func(token, key, tenant string) (int, string) {
		st, b := call(t, base, "POST", "/v1/notifications", token, map[string]any{"notifier": "comment.created", "key": key,
			"tenant": tenant, "recipients": []string{"u2"}, "send_at": time.Now().Add(time.Hour).Format(time.RFC3339),
			"params": map[string]any{"post_title": "Hi", "author_name": "Ada"}})
		var r struct{ ID string }
		_ = json.Unmarshal(b, &r)
		return st, r.ID
	}
	_, acmeOp := createToken(t, base, map[string]any{"role": "operator", "tenants": []string{"acme"}})
	_, both := createToken(t, base, map[string]any{"role": "viewer", "tenants": []string{"globex", "acme"}})
	_, globexID := send(admin, "g-1", "globex")
	st, acmeID := send(acmeOp, "a-1", "acme")
	if st != 202 {
		t.Fatalf("the acme operator sends for acme: %d", st)
	}
	if st, _ := send(acmeOp, "a-2", "globex"); st != http.StatusForbidden {
		t.Errorf("the acme operator sends for globex: %d, want 403", st)
	}
	if st, b := call(t, base, "GET", "/v1/notifications/"+globexID, acmeOp, nil); st != http.StatusForbidden {
		t.Errorf("the acme operator reads globex's notification: %d %s", st, b)
	}
	if st, b := call(t, base, "GET", "/v1/notifications", acmeOp, nil); st != 200 ||
		!strings.Contains(string(b), acmeID) || strings.Contains(string(b), globexID) {
		t.Errorf("the acme operator's list: %d %s, want acme's only", st, b)
	}
	if st, b := call(t, base, "DELETE", "/v1/notifications/"+globexID+"?notifier=comment.created&key=g-1", acmeOp, nil); st != http.StatusForbidden {
		t.Errorf("the acme operator cancels globex's notification: %d %s", st, b)
	}
	if st, b := call(t, base, "GET", "/v1/notifications/"+globexID, admin, nil); st != 200 || strings.Contains(string(b), `"cancelled"`) {
		t.Errorf("globex's notification after the refused cancel: %d %s", st, b)
	}
	if st, b := call(t, base, "DELETE", "/v1/notifications/"+acmeID+"?notifier=comment.created&key=a-1", acmeOp, nil); st != 200 {
		t.Errorf("the acme operator cancels acme's notification: %d %s", st, b)
	}
	if st, b := call(t, base, "GET", "/v1/notifications", both, nil); st != http.StatusForbidden {
		t.Errorf("a token of two tenants lists without naming one: %d %s, want 403", st, b)
	}
	if st, b := call(t, base, "GET", "/v1/notifications?tenant=globex", both, nil); st != 200 ||
		!strings.Contains(string(b), globexID) || strings.Contains(string(b), acmeID) {
		t.Errorf("a token of two tenants lists globex's: %d %s", st, b)
	}
	if st, b := call(t, base, "GET", "/v1/notifications?tenant=other", both, nil); st != http.StatusForbidden {
		t.Errorf("a token of two tenants lists a third: %d %s, want 403", st, b)
	}
}

// TestOperatorTokenLifecycle: a token is shown once and stored as its
// SHA-256 only, records its last use, stops at once when revoked or
// expired; the break-glass admin token is flagged by /readyz and GET /v1/me.
func TestOperatorTokenLifecycle(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, "")
	cfg.Database.URL = url
	cfg.HTTP.Rate.Admin = 0
	d, stop := startDaemon(t, cfg)
	t.Cleanup(func() { _ = stop() })
	base := "http://" + d.Addr()
	ready := func() string {
		_, b := call(t, base, "GET", "/readyz", "", nil)
		return string(b)
	}
	if r := ready(); strings.Contains(r, "warnings") {
		t.Fatalf("/readyz before the admin token was used: %s", r)
	}
	id, tok := createToken(t, base, map[string]any{"name": "deploy bot", "role": "viewer",
		"expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	if r := ready(); !strings.Contains(r, "break-glass") {
		t.Fatalf("/readyz after the admin token was used: %s, want a break-glass warning", r)
	}
	_, b := call(t, base, "GET", "/v1/me", servertest.AdminToken, nil)
	if !strings.Contains(string(b), `"break_glass":true`) {
		t.Errorf("GET /v1/me with the admin token: %s", b)
	}
	st, b := call(t, base, "GET", "/v1/me", tok, nil)
	if st != 200 || !strings.Contains(string(b), `"actor":"`+id+`"`) || !strings.Contains(string(b), `"role":"viewer"`) ||
		!strings.Contains(string(b), `"break_glass":false`) {
		t.Fatalf("GET /v1/me with the token: %d %s", st, b)
	}
	_, b = call(t, base, "GET", "/v1/operator-tokens", servertest.AdminToken, nil)
	if strings.Contains(string(b), tok) || strings.Contains(string(b), `"token"`) || !strings.Contains(string(b), `"last_used_at":"`) ||
		!strings.Contains(string(b), `"created_by":"admin_token"`) {
		t.Errorf("the token list: %s, want no token, a last use and its creator", b)
	}
	var stored int
	if err := d.Pool().QueryRow(t.Context(), `SELECT count(*) FROM notify_operator_tokens WHERE hash = sha256($1::bytea)`,
		[]byte(tok)).Scan(&stored); err != nil || stored != 1 {
		t.Fatalf("the token's SHA-256 is stored %d times (%v), want once", stored, err)
	}
	// Expired: refused.
	if _, err := d.Pool().Exec(t.Context(), `UPDATE notify_operator_tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if st, b := call(t, base, "GET", "/v1/me", tok, nil); st != 401 || !strings.Contains(string(b), "expired") {
		t.Errorf("an expired token: %d %s, want 401", st, b)
	}
	// Revoked: refused at once.
	id2, tok2 := createToken(t, base, map[string]any{"role": "admin"})
	if st, b := call(t, base, "DELETE", "/v1/operator-tokens/"+id2, tok2, nil); st != 200 || !strings.Contains(string(b), `"revoked_at":"`) {
		t.Fatalf("revoke: %d %s", st, b)
	}
	if st, b := call(t, base, "GET", "/v1/me", tok2, nil); st != 401 || !strings.Contains(string(b), "revoked") {
		t.Errorf("a revoked token: %d %s, want 401", st, b)
	}
	// Bad requests write nothing.
	for _, body := range []map[string]any{{"role": "root"}, {"role": "viewer", "tenants": []string{"nope"}},
		{"role": "viewer", "expires_at": "2001-01-01T00:00:00Z"}} {
		if st, b := call(t, base, "POST", "/v1/operator-tokens", servertest.AdminToken, body); st != 422 {
			t.Errorf("POST /v1/operator-tokens %v: %d %s, want 422", body, st, b)
		}
	}
	if st, b := call(t, base, "GET", "/v1/me", "nto_forged", nil); st != 401 {
		t.Errorf("a forged token: %d %s", st, b)
	}
}

// TestAuditRowPerChange: every audited change made with an operator token
// writes exactly one audit row naming the token, the action, the object
// and the peer; a change that fails (rolled back) writes none; GET
// /v1/audit filters them and exports them as JSON lines.
func TestAuditRowPerChange(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, "")
	cfg.Database.URL = url
	cfg.HTTP.Rate.Admin = 0
	d, stop := startDaemon(t, cfg)
	t.Cleanup(func() { _ = stop() })
	base := "http://" + d.Addr()
	id, tok := createToken(t, base, map[string]any{"name": "ops", "role": "admin"})
	must := func(want int, method, path string, body any) []byte {
		t.Helper()
		st, b := call(t, base, method, path, tok, body)
		if st != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, st, b, want)
		}
		return b
	}
	must(201, "PUT", "/v1/tenants/acme", map[string]any{"name": "Acme"})
	var key struct{ ID string }
	_ = json.Unmarshal(must(201, "POST", "/v1/tenants/acme/keys", nil), &key)
	must(204, "DELETE", "/v1/tenants/acme/keys/"+key.ID, nil)
	must(200, "PUT", "/v1/suppressions/email/ada@example.test", map[string]any{"reason": "complaint"})
	must(200, "DELETE", "/v1/suppressions/email/ada@example.test", nil)
	must(201, "PUT", "/v1/operators/grace@example.test", map[string]any{"role": "viewer"})
	must(204, "DELETE", "/v1/operators/grace@example.test", nil)
	var other struct{ ID string }
	_ = json.Unmarshal(must(201, "POST", "/v1/operator-tokens", map[string]any{"role": "viewer"}), &other)
	must(200, "DELETE", "/v1/operator-tokens/"+other.ID, nil)
	must(202, "POST", "/v1/notifications", map[string]any{"notifier": "comment.created", "key": "c-1", "recipients": []string{"u2"},
		"send_at": time.Now().Add(time.Hour).Format(time.RFC3339), "params": map[string]any{"post_title": "Hi", "author_name": "Ada"}})
	must(200, "DELETE", "/v1/notifications/comment.created/c-1", nil)
	must(200, "POST", "/v1/deliveries/retry?status=failed&since="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), nil)
	must(200, "PUT", "/v1/recipients/u9", map[string]any{"email": "u9@example.test"})
	must(200, "DELETE", "/v1/recipients/u9", nil)
	// The console's test send is audited; a script's send is not.
	req, _ := http.NewRequest("POST", base+"/v1/notifications", strings.NewReader(`{"notifier":"comment.created","key":"c-2",`+
		`"recipients":["u2"],"send_at":"`+time.Now().Add(time.Hour).Format(time.RFC3339)+`","params":{"post_title":"Hi","author_name":"Ada"}}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Notifyd-Console", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("console test send: %v %v", resp, err)
	}
	resp.Body.Close()
	// Failures roll back: no row.
	must(404, "DELETE", "/v1/operator-tokens/0190b8a4-0000-7000-8000-000000000000", nil)
	must(404, "POST", "/v1/tenants/nobody/keys", nil)
	must(404, "DELETE", "/v1/notifications/comment.created/none", nil)

	want := map[string]string{"tenant.put": "acme", "tenant_key.create": "acme", "tenant_key.revoke": "acme/" + key.ID,
		"suppression.add": "email/ada@example.test", "suppression.remove": "email/ada@example.test",
		"operator.put": "grace@example.test", "operator.delete": "grace@example.test",
		"operator_token.create": other.ID, "operator_token.revoke": other.ID, "notification.cancel": "comment.created/c-1",
		"deliveries.retry": "", "recipient.erase": "", "notification.test_send": "comment.created/c-2"}
	rows, err := d.Pool().Query(t.Context(), `SELECT action, object, actor, actor_kind, ip FROM notify_audit WHERE actor <> 'admin_token' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var action, object, actor, kind, ip string
		if err := rows.Scan(&action, &object, &actor, &kind, &ip); err != nil {
			t.Fatal(err)
		}
		got[action]++
		w, ok := want[action]
		if !ok {
			t.Errorf("unexpected audit row %s %s", action, object)
			continue
		}
		if (w != "" && object != w) || actor != id || kind != "operator_token" || ip != "127.0.0.1" {
			t.Errorf("audit row %s: object %q actor %q (%s) ip %q, want object %q actor %q", action, object, actor, kind, ip, w, id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for action := range want {
		if got[action] != 1 {
			t.Errorf("%d audit rows for %s, want exactly 1", got[action], action)
		}
	}
	var erased string
	_ = d.Pool().QueryRow(t.Context(), `SELECT object FROM notify_audit WHERE action = 'recipient.erase'`).Scan(&erased)
	if erased == "u9" || erased == "" {
		t.Errorf("the erasure's audit row names %q, want the pseudonym", erased)
	}

	// GET /v1/audit filters; the export is JSON lines.
	var page struct {
		Items []struct{ Action, Object, Actor string } `json:"items"`
	}
	_ = json.Unmarshal(must(200, "GET", "/v1/audit?action=tenant.put&actor="+id, nil), &page)
	if len(page.Items) != 1 || page.Items[0].Object != "acme" {
		t.Errorf("GET /v1/audit?action=tenant.put: %+v", page.Items)
	}
	_ = json.Unmarshal(must(200, "GET", "/v1/audit?object=acme", nil), &page)
	if len(page.Items) != 2 {
		t.Errorf("GET /v1/audit?object=acme: %+v, want the tenant and its key", page.Items)
	}
	export := must(200, "GET", "/v1/audit?format=jsonl&actor="+id, nil)
	if lines := strings.Count(string(export), "\n"); lines != len(want) {
		t.Errorf("the export has %d lines, want %d: %s", lines, len(want), export)
	}
	if viewerSt, _ := call(t, base, "GET", "/v1/audit", func() string {
		_, v := createToken(t, base, map[string]any{"role": "viewer"})
		return v
	}(), nil); viewerSt != 403 {
		t.Errorf("a viewer reads the audit log: %d", viewerSt)
	}
}
