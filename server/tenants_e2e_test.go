package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// TestEndToEndTwoTenantsShareARecipient: two tenants with their own
// branding and default preferences send to one recipient. Through a token
// with its tenant claim each sees, counts, marks and streams only its own
// inbox; each one's mail arrives in its own brand and From (acme's because
// the recipient's rule scoped to acme beats acme's default "off", globex's
// because globex's default beats the notifier's default "off"); a tenant key
// of one can neither read nor send for the other.
func TestEndToEndTwoTenantsShareARecipient(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDBURL(t)
	smtp := smtpcapture.Start(t)
	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  invoice.paid:
    category: billing
    channels:
      in_app: {title: "{{.Tenant.Name}}: invoice {{.n}} paid"}
      email:
        default: "off"
        subject: "[{{.Tenant.Name}}] Invoice {{.n}} paid"
        text: "Logo {{.Tenant.Branding.LogoURL}}, colour {{.Tenant.Branding.PrimaryColor}}."
channels:
  email:
    from: "Notifications <notify@notifyd.test>"
    smtp:
      - {host: 127.0.0.1, port: %d}
`, smtp.Port()))
	cfg.Database.URL = url
	base := runDaemon(t, cfg)
	call := apiCaller(t, base)
	admin := servertest.AdminToken

	for id, body := range map[string]map[string]any{
		"acme": {"name": "Acme", "branding": map[string]any{"logo_url": "https://acme.test/logo.png",
			"primary_color": "#ff6600", "email_from": "Acme <no-reply@acme.test>"},
			"preferences": []any{map[string]any{"scope": "*", "channel": "email", "mode": "off"}}},
		"globex": {"name": "Globex", "branding": map[string]any{"logo_url": "https://globex.test/g.svg",
			"primary_color": "#0033cc", "email_from": "Globex <hello@globex.test>"},
			"preferences": []any{map[string]any{"scope": "category:billing", "channel": "email", "mode": "immediate"}}},
	} {
		if code, res := call("PUT", "/v1/tenants/"+id, admin, body); code != 201 {
			t.Fatalf("PUT tenant %s = %d %v", id, code, res)
		}
	}
	if code, res := call("PUT", "/v1/recipients/u1", admin, map[string]any{"email": "u1@example.test"}); code != 200 {
		t.Fatalf("PUT recipient = %d %v", code, res)
	}
	// u1's own rule for acme's notifications beats acme's default "off".
	if code, res := call("PUT", "/v1/recipients/u1/preferences?tenant=acme", admin, map[string]any{"rules": []any{
		map[string]any{"scope": "notifier:invoice.paid", "channel": "email", "mode": "immediate"}}}); code != 200 {
		t.Fatalf("PUT preferences = %d %v", code, res)
	}
	mint := func(tenant string) string {
		tok, err := notifyd.TenantRecipientToken(servertest.TokenSecret, "u1", tenant, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	acmeToken, globexToken, plainToken := mint("acme"), mint("globex"), mint("")

	code, res := call("POST", "/v1/tenants/acme/keys", admin, nil)
	if code != 201 {
		t.Fatalf("POST key = %d %v", code, res)
	}
	acmeKey := res["key"].(string)

	send := func(token, key string, tenant any) (int, map[string]any) {
		body := map[string]any{"notifier": "invoice.paid", "key": key, "recipients": []string{"u1"},
			"params": map[string]any{"n": key}}
		if tenant != nil {
			body["tenant"] = tenant
		}
		return call("POST", "/v1/notifications", token, body)
	}
	if code, res := send(acmeKey, "a-1", nil); code != 202 {
		t.Fatalf("acme key send = %d %v", code, res)
	}
	code, res = send(admin, "g-1", "globex")
	if code != 202 {
		t.Fatalf("admin send for globex = %d %v", code, res)
	}
	globexID := res["id"].(string)
	// And from SQL, as an application's transaction sends.
	if _, err := pool.Exec(t.Context(),
		`SELECT * FROM notify_send('invoice.paid', 'a-2', '["u1"]', '{"n": "a-2"}', tenant => 'acme')`); err != nil {
		t.Fatal(err)
	}

	// Each tenant's mail, in its brand.
	var mails map[string]smtpcapture.Message // by tenant name
	servertest.Eventually(t, 30*time.Second, "three emails", func() bool {
		msgs := smtp.Messages()
		mails = map[string]smtpcapture.Message{}
		for _, m := range msgs {
			mails[m.Subject] = m
		}
		return len(msgs) >= 3
	})
	for subject, want := range map[string][]string{
		"[Acme] Invoice a-1 paid":   {"Acme <no-reply@acme.test>", "https://acme.test/logo.png", "#ff6600"},
		"[Acme] Invoice a-2 paid":   {"Acme <no-reply@acme.test>", "https://acme.test/logo.png", "#ff6600"},
		"[Globex] Invoice g-1 paid": {"Globex <hello@globex.test>", "https://globex.test/g.svg", "#0033cc"},
	} {
		m, ok := mails[subject]
		if !ok {
			t.Fatalf("no email %q among %v", subject, mails)
		}
		if from := m.HeaderValue("From"); !strings.Contains(from, strings.Split(want[0], " ")[0]) ||
			!strings.Contains(from, strings.Trim(strings.Split(want[0], " ")[1], "<>")) {
			t.Errorf("%q: From %q, want %s", subject, from, want[0])
		}
		if !strings.Contains(m.Text, want[1]) || !strings.Contains(m.Text, want[2]) {
			t.Errorf("%q: text %q, want its tenant's logo and colour", subject, m.Text)
		}
	}
	if len(smtp.Messages()) != 3 {
		t.Fatalf("%d emails, want 3", len(smtp.Messages()))
	}

	// Each tenant's token sees only its inbox.
	inbox := func(token, query string) []string {
		t.Helper()
		code, res := call("GET", "/v1/inbox"+query, token, nil)
		if code != 200 {
			t.Fatalf("GET /v1/inbox%s = %d %v", query, code, res)
		}
		var titles []string
		for _, it := range res["items"].([]any) {
			titles = append(titles, it.(map[string]any)["title"].(string)+" ("+fmt.Sprint(it.(map[string]any)["tenant"])+")")
		}
		return titles
	}
	if got := strings.Join(inbox(acmeToken, ""), "; "); got != "Acme: invoice a-2 paid (acme); Acme: invoice a-1 paid (acme)" {
		t.Errorf("acme's inbox: %s", got)
	}
	if got := strings.Join(inbox(globexToken, ""), "; "); got != "Globex: invoice g-1 paid (globex)" {
		t.Errorf("globex's inbox: %s", got)
	}
	if got := strings.Join(inbox(plainToken, "?tenant=globex"), "; "); got != "Globex: invoice g-1 paid (globex)" {
		t.Errorf("?tenant=globex: %s", got)
	}
	if got := len(inbox(plainToken, "")); got != 3 {
		t.Errorf("the recipient's whole inbox has %d items, want 3", got)
	}
	if code, res := call("GET", "/v1/inbox?tenant=globex", acmeToken, nil); code != 403 {
		t.Errorf("acme's token asking for globex's inbox = %d %v, want 403", code, res)
	}
	counts := func(token string) float64 {
		_, res := call("GET", "/v1/inbox/counts", token, nil)
		return res["unread"].(float64)
	}
	if a, g := counts(acmeToken), counts(globexToken); a != 2 || g != 1 {
		t.Errorf("unread: acme %v, globex %v; want 2 and 1", a, g)
	}
	// Marking everything read through acme's token leaves globex's unread.
	if code, res := call("POST", "/v1/inbox/read", acmeToken, map[string]any{"all": true}); code != 200 || res["marked"] != float64(2) {
		t.Fatalf("mark all read = %d %v", code, res)
	}
	if a, g := counts(acmeToken), counts(globexToken); a != 0 || g != 1 {
		t.Errorf("after acme's mark all: unread acme %v, globex %v; want 0 and 1", a, g)
	}

	// A stream through acme's token: its counts, and only acme's new items;
	// one through a token without the claim, ?tenant=globex: globex's.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stream := func(token, query string) func() (name, data string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/inbox/stream"+query, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		events := bufio.NewScanner(resp.Body)
		return func() (name, data string) {
			for events.Scan() {
				line := events.Text()
				switch {
				case strings.HasPrefix(line, "event: "):
					name = strings.TrimPrefix(line, "event: ")
				case strings.HasPrefix(line, "data: "):
					data = strings.TrimPrefix(line, "data: ")
				case line == "" && name != "":
					return name, data
				}
			}
			t.Fatalf("the stream ended: %v", events.Err())
			return "", ""
		}
	}
	next := stream(acmeToken, "")
	nextGlobex := stream(plainToken, "?tenant=globex")
	if name, data := nextGlobex(); name != "counts" || !strings.Contains(data, `"unread":1`) {
		t.Fatalf("first event of ?tenant=globex: %s %s, want globex's counts (1 unread)", name, data)
	}
	if name, data := next(); name != "counts" || !strings.Contains(data, `"unread":0`) {
		t.Fatalf("first event %s %s, want acme's counts (0 unread)", name, data)
	}
	if code, res := send(admin, "g-2", "globex"); code != 202 {
		t.Fatalf("send g-2 = %d %v", code, res)
	}
	if code, res := send(acmeKey, "a-3", "acme"); code != 202 {
		t.Fatalf("send a-3 = %d %v", code, res)
	}
	for {
		name, data := next()
		if name == "inbox.created" {
			if !strings.Contains(data, `"title":"Acme: invoice a-3 paid"`) || !strings.Contains(data, `"tenant":"acme"`) {
				t.Fatalf("acme's stream carried %s", data)
			}
			break
		}
		if name != "counts" {
			t.Fatalf("acme's stream carried %s %s", name, data)
		}
	}
	if name, data := next(); name != "counts" || !strings.Contains(data, `"unread":1`) {
		t.Fatalf("after a-3: %s %s, want acme's counts (1 unread)", name, data)
	}
	if name, data := nextGlobex(); name != "inbox.created" || !strings.Contains(data, `"title":"Globex: invoice g-2 paid"`) {
		t.Fatalf("the ?tenant=globex stream carried %s %s, want g-2", name, data)
	}
	if name, data := nextGlobex(); name != "counts" || !strings.Contains(data, `"unread":2`) {
		t.Fatalf("after g-2: %s %s, want globex's counts (2 unread)", name, data)
	}
	if code, res := call("GET", "/v1/inbox/stream?tenant=globex", acmeToken, nil); code != 403 {
		t.Fatalf("acme's token streaming globex = %d %v, want 403", code, res)
	}

	// Acme's key can neither read nor send for globex.
	if code, res := call("GET", "/v1/notifications/"+globexID, acmeKey, nil); code != 403 {
		t.Errorf("acme's key reading globex's notification = %d %v, want 403", code, res)
	}
	if code, res := send(acmeKey, "a-4", "globex"); code != 403 {
		t.Errorf("acme's key sending for globex = %d %v, want 403", code, res)
	}
	if code, res := call("GET", "/v1/deliveries?tenant=globex", acmeKey, nil); code != 403 {
		t.Errorf("acme's key reading globex's ledger = %d %v, want 403", code, res)
	}
	code, res = call("GET", "/v1/deliveries", acmeKey, nil)
	if code != 200 {
		t.Fatalf("acme's key reading its ledger = %d %v", code, res)
	}
	for _, d := range res["items"].([]any) {
		if d := d.(map[string]any); d["tenant"] != "acme" {
			t.Errorf("acme's key read a delivery of %v: %v", d["tenant"], d)
		}
	}
}
