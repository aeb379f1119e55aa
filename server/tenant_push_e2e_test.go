package server_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/webpush"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/internal/testing/pushtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// Push subscriptions and devices registered through a token confined to a
// tenant are pushed that tenant's notifications and no other: acme's
// browser and phone never see globex's notification or one of no tenant; a
// browser and phone registered without a tenant claim see all three. A
// recipient whose only registrations are acme's is unavailable on both
// channels for globex's notification, as one without any is.
func TestPushRegistrationsStayInTheirTenant(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	smtp := smtpcapture.Start(t)
	fcm, _, sections := mobileServices(t, 10*time.Second)
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	push := pushtest.New(pub)
	defer push.Close()
	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  order.shipped:
    channels:
      web_push: {title: "Order {{.order}} shipped", body: "On its way"}
      fcm: {title: "Order {{.order}} shipped", body: "On its way"}
channels:
  email:
    from: "Shop <shop@shop.test>"
    smtp: {host: 127.0.0.1, port: %d}
  web_push: {vapid_public_key: %s, vapid_private_key: %s, subject: "mailto:ops@shop.test", allow_private: true}
%s`, smtp.Port(), pub, priv, sections))
	cfg.Database.URL = url
	call := apiCaller(t, runDaemon(t, cfg))

	for _, tenant := range []string{"acme", "globex"} {
		if code, res := call("PUT", "/v1/tenants/"+tenant, servertest.AdminToken, map[string]any{"name": tenant}); code != 201 {
			t.Fatalf("PUT tenant %s = %d %v", tenant, code, res)
		}
	}
	acmeTok, err := notifyd.TenantRecipientToken(servertest.TokenSecret, "u1", "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	globalTok, err := notifyd.RecipientToken(servertest.TokenSecret, "u1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	onlyAcme, err := notifyd.TenantRecipientToken(servertest.TokenSecret, "u2", "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	acmeBrowser, globalBrowser, u2Browser := push.Subscribe(), push.Subscribe(), push.Subscribe()
	acmePhone, globalPhone, u2Phone := fcm.Register(), fcm.Register(), fcm.Register()
	for _, reg := range []struct {
		tok  string
		path string
		body any
	}{
		{acmeTok, "/v1/push-subscriptions", acmeBrowser},
		{globalTok, "/v1/push-subscriptions", globalBrowser},
		{onlyAcme, "/v1/push-subscriptions", u2Browser},
		{acmeTok, "/v1/devices", map[string]any{"platform": "android", "token": acmePhone, "app": bundleID}},
		{globalTok, "/v1/devices", map[string]any{"platform": "android", "token": globalPhone, "app": bundleID}},
		{onlyAcme, "/v1/devices", map[string]any{"platform": "android", "token": u2Phone, "app": bundleID}},
	} {
		if code, res := call("POST", reg.path, reg.tok, reg.body); code != 201 {
			t.Fatalf("POST %s = %d %v", reg.path, code, res)
		}
	}
	// The confined token lists its tenant's registrations only; the
	// unconfined one lists both, each with its tenant.
	if _, res := call("GET", "/v1/push-subscriptions", acmeTok, nil); len(res["subscriptions"].([]any)) != 1 ||
		res["subscriptions"].([]any)[0].(map[string]any)["tenant"] != "acme" {
		t.Errorf("acme token lists %v", res)
	}
	if _, res := call("GET", "/v1/devices", globalTok, nil); len(res["devices"].([]any)) != 2 {
		t.Errorf("unconfined token lists %v", res)
	}

	send := func(key, tenant string) string {
		t.Helper()
		body := map[string]any{"notifier": "order.shipped", "key": key, "recipients": []any{"u1", "u2"},
			"params": map[string]any{"order": key}}
		if tenant != "" {
			body["tenant"] = tenant
		}
		code, res := call("POST", "/v1/notifications", servertest.AdminToken, body)
		if code != 202 {
			t.Fatalf("POST notification = %d %v", code, res)
		}
		return res["id"].(string)
	}
	pushedTo := func(order string) (browsers, phones []string) {
		for _, m := range push.Messages() {
			if strings.Contains(string(m.Plaintext), "Order "+order+" shipped") {
				browsers = append(browsers, m.Endpoint)
			}
		}
		for _, m := range fcm.Messages() {
			if m.Title == "Order "+order+" shipped" {
				phones = append(phones, m.Token)
			}
		}
		slices.Sort(browsers)
		slices.Sort(phones)
		return browsers, phones
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }

	for _, c := range []struct {
		key, tenant     string
		browsers, phone []string
		u2              string // u2's status on both channels
	}{
		{"globex-1", "globex", sorted(globalBrowser.Endpoint), sorted(globalPhone), "unavailable"},
		{"none-1", "", sorted(globalBrowser.Endpoint), sorted(globalPhone), "unavailable"},
		{"acme-1", "acme", sorted(acmeBrowser.Endpoint, globalBrowser.Endpoint, u2Browser.Endpoint),
			sorted(acmePhone, globalPhone, u2Phone), "sent"},
	} {
		id := send(c.key, c.tenant)
		servertest.Eventually(t, 20*time.Second, c.key+": u1 sent on both channels, u2 "+c.u2, func() bool {
			rows := ledger(t, call, id)
			return strings.HasPrefix(rows["u1/web_push"], "sent") && strings.HasPrefix(rows["u1/fcm"], "sent") &&
				strings.HasPrefix(rows["u2/web_push"], c.u2) && strings.HasPrefix(rows["u2/fcm"], c.u2)
		})
		servertest.Eventually(t, 10*time.Second, c.key+": pushes arrived", func() bool {
			b, p := pushedTo(c.key)
			return len(b) >= len(c.browsers) && len(p) >= len(c.phone)
		})
		if b, p := pushedTo(c.key); !slices.Equal(b, c.browsers) || !slices.Equal(p, c.phone) {
			t.Errorf("%s (tenant %q) pushed to browsers %v, phones %v; want %v, %v", c.key, c.tenant, b, p, c.browsers, c.phone)
		}
	}
	if f := append(push.Failures(), fcm.Failures()...); len(f) > 0 {
		t.Errorf("push services refused: %v", f)
	}
}
