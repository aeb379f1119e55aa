package web_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// EnvScreenshots names the directory the console's browser test writes its
// screenshots to (the README's are made with
// NOTIFYD_SCREENSHOTS=../docs/images go test ./web -run TestBrowserConsole).
// Unset, they go to the test's temporary directory.
const EnvScreenshots = "NOTIFYD_SCREENSHOTS"

// TestBrowserConsole drives /admin/ in headless Chromium against a real
// daemon, as support would on "why did Ada not get it": sign in with the
// admin token, filter the notifications by recipient, open the notification
// and its refused email, read the failed attempt, retry it once the mailbox
// is fixed, and see it become sent. Then the template preview, a page of
// the captured email beside the daemon's routes, and the demo inbox.
func TestBrowserConsole(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	ctx := browserContext(t)
	shots := os.Getenv(EnvScreenshots)
	if shots == "" {
		shots = t.TempDir()
	}

	_, dbURL := pgtest.NewDBURL(t)
	mailbox := smtpcapture.Start(t)
	cfg := servertest.Config(t, fmt.Sprintf(browserConfig, mailbox.Port()))
	cfg.Database.URL = dbURL
	d := startDemoDaemon(t, ctx, cfg, map[string]http.Handler{"GET /dev/{$}": capturedMail(mailbox)})
	api := d.api
	admin := servertest.AdminToken
	for id, email := range map[string]string{"u1": "ada@example.test", "u2": "grace@example.test"} {
		if code := api.do("PUT", "/v1/recipients/"+id, admin, map[string]any{"email": email, "name": id}, nil); code != 200 {
			t.Fatalf("PUT recipient %s = %d", id, code)
		}
	}
	// Ada's mailbox refuses mail: her email is refused at once.
	mailbox.FailRecipient("ada@example.test", 550)
	send := func(key string, to ...string) string {
		t.Helper()
		var res struct{ ID string }
		code := api.do("POST", "/v1/notifications", admin, map[string]any{"notifier": "mention.created", "key": key,
			"recipients": to, "params": map[string]any{"who": "Linus"}}, &res)
		if code != http.StatusAccepted {
			t.Fatalf("send %s = %d", key, code)
		}
		return res.ID
	}
	send("m-grace", "u2")
	id := send("m-ada", "u1", "u2")
	send("m-later", "u2")
	var delivery string
	servertest.Eventually(t, left(ctx), "Ada's email to be refused", func() bool {
		var n struct {
			Deliveries []struct {
				ID, Channel, Status string
				Recipient           *string
			}
		}
		api.do("GET", "/v1/notifications/"+id, admin, nil, &n)
		for _, x := range n.Deliveries {
			if x.Recipient != nil && *x.Recipient == "u1" && x.Channel == "email" && x.Status == "refused" {
				delivery = x.ID
				return true
			}
		}
		return false
	})

	// The page is never framed or cached, and runs its own code only.
	resp, err := http.Get(api.base + "/admin/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := resp.Header; resp.StatusCode != 200 || h.Get("X-Frame-Options") != "DENY" || h.Get("Cache-Control") != "no-store" ||
		!strings.Contains(strings.Join(h.Values("Content-Security-Policy"), ";"), "frame-ancestors 'none'") ||
		!strings.Contains(strings.Join(h.Values("Content-Security-Policy"), ";"), "script-src 'self'") {
		t.Fatalf("/admin/: %d %v", resp.StatusCode, resp.Header)
	}

	b := startBrowser(t, bin)
	p := b.newPage(ctx)
	p.call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 860, "deviceScaleFactor": 1, "mobile": false})
	shot := func(name string) {
		t.Helper()
		var r struct{ Data string }
		if err := json.Unmarshal(p.call(ctx, "Page.captureScreenshot", map[string]any{"format": "png"}), &r); err != nil {
			t.Fatal(err)
		}
		png, err := base64.StdEncoding.DecodeString(r.Data)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	state := `({status: document.querySelector("#status").textContent, view: document.querySelector("#view").innerText.slice(0, 600)})`
	p.navigate(ctx, api.base+"/admin/")

	// 1. Signed out: the token form. Signing in lists the notifications, newest first.
	p.waitFor(ctx, "the sign-in form", `!document.querySelector("#signin").hidden`, state)
	p.eval(ctx, `document.querySelector("#token").value = `+jsString(admin), nil)
	p.click(ctx, `document.querySelector("#token-form button")`)
	rows := `[...document.querySelectorAll("#notifications tr")].map((tr) => tr.children[2].textContent)`
	p.waitFor(ctx, "three notifications, newest first", `JSON.stringify(`+rows+`) === '["m-later","m-ada","m-grace"]'`, state)
	// The config's admin token is break-glass: a banner says so.
	p.waitFor(ctx, "the break-glass banner", `!document.querySelector("#break-glass").hidden &&
		document.querySelector("#whoami").textContent.includes("admin")`, state)
	// The audit log page renders with its filters and export.
	p.eval(ctx, `location.hash = "#/audit"`, nil)
	p.waitFor(ctx, "the audit log", `document.querySelector("#audit-filters") && document.querySelector("#audit-export") &&
		document.querySelector("#view h2").textContent === "Audit log"`, state)
	p.eval(ctx, `location.hash = "#/"`, nil)
	p.waitFor(ctx, "the notifications again", `JSON.stringify(`+rows+`) === '["m-later","m-ada","m-grace"]'`, state)
	var stored string
	p.eval(ctx, `sessionStorage.getItem("notifyd.admin_token")`, &stored)
	if stored != admin {
		t.Fatalf("the token is not kept in sessionStorage: %q", stored)
	}
	shot("console-notifications.png")

	// 2. Filter by recipient: only the notification that reached u1.
	p.eval(ctx, `document.querySelector("#filters [name=recipient]").value = "u1"`, nil)
	p.click(ctx, `document.querySelector("#filters button")`)
	p.waitFor(ctx, "the filtered list", `location.hash.includes("recipient=u1") && JSON.stringify(`+rows+`) === '["m-ada"]'`, state)

	// 3. The notification: audience, progress, every delivery with its error.
	p.click(ctx, `document.querySelector("#notifications a")`)
	refusedRow := `document.querySelector(` + jsString(`tr[data-id="`+delivery+`"]`) + `)`
	p.waitFor(ctx, "the notification page with the refused email",
		refusedRow+` && `+refusedRow+`.dataset.status === "refused" && `+refusedRow+`.innerText.includes("550") &&
		document.querySelector("#audience").textContent.startsWith("2 recipients")`, state)
	shot("console-notification.png")

	// 4. The delivery: its failed attempt, with time and error.
	p.click(ctx, refusedRow+`.querySelector("a[href^='#/d/']")`)
	p.waitFor(ctx, "the delivery page with one failed attempt",
		`document.querySelectorAll("#attempts tbody tr").length === 1 && document.querySelector("#attempts").innerText.includes("550") &&
		document.querySelector("#delivery").dataset.status === "refused"`, state)
	shot("console-delivery.png")

	// 5. Ada fixed her mailbox: retry, and the status changes to sent.
	mailbox.FailRecipient("ada@example.test", 0)
	p.click(ctx, `document.querySelector("#retry")`)
	p.waitFor(ctx, "the retried delivery to be sent",
		`document.querySelector("#delivery") && document.querySelector("#delivery").dataset.status === "sent" &&
		document.querySelector("#status").textContent.includes("now sent")`, state)
	var attempts int
	p.eval(ctx, `document.querySelectorAll("#attempts tbody tr").length`, &attempts)
	if attempts != 1 {
		t.Fatalf("after the retry the page lists %d failed attempts, want the one before it", attempts)
	}
	if msgs := mailbox.WaitFor(3, left(ctx)); !hasRecipient(msgs, "ada@example.test") {
		t.Fatal("the retried email did not reach Ada's mailbox")
	}

	// 6. The template preview renders the example params.
	p.eval(ctx, `location.hash = "#/preview?notifier=mention.created&channel=email"`, nil)
	p.waitFor(ctx, "the rendered email", `document.querySelector(".part[data-name=subject] pre") &&
		document.querySelector(".part[data-name=subject] pre").textContent.includes("mentioned you")`, state)
	// Params typed in render too.
	p.eval(ctx, `document.querySelector("#preview-params").value = '{"who": "Grace"}'`, nil)
	p.click(ctx, `document.querySelector("#preview-form button")`)
	p.waitFor(ctx, "the email rendered with the typed params",
		`document.querySelector(".part[data-name=subject] pre").textContent === "Grace mentioned you"`, state)
	shot("console-preview.png")

	// 7. A recipient's page.
	p.eval(ctx, `location.hash = "#/r/u1"`, nil)
	p.waitFor(ctx, "u1's page", `document.querySelector("#profile") && document.querySelector("#profile").innerText.includes("ada@example.test") &&
		document.querySelector("#effective") && document.querySelector("#suppressions").innerText.length > 0 &&
		document.querySelectorAll(".deliveries tbody tr").length > 0`, state)
	shot("console-recipient.png")

	// 8. A page mounted beside the daemon's routes: the captured email.
	// (The dev page of `notifyd dev` itself, whose screenshot docs/dev-mode.md
	// shows, belongs to cmd/notifyd; this stand-in is not photographed.)
	p.navigate(ctx, api.base+"/dev/")
	p.waitFor(ctx, "the dev page", `document.querySelector("#mail") !== null`, "document.body.innerText.slice(0, 300)")

	// 9. The demo: clicking an item stays on the page (its url points at the
	// example app, which does not exist) and says where it would go.
	p.navigate(ctx, api.base+"/dev/demo")
	p.waitFor(ctx, "the demo's inbox", in(`inbox.connectionState === "open"`), inboxState)
	p.click(ctx, in(`$(".bell")`))
	p.waitFor(ctx, "the demo's items", in(`$$(".item").length === 3`), inboxState)
	// The panel settles (its header may grow once the browser has said
	// whether it can push) before the click aims at the item.
	p.waitFor(ctx, "the first item to stay in place", in(`(() => { const r = JSON.stringify($(".item .main").getBoundingClientRect());
		const same = window.__itemRect === r; window.__itemRect = r; return same; })()`), inboxState)
	p.click(ctx, in(`$(".item .main")`))
	p.waitFor(ctx, "the click to be answered in place",
		`document.querySelector("#clicked").textContent.startsWith("Marked read")`, "document.querySelector('#clicked').textContent")
	var href string
	p.eval(ctx, `location.href`, &href)
	if href != api.base+"/dev/demo" {
		t.Fatalf("clicking a demo item navigated to %s", href)
	}
	shot("dev-demo.png")
}

// capturedMailPage lists the captured emails, newest first.
var capturedMailPage = template.Must(template.New("mail").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>captured email</title></head>
<body><h1 id="mail">Captured email ({{len .}})</h1>
{{range .}}<article><h2>{{.Subject}}</h2><p>To {{range .To}}{{.}} {{end}}</p>{{if .Text}}<pre>{{.Text}}</pre>{{end}}</article>{{else}}<p>No email yet.</p>{{end}}
</body></html>`))

// capturedMail serves the page of mailbox's captured emails.
func capturedMail(mailbox *smtpcapture.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msgs := mailbox.Messages()
		for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
			msgs[i], msgs[j] = msgs[j], msgs[i]
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := capturedMailPage.Execute(w, msgs); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}

func hasRecipient(msgs []smtpcapture.Message, addr string) bool {
	for _, m := range msgs {
		for _, to := range m.To {
			if strings.EqualFold(to, addr) {
				return true
			}
		}
	}
	return false
}
