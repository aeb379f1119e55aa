package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/webpush"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/internal/testing/pushtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// confinedScoped are the recipient routes a token with a tenant claim may
// call: each acts only on its tenant's part of the recipient (items, rules,
// registrations), or on nothing of a tenant (the VAPID key). Every other
// recipient route refuses such a token with a 403.
var confinedScoped = []string{
	"GET /v1/inbox", "GET /v1/inbox/counts", "GET /v1/inbox/stream",
	"POST /v1/inbox/read", "POST /v1/inbox/unread", "POST /v1/inbox/seen", "POST /v1/inbox/archive",
	"POST /v1/inbox/{id}/clicked", // its tenant's items only; any other is a 404 (TestInboxClicked)
	"GET /v1/preferences", "PUT /v1/preferences",
	"POST /v1/push-subscriptions", "GET /v1/push-subscriptions", "DELETE /v1/push-subscriptions/{id}",
	"GET /v1/push-subscriptions/vapid-key",
	"POST /v1/devices", "GET /v1/devices", "DELETE /v1/devices/{id}",
}

// TestTenantTokenStaysInItsTenant walks every route the daemon serves (its
// own list: a route added later is covered without touching this test)
// with a recipient token confined to tenant acme. The recipient also has
// items of tenant globex, and a push subscription, a device, a mute, quiet
// hours, a topic and a preference rule made without a claim. Each route
// either refuses the token (401 where the admin token is needed, 403 with
// the API's error shape on a recipient route) or is one of confinedScoped:
// then its answer names nothing outside acme, and after the walk nothing
// outside acme has changed.
func TestTenantTokenStaysInItsTenant(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	push := pushtest.New(pub)
	defer push.Close()
	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
channels:
  webhook: {secret: dev-webhook-secret-0123456789abcdef, allow_private: true}
  web_push: {vapid_public_key: %s, vapid_private_key: %s, subject: "mailto:ops@shop.test", allow_private: true}
`, pub, priv))
	cfg.Database.URL = url
	cfg.HTTP.Rate.Admin, cfg.HTTP.Rate.Recipient, cfg.HTTP.Rate.TenantKey = 0, 0, 0
	d, stop := startDaemon(t, cfg)
	t.Cleanup(func() { _ = stop() })
	base := "http://" + d.Addr()
	admin := servertest.AdminToken
	must := func(wantStatus int, method, path, token string, body any) []byte {
		t.Helper()
		st, b := call(t, base, method, path, token, body)
		if st != wantStatus {
			t.Fatalf("%s %s: %d %s, want %d", method, path, st, b, wantStatus)
		}
		return b
	}
	for _, id := range []string{"acme", "globex"} {
		must(201, "PUT", "/v1/tenants/"+id, admin, map[string]any{"name": id})
	}
	acme, err := notifyd.TenantRecipientToken(servertest.TokenSecret, "u1", "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	global, err := notifyd.RecipientToken(servertest.TokenSecret, "u1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// What lies outside acme: globex's item, and what the unconfined token
	// registered and set. Each marker must appear in no answer to acme's
	// token.
	send := func(key, tenant, title string) {
		must(202, "POST", "/v1/notifications", admin, map[string]any{"notifier": "comment.created", "key": key,
			"tenant": tenant, "recipients": []string{"u1"}, "params": map[string]any{"post_title": title, "author_name": "Ada"}})
	}
	send("g-1", "globex", "GLOBEX-ITEM")
	send("a-1", "acme", "acme-item")
	servertest.Eventually(t, 20*time.Second, "both items in the inbox", func() bool {
		_, b := call(t, base, "GET", "/v1/inbox", global, nil)
		return strings.Contains(string(b), "GLOBEX-ITEM") && strings.Contains(string(b), "acme-item")
	})
	globalBrowser := push.Subscribe()
	var reg struct{ ID string }
	_ = json.Unmarshal(must(201, "POST", "/v1/push-subscriptions", global, globalBrowser), &reg)
	globalSub := reg.ID
	globalPhone := strings.Repeat("ab", 32)
	_ = json.Unmarshal(must(201, "POST", "/v1/devices", global,
		map[string]any{"platform": "ios", "token": globalPhone, "app": "com.shop.app"}), &reg)
	globalDevice := reg.ID
	must(200, "PUT", "/v1/mutes", global, map[string]any{"target": "topic:globex-board"})
	must(200, "PUT", "/v1/quiet-hours", global, map[string]any{"quiet_hours": map[string]any{"start": "22:17", "end": "07:00"}})
	must(200, "PUT", "/v1/topics/globex-project/subscribers/u1", admin, map[string]any{"reason": "subscribed"})
	must(200, "PUT", "/v1/preferences", global, map[string]any{"rules": []any{
		map[string]any{"scope": "notifier:comment.created", "channel": "in_app", "mode": "off"}}})
	_, secret := call(t, base, "GET", "/v1/webhook-secret", global, nil)
	var sec struct{ Secret string }
	if err := json.Unmarshal(secret, &sec); err != nil || sec.Secret == "" {
		t.Fatalf("webhook secret: %s", secret)
	}
	// The quiet hours as JSON names them: "22:17" alone is in every
	// timestamp written during that minute.
	markers := []string{"GLOBEX-ITEM", "globex", globalBrowser.Endpoint, globalPhone, "globex-board", `"start":"22:17"`,
		"globex-project", sec.Secret}
	state := func() string {
		t.Helper()
		var out []string
		for _, p := range []string{"/v1/inbox", "/v1/push-subscriptions", "/v1/devices", "/v1/mutes", "/v1/quiet-hours",
			"/v1/subscriptions", "/v1/preferences"} {
			_, b := call(t, base, "GET", p, global, nil)
			var v any
			_ = json.Unmarshal(b, &v)
			if p == "/v1/inbox" { // only globex's items are outside acme
				items := v.(map[string]any)["items"].([]any)
				v = slices.DeleteFunc(items, func(it any) bool { return it.(map[string]any)["tenant"] != "globex" })
			}
			if p == "/v1/push-subscriptions" || p == "/v1/devices" { // acme's registrations are acme's
				key := strings.TrimPrefix(p, "/v1/")
				if key == "push-subscriptions" {
					key = "subscriptions"
				}
				regs := v.(map[string]any)[key].([]any)
				v = slices.DeleteFunc(regs, func(r any) bool { return r.(map[string]any)["tenant"] == "acme" })
			}
			if p == "/v1/preferences" { // acme's scoped rules are acme's
				rules := v.(map[string]any)["rules"].([]any)
				v = slices.DeleteFunc(rules, func(r any) bool { return r.(map[string]any)["tenant"] == "acme" })
			}
			j, _ := json.Marshal(v)
			out = append(out, p+" "+string(j))
		}
		return strings.Join(out, "\n")
	}
	before := state()

	routes := d.Routes()
	for _, want := range confinedScoped {
		if !slices.Contains(routes, want) {
			t.Fatalf("route %q is not in the daemon's list %v", want, routes)
		}
	}
	fill := strings.NewReplacer("{id}", "u1", "{file...}", "index.html",
		"{key...}", "k-1", "{notifier}", "comment.created", "{key_id}", "0190b8a4-0000-7000-8000-000000000001",
		"{topic}", "post-9", "{recipient}", "u1", "{channel}", "email", "{address}", "a@example.test",
		"{token}", "x", "{file}", "x.js", "{path}", "x")
	probe := strings.NewReplacer("{id}", "0190b8a4-0000-7000-8000-000000000000", "{file...}", "index.html",
		"{key...}", "k-1", "{notifier}", "comment.created", "{key_id}", "0190b8a4-0000-7000-8000-000000000001",
		"{topic}", "post-9", "{recipient}", "u9", "{channel}", "email", "{address}", "a@example.test",
		"{token}", "x", "{file}", "x.js", "{path}", "x")
	// What each scoped route is given: the unconfined registrations' ids
	// to delete, every item to mark, a rule to write.
	paths := map[string]string{
		"DELETE /v1/push-subscriptions/{id}": "/v1/push-subscriptions/" + globalSub,
		"DELETE /v1/devices/{id}":            "/v1/devices/" + globalDevice,
	}
	bodies := map[string]any{
		"PUT /v1/preferences": map[string]any{"rules": []any{
			map[string]any{"scope": "*", "channel": "in_app", "mode": "immediate"}}},
		"POST /v1/push-subscriptions": push.Subscribe(),
		"POST /v1/devices":            map[string]any{"platform": "ios", "token": strings.Repeat("cd", 32), "app": "com.shop.app"},
	}
	for _, mark := range []string{"read", "unread", "seen", "archive"} {
		bodies["POST /v1/inbox/"+mark] = map[string]any{"all": true}
	}
	for _, route := range routes {
		if slices.Contains(publicRoutes, route) {
			continue
		}
		method, path, ok := strings.Cut(route, " ")
		if !ok {
			method, path = "GET", route
		}
		if p, ok := paths[route]; ok {
			path = p
		} else {
			path = fill.Replace(path)
		}
		body, ok := bodies[route]
		if !ok {
			body = map[string]any{}
		}
		t.Run(route, func(t *testing.T) {
			if route == "GET /v1/inbox/stream" {
				checkStreamOpens(t, base+path, acme)
				return
			}
			st, b := call(t, base, method, path, acme, body)
			if !slices.Contains(confinedScoped, route) {
				// The admin token's answer tells an admin route from a
				// recipient one; it is asked about nobody's data.
				adminStatus, _ := call(t, base, method, probe.Replace(strings.TrimPrefix(route, method+" ")), admin,
					map[string]any{})
				want := http.StatusForbidden
				if adminStatus != http.StatusUnauthorized {
					want = http.StatusUnauthorized // an admin route: a recipient token is no credential
				}
				if st != want {
					t.Fatalf("%s %s with a token confined to acme: %d %s, want %d", method, path, st, b, want)
				}
				var e struct {
					Error *struct {
						Code    string          `json:"code"`
						Message string          `json:"message"`
						Details json.RawMessage `json:"details"`
					} `json:"error"`
				}
				if err := json.Unmarshal(b, &e); err != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
					t.Fatalf("%s %s: the refusal %s is not the API's error shape", method, path, b)
				}
				return
			}
			for _, m := range markers {
				if strings.Contains(string(b), m) {
					t.Errorf("%s %s with a token confined to acme answered %d naming %q, outside acme: %s",
						method, path, st, m, b)
				}
			}
		})
	}
	if after := state(); after != before {
		t.Errorf("the walk changed what lies outside acme:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// checkStreamOpens opens the stream with token and checks it answers 200
// (what it forwards is TestConfinedStreamForwardsOnlyItsTenantsDeletions's).
func checkStreamOpens(t *testing.T, url, token string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream with a confined token: %d", resp.StatusCode)
	}
}
