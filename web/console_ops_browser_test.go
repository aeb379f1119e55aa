package web_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// opsNotifiers are added to browserConfig for the operator's test: webhook
// pings (their target's circuit opens) and a notifier whose params schema
// the send form is built from.
const opsNotifiers = `  ping:
    channels:
      webhook: {default: immediate}
  deploy.finished:
    category: ops
    params:
      type: object
      required: [service, env]
      properties:
        service: {type: string, description: "the service deployed"}
        env: {type: string, enum: [staging, production]}
        replicas: {type: integer}
        healthy: {type: boolean}
        tags: {type: array, items: {type: string}}
    channels:
      in_app: {title: "{{.service}} deployed to {{.env}}"}
      email: {subject: "{{.service}} deployed to {{.env}}", text: "{{.service}} is on {{.env}} with {{.replicas}} replicas"}
  post.liked:
    params:
      type: object
      properties: {post_id: {type: string}, liker: {type: string}}
    batch: {key: "{{.post_id}}", window: 10m}
    channels:
      email: {subject: "{{.Count}} likes", text: "{{range .Items}}{{.liker}} {{end}}liked your post"}
channels:
  webhook: {secret: dev-webhook-secret-0123456789abcdef, allow_private: true, timeout: 2s}
  email:`

// TestBrowserConsoleOperations drives the console's second round in headless
// Chromium against a real daemon, as on-call would: the deliveries view
// filtered to the refused emails of the last hour, their bulk retry (the
// count, the confirm, then sent), a delivery's rendered message, "Retry now"
// on a webhook whose circuit is open (it says so and offers to close it),
// the template preview's field-by-field errors, the test-send form built
// from a schema (a required field left empty is named next to the field),
// the cancel of a notification whose key climbs out of its path (the
// recipient it once named survives), and the overview's charts.
func TestBrowserConsoleOperations(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	ctx := browserContext(t)
	shots := os.Getenv(EnvScreenshots)
	if shots == "" {
		shots = t.TempDir()
	}

	_, dbURL := pgtest.NewDBURL(t)
	mailbox := smtpcapture.Start(t)
	yaml := strings.Replace(fmt.Sprintf(browserConfig, mailbox.Port()), "channels:\n  email:", opsNotifiers, 1)
	cfg := servertest.Config(t, yaml)
	cfg.Database.URL = dbURL
	d := startDemoDaemon(t, ctx, cfg, nil)
	api := d.api
	admin := servertest.AdminToken

	// A webhook target nobody answers.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadHook := "http://" + probe.Addr().String() + "/hook"
	probe.Close()
	profiles := map[string]map[string]any{
		"u1": {"email": "ada@example.test", "name": "Ada"}, "u2": {"email": "grace@example.test", "name": "Grace"},
		"u3": {"email": "linus@example.test", "name": "Linus"},
		"w1": {"webhook_url": deadHook}, "w2": {"webhook_url": deadHook}, "w3": {"webhook_url": deadHook},
	}
	for id, p := range profiles {
		if code := api.do("PUT", "/v1/recipients/"+id, admin, p, nil); code != 200 {
			t.Fatalf("PUT recipient %s = %d", id, code)
		}
	}
	send := func(notifier, key string, params map[string]any, to ...string) string {
		t.Helper()
		var res struct{ ID string }
		if code := api.do("POST", "/v1/notifications", admin, map[string]any{"notifier": notifier, "key": key,
			"recipients": to, "params": params}, &res); code != http.StatusAccepted {
			t.Fatalf("send %s/%s = %d", notifier, key, code)
		}
		return res.ID
	}
	// Ada's mailbox refuses mail for now.
	mailbox.FailRecipient("ada@example.test", 550)
	send("mention.created", "m-1", map[string]any{"who": "Linus"}, "u1", "u2")
	for _, w := range []string{"w1", "w2", "w3"} {
		send("ping", "p-"+w, nil, w)
	}
	type delivery struct {
		ID, Channel, Status, LastError string
		Recipient                      *string
		Attempts                       int
		Circuit                        map[string]any
	}
	find := func(q string) []delivery {
		var page struct{ Items []delivery }
		if code := api.do("GET", "/v1/deliveries?"+q, admin, nil, &page); code != 200 {
			t.Fatalf("GET /v1/deliveries?%s = %d", q, code)
		}
		return page.Items
	}
	var refused string
	servertest.Eventually(t, left(ctx), "Ada's email to be refused", func() bool {
		ds := find("status=refused&channel=email")
		if len(ds) == 1 {
			refused = ds[0].ID
		}
		return refused != ""
	})
	// openCircuit waits until a failed webhook delivery's target is paused
	// for a few seconds more (its breaker reopens, for twice as long, each
	// time a probe fails) and returns that delivery.
	openCircuit := func() string {
		t.Helper()
		var id string
		servertest.Eventually(t, left(ctx), "the webhook target's circuit to be open for a while", func() bool {
			for _, x := range find("status=failed&channel=webhook") {
				var full delivery
				api.do("GET", "/v1/deliveries/"+x.ID, admin, nil, &full)
				if full.Circuit == nil {
					continue
				}
				if until, err := time.Parse(time.RFC3339Nano, full.Circuit["until"].(string)); err == nil && time.Until(until) > 3*time.Second {
					id = x.ID
					return true
				}
			}
			return false
		})
		return id
	}

	b := startBrowser(t, bin)
	p := b.newPage(ctx)
	p.call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false})
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
	state := `({status: document.querySelector("#status").textContent, details: document.querySelector("#status-details").innerText, rows: [...document.querySelectorAll("#notifications tr")].map((tr) => tr.outerHTML).join("\\n").slice(0, 3000),
		view: document.querySelector("#view").innerText.slice(0, 800)})`
	go2 := func(hash string) {
		t.Helper()
		p.eval(ctx, `location.hash = `+jsString(hash), nil)
	}
	p.navigate(ctx, api.base+"/admin/")
	p.waitFor(ctx, "the sign-in form", `!document.querySelector("#signin").hidden`, state)
	p.eval(ctx, `document.querySelector("#token").value = `+jsString(admin), nil)
	p.click(ctx, `document.querySelector("#token-form button")`)

	// 1. The list marks the notification whose email was refused, with its
	// counts per channel.
	p.waitFor(ctx, "m-1 marked with its failure",
		`[...document.querySelectorAll("#notifications tr.has-failures")].some((tr) => tr.innerText.includes("m-1") && tr.innerText.includes("1 failed")
			&& tr.querySelector("[data-channel=email] .count.failed"))`, state)

	// 2. The deliveries view: every failure of the last hour, then only the
	// refused emails.
	rows := `[...document.querySelectorAll("#deliveries tr")]`
	go2("#/deliveries?status=failed,refused,expired&range=1h")
	p.waitFor(ctx, "the failures of the last hour", rows+`.length === 4 && `+rows+`.some((tr) => tr.dataset.id === `+jsString(refused)+`)`, state)
	shot("console-deliveries.png")
	go2("#/deliveries?status=refused&channel=email&range=1h")
	p.waitFor(ctx, "one refused email listed", rows+`.length === 1 && `+rows+`[0].dataset.id === `+jsString(refused)+
		` && document.querySelector("#delivery-filters [name=channel]").value === "email"`, state)

	// 3. Ada fixed her mailbox: retry them all. The count first, then the
	// confirm; the email is then sent.
	mailbox.FailRecipient("ada@example.test", 0)
	p.click(ctx, `document.querySelector("#bulk-retry")`)
	p.waitFor(ctx, "the count to confirm", `document.querySelector("#bulk-confirm [data-matched='1']") && document.querySelector("#bulk-retry-confirm")`, state)
	p.click(ctx, `document.querySelector("#bulk-retry-confirm")`)
	p.waitFor(ctx, "the bulk retry", `document.querySelector("#status").textContent.includes("Retried 1 of 1 matching")`, state)
	servertest.Eventually(t, left(ctx), "the retried email to be sent", func() bool {
		var x delivery
		api.do("GET", "/v1/deliveries/"+refused, admin, nil, &x)
		return x.Status == "sent"
	})
	if msgs := mailbox.WaitFor(2, left(ctx)); !hasRecipient(msgs, "ada@example.test") {
		t.Fatal("the bulk retry did not reach Ada's mailbox")
	}

	// 4. The delivery's page shows the message it sent.
	go2("#/d/" + refused)
	p.waitFor(ctx, "the rendered message", `document.querySelector("#message .part[data-name=subject] pre") &&
		document.querySelector("#message .part[data-name=subject] pre").textContent === "Linus mentioned you"`, state)
	shot("console-message.png")

	// 5. Retry now on a delivery whose target is paused: the console says so
	// and offers to close the circuit; closing it sends at once (the target
	// is still down, so it fails again, but it was attempted: no "not
	// attempted"). A circuit that closes between the test's look at it and
	// the click (a loaded machine) lets the retry through, and the console
	// says so; that attempt fails, the breaker opens again for twice as
	// long, and the step is made again.
	var parked string
	var before delivery
	for {
		parked = openCircuit()
		api.do("GET", "/v1/deliveries/"+parked, admin, nil, &before)
		go2("#/")
		go2("#/deliveries?status=failed&channel=webhook&range=1h")
		row := `document.querySelector(` + jsString(`#deliveries tr[data-id="`+parked+`"]`) + `)`
		// The list is read once; the delivery may have been between two
		// attempts (not failed) then: the list is read again until it shows.
		p.waitFor(ctx, "the parked webhook delivery", `(() => { if (`+row+`) return true;
			if (!window.__relisted || Date.now() - window.__relisted > 1000) {
				window.__relisted = Date.now(); window.dispatchEvent(new HashChangeEvent("hashchange")); }
			return false; })()`, state)
		p.click(ctx, row+`.querySelector("button.retry")`)
		p.waitFor(ctx, "the circuit to be named, or the retry let through", `(document.querySelector("#status").textContent.includes("is paused until") &&
			/after \d+ failures in a row/.test(document.querySelector("#status").textContent) && document.querySelector("#close-circuit")) ||
			/is due again|is now \w+/.test(document.querySelector("#status").textContent)`, state)
		var paused bool
		p.eval(ctx, `document.querySelector("#status").textContent.includes("is paused until")`, &paused)
		if paused {
			break
		}
		t.Logf("the circuit of %s closed before the click; waiting for it to open again", parked)
	}
	shot("console-circuit.png")
	p.click(ctx, `document.querySelector("#close-circuit")`)
	servertest.Eventually(t, left(ctx), "the delivery to be attempted again", func() bool {
		var x delivery
		api.do("GET", "/v1/deliveries/"+parked, admin, nil, &x)
		return x.Attempts > before.Attempts && x.Status == "failed" && !strings.Contains(x.LastError, "not attempted")
	})

	// 6. The template preview names each bad param.
	go2("#/preview?notifier=deploy.finished&channel=email")
	p.waitFor(ctx, "the preview", `document.querySelector(".part[data-name=subject]")`, state)
	p.eval(ctx, `document.querySelector("#preview-params").value = '{"service": 7, "env": "moon"}'`, nil)
	p.click(ctx, `document.querySelector("#preview-form button")`)
	p.waitFor(ctx, "each detail under the params", `(() => { const t = document.querySelector("#preview-errors").innerText;
		return t.includes("params/service") && t.includes("params/env"); })()`, state)

	// 7. Send a test from the form built from the schema: a required field
	// left empty is named next to it; filled, the notification is sent.
	go2("#/send?notifier=deploy.finished")
	p.waitFor(ctx, "the send form", `document.querySelector("#param-service") && document.querySelector("#param-env").tagName === "SELECT" &&
		document.querySelector("#param-replicas").type === "number" && document.querySelector("#param-healthy") &&
		document.querySelector("[data-field=service] abbr.required") && document.querySelector("#send-rest")`, state)
	p.eval(ctx, `document.querySelector("#send-recipient").value = "u2"; document.querySelector("#param-service").value = ""; true`, nil)
	p.click(ctx, `document.querySelector("#send-submit")`)
	p.waitFor(ctx, "the missing service named next to its field",
		`document.querySelector("#error-service").textContent.includes("missing required property") &&
		document.querySelector("#param-service").classList.contains("invalid") && document.querySelector("#error-env").textContent === ""`, state)
	shot("console-send.png")
	p.eval(ctx, `document.querySelector("#param-service").value = "billing"; document.querySelector("#param-replicas").value = "3"; true`, nil)
	p.click(ctx, `document.querySelector("#send-submit")`)
	p.waitFor(ctx, "the test notification sent", `document.querySelector("#sent a")`, state)
	if msgs := mailbox.WaitFor(3, left(ctx)); !hasSubject(msgs, "billing deployed to staging") {
		t.Fatal("the test notification's email did not arrive")
	}

	// 8. A key that climbs out of its path: Cancel cancels that notification
	// and nothing else (the recipient its key names stays).
	hostile := send("mention.created", "c/../../../recipients/u3", map[string]any{"who": "Mallory"}, "u2")
	go2("#/n/" + hostile)
	p.waitFor(ctx, "the notification page", `document.querySelector("#cancel") && !document.querySelector("#cancel").hidden`, state)
	p.click(ctx, `document.querySelector("#cancel")`)
	p.waitFor(ctx, "the confirmation naming the notification",
		`document.querySelector("#cancel").textContent.includes("mention.created / c/../../../recipients/u3")`, state)
	p.click(ctx, `document.querySelector("#cancel")`)
	p.waitFor(ctx, "the notification cancelled", `document.querySelector("#status").textContent.startsWith("Cancelled mention.created")`, state)
	var n struct{ Status string }
	api.do("GET", "/v1/notifications/"+hostile, admin, nil, &n)
	if n.Status != "cancelled" {
		t.Fatalf("the hostile notification is %s, want cancelled", n.Status)
	}
	if code := api.do("GET", "/v1/recipients/u3", admin, nil, nil); code != 200 {
		t.Fatalf("u3 after the cancel: GET = %d, want 200 (the cancel must not reach another route)", code)
	}

	// 9. The overview: a day of ledger history (written here, as a busy day
	// would leave it), the charts drawn from it.
	if _, err := d.Pool().Exec(ctx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, updated_at)
		SELECT gen_random_uuid(), gen_random_uuid(), 'comment.created', 'history-' || i, 'h' || i,
		       (ARRAY['email', 'email', 'email', 'webhook', 'slack'])[1 + i % 5], 'immediate',
		       CASE WHEN (i % 97 = 0) OR (h BETWEEN 14 AND 16 AND i % 9 = 0) THEN 'failed' WHEN i % 53 = 0 THEN 'refused'
		            WHEN i % 31 = 0 THEN 'skipped' ELSE 'sent' END,
		       now() - h * interval '1 hour' - (i % 60) * interval '1 minute'
		FROM generate_series(0, 23) h, generate_series(1, 40 + (h * 7) % 30) i`); err != nil {
		t.Fatal(err)
	}
	go2("#/overview")
	p.waitFor(ctx, "the charts", `document.querySelectorAll("svg[data-chart=deliveries]").length >= 3 &&
		document.querySelectorAll("svg[data-chart=deliveries] rect[data-count]").length > 40 &&
		document.querySelectorAll("svg[data-chart=failure-rate] circle[data-rate]").length >= 20 &&
		document.querySelector("svg[data-chart=failure-rate] polyline") &&
		document.querySelectorAll("svg[data-chart=queues] text[data-total]").length === 5`, state)
	var sum int
	p.eval(ctx, `[...document.querySelectorAll("svg[data-chart=deliveries][data-channel=email] rect[data-count]")].reduce((n, r) => n + Number(r.dataset.count), 0)`, &sum)
	var want int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM notify_deliveries WHERE channel = 'email' AND updated_at >= date_trunc('hour', now()) - interval '23 hours'`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if sum != want {
		t.Fatalf("the email chart's bars add up to %d, the ledger has %d email deliveries in the 24 hours", sum, want)
	}
	p.call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 1480, "deviceScaleFactor": 1, "mobile": false})
	shot("console-overview.png")

	// 10. Tenants: the deliveries and notifications views filter by tenant
	// (the select lists the tenants), a delivery shows its tenant.
	if code := api.do("PUT", "/v1/tenants/acme", admin, map[string]any{"name": "Acme"}, nil); code != http.StatusCreated {
		t.Fatalf("PUT tenant = %d", code)
	}
	var acme struct{ ID string }
	if code := api.do("POST", "/v1/notifications", admin, map[string]any{"notifier": "mention.created", "key": "t-1",
		"recipients": []string{"u2"}, "params": map[string]any{"who": "Acme"}, "tenant": "acme"}, &acme); code != http.StatusAccepted {
		t.Fatalf("send for acme = %d", code)
	}
	var acmeDelivery string
	servertest.Eventually(t, left(ctx), "acme's delivery", func() bool {
		var page struct{ Items []delivery }
		api.do("GET", "/v1/deliveries?tenant=acme", admin, nil, &page)
		if len(page.Items) > 0 {
			acmeDelivery = page.Items[0].ID
		}
		return acmeDelivery != ""
	})
	go2("#/deliveries?tenant=acme&range=1h")
	p.waitFor(ctx, "only acme's deliveries", rows+`.length >= 1 && `+rows+`.every((tr) => tr.dataset.id === `+jsString(acmeDelivery)+`)
		&& document.querySelector("#delivery-filters [name=tenant]").value === "acme"`, state)
	go2("#/?tenant=acme")
	p.waitFor(ctx, "only acme's notification", `[...document.querySelectorAll("#notifications tr")].length === 1 &&
		document.querySelector("#notifications tr").dataset.id === `+jsString(acme.ID), state)
	go2("#/d/" + acmeDelivery)
	p.waitFor(ctx, "the delivery's tenant", `document.querySelector("dd#delivery-tenant") && document.querySelector("dd#delivery-tenant").textContent === "acme"`, state)

	// 11. A batched delivery sends nothing itself: its page links to the
	// delivery that carried its batch and shows that one's message.
	carrier, batched, bid := uuidv7.String(), uuidv7.String(), uuidv7.String()
	if _, err := d.Pool().Exec(ctx, `
		WITH n AS (INSERT INTO notify_notifications (id, notifier, key, status, normalized, params)
		           VALUES (gen_random_uuid(), 'post.liked', 'like-1', 'fanned_out', true, '{"post_id": "p9", "liker": "Ada"}'),
		                  (gen_random_uuid(), 'post.liked', 'like-2', 'fanned_out', true, '{"post_id": "p9", "liker": "Grace"}')
		           RETURNING id, key),
		     b AS (INSERT INTO notify_batches (id, notifier, recipient, batch_key, state, closes_at, max_members, count, members, actors, items)
		           SELECT $3::text::uuid, 'post.liked', 'u2', 'p9', 'closed', now(), 50, 2, array_agg(id ORDER BY key), '{}',
		                  '[{"liker": "Ada"}, {"liker": "Grace"}]'
		           FROM n)
		INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, batch_id, batched_into)
		SELECT (CASE n.key WHEN 'like-1' THEN $1 ELSE $2 END)::uuid, n.id, 'post.liked', n.key, 'u2', 'email', 'immediate',
		       CASE n.key WHEN 'like-1' THEN 'sent' ELSE 'batched' END,
		       CASE n.key WHEN 'like-1' THEN $3::text::uuid END, CASE n.key WHEN 'like-2' THEN $1::text::uuid END
		FROM n`, carrier, batched, bid); err != nil {
		t.Fatal(err)
	}
	go2("#/d/" + batched)
	p.waitFor(ctx, "the batched delivery's page with its carrier's message", `document.querySelector("#carried-by a") &&
		document.querySelector("#carried-by a").getAttribute("href") === `+jsString("#/d/"+carrier)+` &&
		document.querySelector("#message .part[data-name=subject] pre").textContent === "2 likes" &&
		document.querySelector("#message .part[data-name=text] pre").textContent === "Ada Grace liked your post"`, state)
	shot("console-batched.png")
}

func hasSubject(msgs []smtpcapture.Message, subject string) bool {
	for _, m := range msgs {
		if m.HeaderValue("Subject") == subject {
			return true
		}
	}
	return false
}
