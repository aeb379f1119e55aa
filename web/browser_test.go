package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// browserConfig adds notifiers with an email channel (for the preference
// table's digest and required cells) to the integration tests' base config.
const browserConfig = servertest.BaseConfig + `
  mention.created:
    category: comments
    channels:
      in_app: {title: "{{.who}} mentioned you"}
      email: {subject: "{{.who}} mentioned you", text: "{{.who}} mentioned you"}
  invoice.paid:
    category: billing
    required: true
    channels:
      in_app: {title: "Invoice paid"}
      email: {subject: "Invoice paid", text: "Invoice paid"}
channels:
  email:
    from: "Test <test@notifyd.test>"
    smtp: {host: 127.0.0.1, port: %d}
`

// apiClient calls the daemon's HTTP API.
type apiClient struct {
	t    *testing.T
	base string
}

func (a apiClient) do(method, path, token string, body, out any) int {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			a.t.Fatalf("%s %s = %d %s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

type inboxPage struct {
	Items []struct {
		ID     string  `json:"id"`
		Key    string  `json:"key"`
		ReadAt *string `json:"read_at"`
	} `json:"items"`
}

// in wraps a JavaScript expression so that it can use inbox (the element),
// $ and $$ (querySelector and querySelectorAll inside its shadow root).
func in(expr string) string {
	return `(() => { const inbox = document.querySelector("notifyd-inbox");
		const $ = (s) => inbox.shadowRoot.querySelector(s);
		const $$ = (s) => [...inbox.shadowRoot.querySelectorAll(s)];
		return (` + expr + `); })()`
}

// inboxState describes the element for failure messages.
var inboxState = in(`({state: inbox.connectionState, counts: inbox.counts, badge: $(".badge").textContent,
	badgeHidden: $(".badge").hidden, open: !$(".panel").hidden, status: $(".status").textContent,
	items: $$(".item").map((li) => li.className + " " + li.dataset.id + " " + li.querySelector(".title").textContent)})`)

// prefs is in for <notifyd-preferences>.
func prefs(expr string) string {
	return `(() => { const prefs = document.querySelector("notifyd-preferences");
		const $ = (s) => prefs.shadowRoot.querySelector(s);
		const $$ = (s) => [...prefs.shadowRoot.querySelectorAll(s)];
		return (` + expr + `); })()`
}

// TestBrowserInboxAndPreferences drives the demo page in headless Chromium
// against a real daemon: a notification sent through the API appears live
// with the badge updated, a click marks it read and clears the badge, a
// reload keeps that state; then live updates from elsewhere, mark all read,
// archive, infinite scroll, a token change, and the preference center.
func TestBrowserInboxAndPreferences(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	ctx := browserContext(t)

	// The daemon, with the components and the demo page mounted the way
	// `notifyd dev` mounts them.
	_, dbURL := pgtest.NewDBURL(t)
	mailbox := smtpcapture.Start(t)
	cfg := servertest.Config(t, fmt.Sprintf(browserConfig, mailbox.Port()))
	cfg.Database.URL = dbURL
	d := startDemoDaemon(t, ctx, cfg, nil) // registered before the browser's cleanup: stops after it closed
	api, token := d.api, d.token
	send := func(key string) {
		t.Helper()
		code := api.do("POST", "/v1/notifications", servertest.AdminToken, map[string]any{
			"notifier": "comment.created", "key": key, "actor": "u1", "recipients": []any{"u2"},
			"params": map[string]any{"post_title": `<b>post</b> & "` + key + `"`, "author_name": "Ada", "url": ""},
		}, nil)
		if code != http.StatusAccepted {
			t.Fatalf("send %s = %d", key, code)
		}
	}
	title := func(key string) string { return `Ada commented on <b>post</b> & "` + key + `"` }
	// A rule stored before the page loads: saving must keep it.
	if code := api.do("PUT", "/v1/preferences", token, map[string]any{
		"rules": []any{map[string]any{"scope": "*", "channel": "webhook", "mode": "off"}}}, nil); code != 200 {
		t.Fatalf("PUT /v1/preferences = %d", code)
	}

	b := startBrowser(t, bin)
	p := b.newPage(ctx)
	p.navigate(ctx, api.base+"/dev/demo")

	// record keeps the components' events in window.__events (again after a reload).
	record := func() {
		t.Helper()
		p.eval(ctx, `(() => { window.__events = [];
			for (const n of ["notifyd:read", "notifyd:archive", "notifyd:error", "notifyd:counts", "notifyd:item", "notifyd:updated"])
				document.addEventListener(n, (e) => window.__events.push(n)); return true; })()`, nil)
	}
	seen := func(name string) string { return `window.__events.includes(` + jsString(name) + `)` }
	record()

	// 1. Connected, nothing unread.
	p.waitFor(ctx, "the stream to open", in(`inbox.connectionState === "open" && $(".badge").hidden`), inboxState)
	p.click(ctx, in(`$(".bell")`))
	p.waitFor(ctx, "the empty panel", in(`!$(".panel").hidden && !$(".empty").hidden && $(".bell").getAttribute("aria-expanded") === "true"`), inboxState)
	// This daemon has no web push channel: once the element has asked for
	// its VAPID key (a 404), it offers no desktop notifications.
	p.waitFor(ctx, "the element to ask for the VAPID key, or to offer desktop notifications",
		`performance.getEntriesByType("resource").some((e) => e.name.includes("/v1/push-subscriptions/vapid-key")) || `+
			in(`!$(".push").hidden`), inboxState)
	var offered bool
	p.eval(ctx, in(`!$(".push").hidden`), &offered)
	if offered {
		t.Error("the panel offers desktop notifications from a daemon without a web push channel")
	}

	// 2. A notification sent through the API appears live, with the badge.
	send("c-1")
	p.waitFor(ctx, "the item to appear live with the badge at 1",
		in(`$$(".item").length === 1 && $(".item").classList.contains("unread") &&
			$(".item .title").textContent === `+jsString(title("c-1"))+` &&
			$(".badge").textContent === "1" && !$(".badge").hidden &&
			$(".bell").getAttribute("aria-label") === "Notifications, 1 unread"`), inboxState)
	var markup bool
	p.eval(ctx, in(`$(".item .title b") !== null || $(".item .body b") !== null`), &markup)
	if markup {
		t.Error("item text was rendered as HTML: params must go in as text")
	}

	// 3. A click marks it read: the badge goes, the API agrees.
	p.click(ctx, in(`$(".item .main")`))
	p.waitFor(ctx, "the badge to clear after the click",
		in(`$(".badge").hidden && $(".badge").textContent === "0" && !$(".item").classList.contains("unread") && inbox.counts.unread === 0`), inboxState)
	p.waitFor(ctx, "the API to confirm the read", seen("notifyd:read"), "window.__events")
	var inbox inboxPage
	api.do("GET", "/v1/inbox", token, nil, &inbox)
	if len(inbox.Items) != 1 || inbox.Items[0].ReadAt == nil {
		t.Fatalf("after the click the API says %+v, want the item read", inbox.Items)
	}
	var counts struct{ Unread, Unseen int }
	api.do("GET", "/v1/inbox/counts", token, nil, &counts)
	if counts.Unread != 0 || counts.Unseen != 0 {
		t.Fatalf("counts after the click = %+v, want 0 and 0", counts)
	}

	// 4. A reload keeps the state: the item is there, read, no badge.
	p.eval(ctx, `window.__beforeReload = true`, nil)
	p.call(ctx, "Page.reload", map[string]any{"ignoreCache": true})
	p.waitFor(ctx, "the reload", `!window.__beforeReload && document.readyState === "complete"`, "")
	record()
	p.waitFor(ctx, "the stream to open after the reload", in(`inbox.connectionState === "open"`), inboxState)
	p.click(ctx, in(`$(".bell")`))
	p.waitFor(ctx, "the read item after the reload",
		in(`$$(".item").length === 1 && !$(".item").classList.contains("unread") &&
			$(".item .title").textContent === `+jsString(title("c-1"))+` && $(".badge").hidden`), inboxState)

	// 5. A change made elsewhere arrives through the stream (inbox.updated).
	send("c-2")
	p.waitFor(ctx, "c-2 at the top, unread",
		in(`$$(".item").length === 2 && $(".item").classList.contains("unread") &&
			$(".item .title").textContent === `+jsString(title("c-2"))+` && $(".badge").textContent === "1"`), inboxState)
	var c2 string
	p.eval(ctx, in(`$(".item").dataset.id`), &c2)
	if code := api.do("POST", "/v1/inbox/read", token, map[string]any{"ids": []string{c2}}, nil); code != 200 {
		t.Fatalf("POST /v1/inbox/read = %d", code)
	}
	p.waitFor(ctx, "the read made elsewhere to show",
		in(`$(".badge").hidden && $$(".item.unread").length === 0`), inboxState)

	// 6. Mark all read.
	send("c-3")
	send("c-4")
	p.waitFor(ctx, "two unread", in(`$$(".item").length === 4 && $$(".item.unread").length === 2 && $(".badge").textContent === "2"`), inboxState)
	p.eval(ctx, `(window.__events = [], true)`, nil)
	p.click(ctx, in(`$(".mark-all")`))
	p.waitFor(ctx, "mark all read", in(`$(".badge").hidden && $$(".item.unread").length === 0`), inboxState)
	p.waitFor(ctx, "the API to confirm mark all read", seen("notifyd:read"), "window.__events")
	api.do("GET", "/v1/inbox/counts", token, nil, &counts)
	if counts.Unread != 0 {
		t.Fatalf("counts after mark all read = %+v", counts)
	}

	// 7. Archive the newest (c-4): it leaves the list and the API has it archived.
	var c4 string
	p.eval(ctx, in(`$(".item").dataset.id`), &c4)
	p.click(ctx, in(`$(".item .archive")`))
	p.waitFor(ctx, "the archived item to leave", in(`$$(".item").length === 3 && !$$(".item").some((li) => li.dataset.id === `+jsString(c4)+`)`), inboxState)
	p.waitFor(ctx, "the API to confirm the archive", seen("notifyd:archive"), "window.__events")
	var archived inboxPage
	api.do("GET", "/v1/inbox?filter=archived", token, nil, &archived)
	if len(archived.Items) != 1 || archived.Items[0].ID != c4 {
		t.Fatalf("archived = %+v, want only %s", archived.Items, c4)
	}

	// 8. Infinite scroll: pages of 3 in a panel showing about one item; the
	// next page loads when the end of the list scrolls into view.
	send("c-5")
	send("c-6")
	p.waitFor(ctx, "five items", in(`$$(".item").length === 5`), inboxState)
	p.eval(ctx, in(`(inbox.style.setProperty("--notifyd-panel-max-height", "60px"), inbox.pageSize = 3, inbox.reload().then(() => true))`), nil)
	p.waitFor(ctx, "the first page of 3", in(`$$(".item").length === 3 && $(".status").textContent === ""`), inboxState)
	// Nothing more loads while the end of the list is out of view. The
	// element decides when its observer first reports the sentinel (observed
	// again after each page); an observer made now on the same sentinel,
	// root and margin reports at that rendering step or a later one, so once
	// it has, the element has decided too, and a next page it asked for
	// shows as more items or as "Loading…".
	var inView bool
	p.eval(ctx, in(`new Promise((resolve) => {
		const io = new IntersectionObserver((entries) => { io.disconnect(); resolve(entries.some((e) => e.isIntersecting)); },
			{ root: $(".scroller"), rootMargin: "0px 0px 48px 0px" });
		io.observe($(".sentinel"));
	})`), &inView)
	if inView {
		t.Fatal("the end of the list is in view with the first page: the panel is too tall for this test")
	}
	var before struct {
		N      int
		Status string
	}
	p.eval(ctx, in(`({N: $$(".item").length, Status: $(".status").textContent})`), &before)
	if before.N != 3 || before.Status != "" {
		t.Fatalf("%d items, status %q before scrolling; want the first page of 3 only, nothing loading", before.N, before.Status)
	}
	p.eval(ctx, in(`($(".scroller").scrollTop = $(".scroller").scrollHeight, true)`), nil)
	p.waitFor(ctx, "the next page after scrolling", in(`$$(".item").length === 5`), inboxState)
	var shown []string
	p.eval(ctx, in(`$$(".item").map((li) => li.dataset.id)`), &shown)
	api.do("GET", "/v1/inbox", token, nil, &inbox)
	var want []string
	for _, it := range inbox.Items {
		want = append(want, it.ID)
	}
	if !slices.Equal(shown, want) {
		t.Fatalf("list order %v, want the API's %v", shown, want)
	}

	// 9. A new token restarts everything: a bad one stops at unauthorized,
	// the good one comes back with the state (c-5 and c-6 are unread).
	p.eval(ctx, in(`(inbox.style.removeProperty("--notifyd-panel-max-height"), inbox.removeAttribute("page-size"),
		inbox.setAttribute("token", "not-a-token"), true)`), nil)
	p.waitFor(ctx, "unauthorized with a bad token", in(`inbox.connectionState === "unauthorized" && $$(".item").length === 0`), inboxState)
	p.eval(ctx, in(`(inbox.setAttribute("token", `+jsString(token)+`), true)`), nil)
	p.waitFor(ctx, "back with the good token", in(`inbox.connectionState === "open" && $$(".item").length === 5 && $(".badge").textContent === "2"`), inboxState)

	// 9b. A token that expires while the stream is open: the stream ends
	// with reauth, the element fires notifyd:reauth and waits; a fresh token
	// resumes it with the list kept. The element must open the stream and
	// load the list before the token expires; when it did not (a loaded
	// machine: the stream is refused, unauthorized, or the list is), that
	// says nothing about reauth, and the step is made again from idle with
	// a token twice as long.
	p.eval(ctx, in(`(window.reauths = 0, inbox.addEventListener("notifyd:reauth", () => window.reauths++), true)`), nil)
	for ttl := 2 * time.Second; ; ttl *= 2 {
		short, err := notifyd.RecipientTokenAt(cfg.HTTP.TokenSecret, "u2", ttl, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.eval(ctx, in(`(window.reauths = 0, inbox.setAttribute("token", `+jsString(short)+`), true)`), nil)
		p.waitFor(ctx, "the stream and the list with the short token, or its refusal",
			in(`inbox.connectionState === "unauthorized" ||
				(["open", "reauth"].includes(inbox.connectionState) && $(".status").textContent !== "Loading…")`), inboxState)
		var got struct {
			State string
			Items int
		}
		p.eval(ctx, in(`({State: inbox.connectionState, Items: $$(".item").length})`), &got)
		if got.State != "unauthorized" && got.Items == 5 {
			break
		}
		if ttl >= time.Minute {
			t.Fatalf("with a token valid for %s the element did not get the stream open and its list before it expired: %+v", ttl, got)
		}
		t.Logf("the %s token expired before the stream was open with the list (%+v): again with a longer one", ttl, got)
		p.eval(ctx, in(`(inbox.removeAttribute("token"), true)`), nil)
		p.waitFor(ctx, "idle without a token", in(`inbox.connectionState === "idle"`), inboxState)
	}
	p.waitFor(ctx, "reauth when the token expires", in(`inbox.connectionState === "reauth" && window.reauths === 1 && $$(".item").length === 5`), inboxState)
	p.eval(ctx, in(`(inbox.token = `+jsString(token)+`, true)`), nil)
	p.waitFor(ctx, "resumed with the fresh token", in(`inbox.connectionState === "open" && $$(".item").length === 5 && $(".badge").textContent === "2" && window.reauths === 1`), inboxState)

	// 10. The preference center: effective modes as selects, digest on email
	// only, off disabled for the required notifier; a save merges rules.
	const prefsState = `(() => { const s = document.querySelector("notifyd-preferences").shadowRoot;
		return {status: s.querySelector(".status").textContent, error: s.querySelector(".error").textContent,
			selects: [...s.querySelectorAll("select")].map((x) => x.dataset.notifier + "/" + x.dataset.channel + "=" + x.value)}; })()`
	p.waitFor(ctx, "the preference table",
		prefs(`$$("select").length > 0 && $("select[data-notifier='mention.created'][data-channel='email']") !== null`), prefsState)
	var cells struct {
		RequiredOffDisabled bool
		EmailHasDigest      bool
		InAppHasDigest      bool
		Value               string
	}
	p.eval(ctx, prefs(`({
		RequiredOffDisabled: $("select[data-notifier='invoice.paid'][data-channel='email'] option[value=off]").disabled,
		EmailHasDigest: $("select[data-notifier='mention.created'][data-channel='email'] option[value=digest]") !== null,
		InAppHasDigest: $("select[data-notifier='mention.created'][data-channel='in_app'] option[value=digest]") !== null,
		Value: $("select[data-notifier='mention.created'][data-channel='email']").value})`), &cells)
	if !cells.RequiredOffDisabled || !cells.EmailHasDigest || cells.InAppHasDigest || cells.Value != "immediate" {
		t.Fatalf("preference cells = %+v", cells)
	}
	p.eval(ctx, prefs(`(() => { const s = $("select[data-notifier='mention.created'][data-channel='email']");
		s.value = "digest"; s.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`), nil)
	p.click(ctx, prefs(`$(".save")`))
	p.waitFor(ctx, "the save", prefs(`$(".status").textContent === "Saved." && $$("td.changed").length === 0 &&
		$("select[data-notifier='mention.created'][data-channel='email']").dataset.initial === "digest"`), prefsState)
	var stored struct {
		Rules     []map[string]string `json:"rules"`
		Effective map[string]struct {
			Channels map[string]string `json:"channels"`
		} `json:"effective"`
	}
	api.do("GET", "/v1/preferences", token, nil, &stored)
	wantRules := []map[string]string{
		{"scope": "*", "channel": "webhook", "mode": "off"},
		{"scope": "notifier:mention.created", "channel": "email", "mode": "digest"},
	}
	if fmt.Sprint(stored.Rules) != fmt.Sprint(wantRules) {
		t.Fatalf("stored rules %v, want %v (the new rule merged with the old)", stored.Rules, wantRules)
	}
	if got := stored.Effective["mention.created"].Channels["email"]; got != "digest" {
		t.Fatalf("effective mention.created email = %q, want digest", got)
	}

	// 11. API errors show their message.
	p.eval(ctx, prefs(`(prefs.setAttribute("token", "not-a-token"), true)`), nil)
	p.waitFor(ctx, "the error message", prefs(`!$(".error").hidden && $(".error .message").textContent.includes("invalid recipient token")`), prefsState)

	// 12. The tenant attribute: the inbox shows (and streams) only that
	// tenant's items; the preferences resolve with its default rules.
	if code := api.do("PUT", "/v1/tenants/acme", servertest.AdminToken, map[string]any{"name": "Acme"}, nil); code != http.StatusCreated {
		t.Fatalf("PUT tenant = %d", code)
	}
	sendFor := func(key, tenant string) {
		t.Helper()
		body := map[string]any{"notifier": "comment.created", "key": key, "actor": "u1", "recipients": []any{"u2"},
			"params": map[string]any{"post_title": `<b>post</b> & "` + key + `"`, "author_name": "Ada", "url": ""}}
		if tenant != "" {
			body["tenant"] = tenant
		}
		if code := api.do("POST", "/v1/notifications", servertest.AdminToken, body, nil); code != http.StatusAccepted {
			t.Fatalf("send %s = %d", key, code)
		}
	}
	sendFor("t-1", "acme")
	servertest.Eventually(t, left(ctx), "acme's item in the inbox", func() bool {
		var page inboxPage
		api.do("GET", "/v1/inbox?tenant=acme", token, nil, &page)
		return len(page.Items) == 1
	})
	p.eval(ctx, in(`(inbox.setAttribute("tenant", "acme"), inbox.open(), true)`), nil)
	p.waitFor(ctx, "only acme's item", in(`$$(".item").length === 1 && $(".item .title").textContent === `+jsString(title("t-1"))), inboxState)
	p.waitFor(ctx, "the stream to open again", in(`inbox.connectionState === "open"`), inboxState)
	sendFor("c-9", "")
	sendFor("t-2", "acme")
	p.waitFor(ctx, "acme's new item live, the other one not", in(`$$(".item").length === 2 &&
		$$(".item .title").map((e) => e.textContent).join("|") === `+jsString(title("t-2")+"|"+title("t-1"))), inboxState)
	if code := api.do("PUT", "/v1/tenants/acme", servertest.AdminToken, map[string]any{"name": "Acme",
		"preferences": []any{map[string]any{"scope": "*", "channel": "in_app", "mode": "off"}}}, nil); code != http.StatusOK {
		t.Fatalf("PUT tenant's defaults = %d", code)
	}
	p.eval(ctx, prefs(`(prefs.setAttribute("tenant", "acme"), prefs.setAttribute("token", `+jsString(token)+`), true)`), nil)
	// comment.created's in_app: acme's default (off) applies; the required
	// invoice.paid ignores it; mention.created's email keeps the recipient's
	// own rule (digest).
	p.waitFor(ctx, "acme's default: in_app off", prefs(`$("select[data-notifier='comment.created'][data-channel='in_app']") !== null &&
		$("select[data-notifier='comment.created'][data-channel='in_app']").value === "off" &&
		$("select[data-notifier='invoice.paid'][data-channel='in_app']").value === "immediate" &&
		$("select[data-notifier='mention.created'][data-channel='email']").value === "digest"`), prefsState)
}

// TestBrowserInboxBadgeCapped: an inbox with more unread items than the
// counts' cap shows "99+", says "more than 99" to a screen reader, and stays
// at "99+" after one item is read (a capped count is a floor, not a number
// to count down from), until everything is read.
func TestBrowserInboxBadgeCapped(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	ctx := browserContext(t)
	_, dbURL := pgtest.NewDBURL(t)
	mailbox := smtpcapture.Start(t)
	cfg := servertest.Config(t, fmt.Sprintf(browserConfig, mailbox.Port()))
	cfg.Database.URL = dbURL
	d := startDemoDaemon(t, ctx, cfg, nil)
	if _, err := d.Pool().Exec(ctx, `
		INSERT INTO notify_inbox (id, recipient, notifier, key, category, reason, title, created_at)
		SELECT gen_random_uuid(), 'u2', 'comment.created', 'capped-' || g, 'comments', 'direct', 'item ' || g,
		       now() - g * interval '1 second'
		FROM generate_series(1, 150) g`); err != nil {
		t.Fatal(err)
	}
	b := startBrowser(t, bin)
	p := b.newPage(ctx)
	p.navigate(ctx, d.api.base+"/dev/demo")
	p.waitFor(ctx, "the capped badge",
		in(`inbox.connectionState === "open" && $(".badge").textContent === "99+" && !$(".badge").hidden &&
			inbox.counts.unread === 99 && inbox.counts.unread_capped === true &&
			$(".bell").getAttribute("aria-label") === "Notifications, more than 99 unread"`), inboxState)
	p.click(ctx, in(`$(".bell")`))
	p.waitFor(ctx, "the first page", in(`$$(".item.unread").length > 0`), inboxState)
	p.click(ctx, in(`$(".item .main")`))
	p.waitFor(ctx, "the item read", in(`!$(".item").classList.contains("unread")`), inboxState)
	var counts map[string]any
	d.api.do("GET", "/v1/inbox/counts", d.token, nil, &counts)
	if counts["unread"] != 99.0 || counts["unread_capped"] != true {
		t.Fatalf("counts after one read = %v, want 99 capped (149 unread)", counts)
	}
	p.waitFor(ctx, "the badge to stay 99+", in(`$(".badge").textContent === "99+" && inbox.counts.unread === 99`), inboxState)
	if code := d.api.do("POST", "/v1/inbox/read", d.token, map[string]any{"all": true}, nil); code != 200 {
		t.Fatalf("read all = %d", code)
	}
	p.waitFor(ctx, "the badge to clear", in(`$(".badge").hidden && inbox.counts.unread === 0 && !inbox.counts.unread_capped`), inboxState)
}
