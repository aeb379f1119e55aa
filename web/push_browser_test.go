package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/notifyd/notifyd/channels/webpush"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/internal/testing/pushtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// TestBrowserDesktopNotifications drives "Enable desktop notifications" in
// headless Chromium against a real daemon: the permission (granted through
// the DevTools protocol, as a user would click Allow), the service worker
// registration from /ui/notifyd-sw.js, the VAPID key fetched from the API and
// the subscription posted to it. Headless Chromium has no push service to
// subscribe at, so when pushManager.subscribe fails the test stands one in:
// it answers what a browser would, a subscription at a local push service
// (pushtest) with keys the test holds, and checks that the component posts
// exactly what pushManager returned. A notification then sent through the
// daemon reaches that push service and decrypts. Finally a push event is
// dispatched in the service worker itself, which must show it.
func TestBrowserDesktopNotifications(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	ctx := browserContext(t)

	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	push := pushtest.New(pub)
	defer push.Close()
	_, dbURL := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  order.shipped:
    channels:
      in_app: {title: "Order {{.order}} shipped"}
      web_push: {title: "Order {{.order}} shipped", url: "https://shop.test/orders/{{.order}}"}
channels:
  web_push: {vapid_public_key: %s, vapid_private_key: %s, subject: "mailto:ops@shop.test", allow_private: true}
`, pub, priv))
	cfg.Database.URL = dbURL
	d := startDemoDaemon(t, ctx, cfg, nil)
	api, token := d.api, d.token

	b := startBrowser(t, bin)
	if _, err := b.call(ctx, "", "Browser.grantPermissions", map[string]any{
		"origin": api.base, "permissions": []string{"notifications"}}); err != nil {
		t.Fatal(err)
	}
	p := b.newPage(ctx)
	p.navigate(ctx, api.base+"/dev/demo")
	p.eval(ctx, `(() => { window.__push = []; document.addEventListener("notifyd:push", (e) => window.__push.push(e.detail));
		document.addEventListener("notifyd:error", (e) => window.__push.push({error: e.detail})); return true; })()`, nil)

	// Can this Chromium subscribe for real? Without a push service it cannot.
	var real struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	p.eval(ctx, `(async () => {
		const reg = await navigator.serviceWorker.register("/ui/notifyd-sw.js");
		try {
			const key = await (await fetch("/v1/push-subscriptions/vapid-key", {headers: {Authorization: "Bearer `+token+`"}})).json();
			const b = Uint8Array.from(atob(key.public_key.replace(/-/g, "+").replace(/_/g, "/") + "="), (c) => c.charCodeAt(0));
			// Without a reachable push service the promise may never settle.
			const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("no answer within 3 s")), 3000));
			await Promise.race([reg.pushManager.subscribe({userVisibleOnly: true, applicationServerKey: b}), timeout]);
			return {ok: true};
		} catch (e) { return {ok: false, error: String(e)}; }
	})()`, &real)
	browserSub := push.Subscribe()
	if real.OK {
		t.Log("Chromium subscribed at a real push service; the posted subscription is its own")
	} else {
		t.Logf("Chromium cannot subscribe without a push service (%s): pushManager answers a local push service's subscription", real.Error)
		subJSON, _ := json.Marshal(browserSub)
		p.eval(ctx, `(() => { const sub = `+string(subJSON)+`;
			window.__subscribed = null;
			PushManager.prototype.getSubscription = async () => null;
			PushManager.prototype.subscribe = async function (opts) {
				window.__subscribed = {userVisibleOnly: opts.userVisibleOnly, key: btoa(String.fromCharCode(...new Uint8Array(opts.applicationServerKey)))};
				return {endpoint: sub.endpoint, expirationTime: null, options: opts, toJSON: () => sub, unsubscribe: async () => true};
			};
			return true; })()`, nil)
	}

	// The offer is in the panel's header; a click enables it.
	p.click(ctx, in(`$(".bell")`))
	p.waitFor(ctx, "the offer to show", in(`!$(".panel").hidden && !$(".push").hidden`), in(`$(".push").outerText`))
	p.click(ctx, in(`$(".push")`))
	p.waitFor(ctx, "notifyd:push enabled", `window.__push.some((d) => d.state === "enabled")`, `JSON.stringify(window.__push)`)
	var btn string
	p.eval(ctx, in(`$(".push").textContent + "/" + $(".push").disabled`), &btn)
	if btn != "Desktop notifications on/true" {
		t.Errorf("button after enabling: %q", btn)
	}

	// The service worker registered from /ui/ and is active.
	var sw string
	p.eval(ctx, `navigator.serviceWorker.getRegistration("/ui/").then((r) => r && r.active ? r.active.scriptURL : "none")`, &sw)
	if sw != api.base+"/ui/notifyd-sw.js" {
		t.Errorf("active service worker = %q, want %s/ui/notifyd-sw.js", sw, api.base)
	}
	if !real.OK {
		// subscribe was asked with the daemon's key, user-visible.
		var asked struct {
			UserVisibleOnly bool   `json:"userVisibleOnly"`
			Key             string `json:"key"`
		}
		p.eval(ctx, `window.__subscribed`, &asked)
		raw, _ := webpush.DecodeBase64URL(pub)
		if key, _ := webpush.DecodeBase64URL(asked.Key); !asked.UserVisibleOnly || string(key) != string(raw) {
			t.Errorf("pushManager.subscribe was asked %+v, want userVisibleOnly and the VAPID key", asked)
		}
	}

	// The API has what the browser posted.
	var list struct {
		Subscriptions []struct {
			ID       string `json:"id"`
			Endpoint string `json:"endpoint"`
		} `json:"subscriptions"`
	}
	if code := api.do("GET", "/v1/push-subscriptions", token, nil, &list); code != 200 || len(list.Subscriptions) != 1 {
		t.Fatalf("GET /v1/push-subscriptions = %d %+v", code, list)
	}
	if real.OK {
		return // a real push service's endpoint: nothing here can receive from it
	}
	if list.Subscriptions[0].Endpoint != browserSub.Endpoint {
		t.Fatalf("posted endpoint %q, want %q", list.Subscriptions[0].Endpoint, browserSub.Endpoint)
	}

	// A notification reaches the subscription the browser registered.
	if code := api.do("POST", "/v1/notifications", servertest.AdminToken, map[string]any{
		"notifier": "order.shipped", "key": "o-7", "recipients": []any{"u2"}, "params": map[string]any{"order": "7"}}, nil); code != 202 {
		t.Fatalf("send = %d", code)
	}
	servertest.Eventually(t, left(ctx), "the push to be decrypted", func() bool { return push.Count() == 1 })
	var payload map[string]string
	if err := json.Unmarshal(push.Messages()[0].Plaintext, &payload); err != nil || payload["title"] != "Order 7 shipped" {
		t.Fatalf("payload %s: %v", push.Messages()[0].Plaintext, err)
	}

	// The service worker shows a push as a notification with its url.
	w := serviceWorker(ctx, t, b)
	w.call(ctx, "Runtime.enable", nil) // (without it the worker's first notification was not seen)
	data, _ := json.Marshal(string(push.Messages()[0].Plaintext))
	var shown []map[string]any
	w.eval(ctx, `(async () => {
		const ev = new PushEvent("push", {data: `+string(data)+`});
		// Wait for the worker's own showNotification, not a guess.
		const reg = self.registration, orig = reg.showNotification;
		let shown = null;
		reg.showNotification = function (...args) { shown = orig.apply(this, args); return shown; };
		self.dispatchEvent(ev); // a script-made event: the worker cannot extend it, and says so
		reg.showNotification = orig;
		if (!shown) return [{title: "the push listener did not call showNotification"}];
		try { await shown; } catch (e) { return [{title: "showNotification failed: " + e}]; }
		for (let i = 0; i < 100; i++) {
			const ns = await self.registration.getNotifications();
			if (ns.length) return ns.map((n) => ({title: n.title, tag: n.tag, url: n.data && n.data.url}));
			await new Promise((r) => setTimeout(r, 50));
		}
		return [];
	})()`, &shown)
	if len(shown) != 1 || shown[0]["title"] != "Order 7 shipped" || shown[0]["tag"] != "order.shipped:o-7" ||
		shown[0]["url"] != "https://shop.test/orders/7" {
		t.Errorf("notifications shown: %v", shown)
	}
}

// serviceWorker attaches to the page's service worker target.
func serviceWorker(ctx context.Context, t *testing.T, b *browser) *page {
	t.Helper()
	type target struct {
		TargetID string `json:"targetId"`
		Type     string `json:"type"`
		URL      string `json:"url"`
	}
	var targets []target
	var worker string
	if !servertest.Wait(left(ctx), func() bool {
		res, err := b.call(ctx, "", "Target.getTargets", nil)
		if err != nil {
			t.Fatal(err)
		}
		var ts struct {
			TargetInfos []target `json:"targetInfos"`
		}
		_ = json.Unmarshal(res, &ts)
		targets = ts.TargetInfos
		for _, ti := range targets {
			if ti.Type == "service_worker" {
				worker = ti.TargetID
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no service worker target among %+v", targets)
	}
	res, err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": worker, "flatten": true})
	if err != nil {
		t.Fatal(err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(res, &att)
	return &page{b: b, t: t, session: att.SessionID}
}
