package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// consoleConfig adds an email channel (a Previewer) with a French variant to
// the test config.
const consoleConfig = `
http: {admin_token: ` + adminToken + `, token_secret: ` + tokenSecret + `}
notifiers:
  comment.created:
    category: comments
    params:
      type: object
      required: [post_title]
      properties:
        post_title: {type: string}
        author_name: {type: string}
    channels:
      in_app: {title: "{{.author_name}} commented on {{.post_title}}"}
      email:
        subject: "New comment on {{.post_title}}"
        text: "{{.author_name}} wrote on {{.post_title}}"
        locales:
          fr: {subject: "Nouveau commentaire sur {{.post_title}}", text: "{{.author_name}} a écrit"}
  post.liked:
    params:
      type: object
      required: [post_id, liker]
      properties:
        post_id: {type: string}
        liker: {type: string}
    batch: {key: "{{.post_id}}", window: 10m}
    channels:
      email: {subject: "{{.Count}} likes", text: "{{range .Items}}{{.liker}} {{end}}"}
channels:
  email: {from: "Test <test@notifyd.test>", smtp: {host: 127.0.0.1, port: 2525}}
`

// ledgerFixture writes a notification with one delivery per row (channel,
// status, recipient, minutes ago) and returns the notification's id and the
// deliveries' ids.
func ledgerFixture(t *testing.T, b *bundle, notifier, key string, rows ...[4]string) (string, []string) {
	t.Helper()
	nid := uuidv7.String()
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO notify_notifications (id, notifier, key, status, normalized, params)
		VALUES ($1::text::uuid, $2, $3, 'fanned_out', true, '{"post_title": "Hello", "author_name": "Ada", "post_id": "p9", "liker": "Ada"}')`,
		nid, notifier, key); err != nil {
		t.Fatal(err)
	}
	ids := uuidv7.Strings(len(rows))
	for i, r := range rows {
		var rcpt any
		if r[2] != "" {
			rcpt = r[2]
		}
		var ago int
		fmt.Sscan(r[3], &ago)
		if _, err := b.pool.Exec(t.Context(), `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, last_error, updated_at)
			VALUES ($1, $2::text::uuid, $3, $4, $5, $6, 'immediate', $7, CASE WHEN $7 = 'failed' THEN '451 try later' END, $8)`,
			ids[i], nid, notifier, key, rcpt, r[0], r[1], time.Now().Add(-time.Duration(ago)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	return nid, ids
}

// TestListDeliveriesRoute: every failed email of the last hour, in pages;
// the filters are parsed strictly.
func TestListDeliveriesRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: consoleConfig})
	_, a := ledgerFixture(t, b, "comment.created", "c-1",
		[4]string{"email", "failed", "u1", "5"}, [4]string{"email", "sent", "u2", "4"}, [4]string{"in_app", "sent", "u3", "3"})
	_, c := ledgerFixture(t, b, "comment.created", "c-2",
		[4]string{"email", "failed", "u1", "2"}, [4]string{"email", "failed", "u2", "90"}, [4]string{"slack", "failed", "", "1"})
	list := func(q string) ([]string, string) {
		t.Helper()
		r := b.do(t, "GET", "/v1/deliveries?"+q, adminToken, nil)
		expect(t, r, 200, "")
		var ids []string
		for _, it := range r.body["items"].([]any) {
			m := it.(map[string]any)
			ids = append(ids, m["id"].(string))
			if _, ok := m["failed_attempts"].([]any); !ok || m["notifier"] != "comment.created" {
				t.Fatalf("item %v", m)
			}
		}
		next, _ := r.body["next_cursor"].(string)
		return ids, next
	}
	hourAgo := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	got, next := list("status=failed&channel=email&since=" + hourAgo)
	if want := []string{c[0], a[0]}; !slices.Equal(got, want) || next != "" {
		t.Fatalf("failed email of the last hour: %v next %q, want %v", got, next, want)
	}
	got, _ = list("status=failed,sent&recipient=u2")
	if want := []string{a[1], c[1]}; !slices.Equal(got, want) {
		t.Fatalf("u2's failed or sent: %v, want %v", got, want)
	}
	var walked []string
	q := "limit=2"
	for pages := 0; ; pages++ {
		ids, next := list(q)
		walked = append(walked, ids...)
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
		q = "limit=2&cursor=" + url.QueryEscape(next)
	}
	if want := []string{c[2], c[0], a[2], a[1], a[0], c[1]}; !slices.Equal(walked, want) {
		t.Fatalf("pages of 2: %v, want %v", walked, want)
	}
	for q, field := range map[string]string{
		"status=lost":               "status",
		"status=failed&status=sent": "status",
		"colour=red":                "colour",
		"since=yesterday":           "since",
		"tenant=acme":               "tenant",
		"recipient=%00":             "recipient",
		"limit=0":                   "limit",
		"since=2030-01-02T00:00:00Z&until=2030-01-01T00:00:00Z": "until",
	} {
		r := b.do(t, "GET", "/v1/deliveries?"+q, adminToken, nil)
		expect(t, r, 400, wire.CodeBadRequest)
		if d := r.errDetails(); len(d) != 1 || d[0].(map[string]any)["field"] != field {
			t.Fatalf("?%s: details %v, want field %s", q, d, field)
		}
	}
	expect(t, b.do(t, "GET", "/v1/deliveries?status=%zz", adminToken, nil), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "GET", "/v1/deliveries?cursor=bogus", adminToken, nil), 400, wire.CodeBadCursor)
	expect(t, b.do(t, "GET", "/v1/deliveries", recipientToken(t, "u1"), nil), 401, wire.CodeUnauthorized)
}

// TestRetryDeliveriesByFilter: the bulk retry makes exactly the matching
// failed deliveries due, says how many, and refuses what it cannot do.
func TestRetryDeliveriesByFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: consoleConfig})
	_, a := ledgerFixture(t, b, "comment.created", "c-1",
		[4]string{"email", "failed", "u1", "5"}, [4]string{"email", "sent", "u2", "4"}, [4]string{"slack", "failed", "", "3"})
	_, c := ledgerFixture(t, b, "comment.created", "c-2", [4]string{"email", "failed", "u2", "120"})
	since := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	r := b.do(t, "POST", "/v1/deliveries/retry?status=failed&channel=email&dry_run=true&since="+since, adminToken, nil)
	expect(t, r, 200, "")
	if r.body["matched"] != 1.0 || r.body["retried"] != 0.0 {
		t.Fatalf("dry run: %s, want 1 matched and none retried", r.raw)
	}
	r = b.do(t, "POST", "/v1/deliveries/retry?status=failed&channel=email&since="+since, adminToken, nil)
	expect(t, r, 200, "")
	if r.body["matched"] != 1.0 || r.body["retried"] != 1.0 {
		t.Fatalf("answer %s, want 1 matched and retried", r.raw)
	}
	due := func(id string) bool {
		var n int
		if err := b.pool.QueryRow(t.Context(), `SELECT count(*) FROM notify_deliveries WHERE id = $1 AND next_attempt_at = $2`,
			id, fixedNow).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if !due(a[0]) || due(a[1]) || due(a[2]) || due(c[0]) {
		t.Fatalf("due now: %v %v %v %v, want only the failed email of the last hour", due(a[0]), due(a[1]), due(a[2]), due(c[0]))
	}
	var jobs int
	if err := b.pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = 'notify.send'`).Scan(&jobs); err != nil || jobs != 1 {
		t.Fatalf("%d send jobs (%v), want 1 for the retried delivery", jobs, err)
	}
	expect(t, b.do(t, "POST", "/v1/deliveries/retry?status=sent&since="+since, adminToken, nil), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "POST", "/v1/deliveries/retry?status=failed", adminToken, nil), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "POST", "/v1/deliveries/retry?since="+since+"&limit=10001", adminToken, nil), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "POST", "/v1/deliveries/retry?since="+since, adminToken, `{"status":"failed"}`), 400, wire.CodeBadRequest)
	// Without a status: failed and expired; a limit of 1 of 2 matches.
	r = b.do(t, "POST", "/v1/deliveries/retry?limit=1&since="+url.QueryEscape(time.Now().Add(-3*time.Hour).UTC().Format(time.RFC3339)), adminToken, nil)
	expect(t, r, 200, "")
	if r.body["matched"] != 3.0 || r.body["retried"] != 1.0 {
		t.Fatalf("limit 1: %s, want 3 matched (two emails and the slack message), 1 retried", r.raw)
	}
}

// TestDeliveryPreviewRoute: the message a delivery sends, in its recipient's
// locale, and a batch's fields for a delivery that carries one.
func TestDeliveryPreviewRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: consoleConfig})
	expect(t, b.do(t, "PUT", "/v1/recipients/u1", adminToken, map[string]any{"email": "ada@example.test", "locale": "fr-CA"}), 200, "")
	_, ids := ledgerFixture(t, b, "comment.created", "c-1", [4]string{"email", "sent", "u1", "1"}, [4]string{"email", "failed", "u2", "1"})
	part := func(r response, name string) string {
		for _, p := range r.body["parts"].([]any) {
			if m := p.(map[string]any); m["name"] == name {
				return m["value"].(string)
			}
		}
		return ""
	}
	r := b.do(t, "GET", "/v1/deliveries/"+ids[0]+"/preview", adminToken, nil)
	expect(t, r, 200, "")
	if got := part(r, "subject"); got != "Nouveau commentaire sur Hello" || r.body["locale"] != "fr-CA" || r.body["batch_count"] != nil {
		t.Fatalf("u1's email: subject %q, %s", got, r.raw)
	}
	r = b.do(t, "GET", "/v1/deliveries/"+ids[1]+"/preview", adminToken, nil)
	expect(t, r, 200, "")
	if got := part(r, "subject"); got != "New comment on Hello" {
		t.Fatalf("u2's email (no profile): subject %q", got)
	}

	_, liked := ledgerFixture(t, b, "post.liked", "l-1", [4]string{"email", "pending", "u1", "1"})
	bid := uuidv7.String()
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO notify_batches (id, notifier, recipient, batch_key, state, closes_at, max_members, count, members, actors, items)
		VALUES ($1::text::uuid, 'post.liked', 'u1', 'p9', 'open', now(), 50, 2, '{}', '{a1,a2}', '[{"liker": "Ada"}, {"liker": "Grace"}]')`, bid); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), `UPDATE notify_deliveries SET batch_id = $2::text::uuid WHERE id = $1`, liked[0], bid); err != nil {
		t.Fatal(err)
	}
	r = b.do(t, "GET", "/v1/deliveries/"+liked[0]+"/preview", adminToken, nil)
	expect(t, r, 200, "")
	if part(r, "subject") != "2 likes" || !strings.Contains(part(r, "text"), "Ada Grace") || r.body["batch_count"] != 2.0 {
		t.Fatalf("the batch's email: %s", r.raw)
	}
	expect(t, b.do(t, "GET", "/v1/deliveries/"+uuidv7.String()+"/preview", adminToken, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "GET", "/v1/deliveries/nope/preview", adminToken, nil), 404, wire.CodeNotFound)
}

// TestCancelByIDIsConfirmed: a cancel by id names the notification twice;
// a mismatch cancels nothing.
func TestCancelByIDIsConfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: consoleConfig})
	r := b.do(t, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "c/1",
		"recipients": []string{"u1"}, "params": map[string]any{"post_title": "p"}})
	expect(t, r, 202, "")
	id := r.body["id"].(string)
	status := func() string {
		var s string
		if err := b.pool.QueryRow(t.Context(), `SELECT status FROM notify_notifications WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	r = b.do(t, "DELETE", "/v1/notifications/"+id+"?notifier=comment.created&key=c%2F2", adminToken, nil)
	expect(t, r, 409, httpapi.CodeConfirmMismatch)
	if status() == "cancelled" {
		t.Fatal("a mismatched confirmation cancelled the notification")
	}
	expect(t, b.do(t, "DELETE", "/v1/notifications/"+id+"?key=c%2F1", adminToken, nil), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "DELETE", "/v1/notifications/"+id+"?notifier=comment.created&key=c%2F1&really=1", adminToken, nil), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "DELETE", "/v1/notifications/"+id+"?notifier=comment.created&key=c%2F1", adminToken, nil), 200, "")
	if status() != "cancelled" {
		t.Fatal("the confirmed cancel did not cancel")
	}
}

// TestNotificationListCountsAndMarks: each item of the list counts its
// deliveries per channel and status and says how many failed.
func TestNotificationListCountsAndMarks(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: consoleConfig})
	ledgerFixture(t, b, "comment.created", "ok", [4]string{"email", "sent", "u1", "1"})
	ledgerFixture(t, b, "comment.created", "bad", [4]string{"email", "refused", "u1", "1"},
		[4]string{"slack", "failed", "", "1"}, [4]string{"webhook", "expired", "u1", "1"}, [4]string{"email", "sent", "u2", "1"})
	r := b.do(t, "GET", "/v1/notifications", adminToken, nil)
	expect(t, r, 200, "")
	got := map[string]string{}
	for _, it := range r.body["items"].([]any) {
		m := it.(map[string]any)
		got[m["key"].(string)] = fmt.Sprint(m["failed"], " ", m["channels"])
	}
	if got["ok"] != "0 map[email:map[sent:1]]" || got["bad"] != "3 map[email:map[refused:1 sent:1] slack:map[failed:1] webhook:map[expired:1]]" {
		t.Fatalf("counts: %v", got)
	}
	expect(t, b.do(t, "GET", "/v1/notifications?status=lost", adminToken, nil), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "GET", "/v1/notifications?key=%00", adminToken, nil), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "GET", "/v1/notifications?statu=failed", adminToken, nil), 400, wire.CodeBadRequest)
}

// TestOverviewRoute: the last 24 hours per hour, channel and status, the
// failure rate, and the queues.
func TestOverviewRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: consoleConfig})
	// fixedNow is the server's clock: rows an hour before it and now.
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, updated_at)
		SELECT gen_random_uuid(), gen_random_uuid(), 'n', 'k' || i, 'u' || i, 'email', 'immediate',
		       CASE WHEN i <= 3 THEN 'failed' ELSE 'sent' END, $1::timestamptz - CASE WHEN i % 2 = 0 THEN interval '1 hour' ELSE interval '0' END
		FROM generate_series(1, 10) i`, fixedNow); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		VALUES ('{}', 'notify.send', 25, 'send', 'available', now()), ('{}', 'notify.send', 25, 'send', 'available', now())`); err != nil {
		t.Fatal(err)
	}
	r := b.do(t, "GET", "/v1/overview", adminToken, nil)
	expect(t, r, 200, "")
	if hours := r.body["hours"].([]any); len(hours) != 24 || hours[23] != fixedNow.Truncate(time.Hour).Format(time.RFC3339) {
		t.Fatalf("hours %v", hours)
	}
	rates := r.body["failure_rate"].([]any)
	last, prev := rates[23].(map[string]any), rates[22].(map[string]any)
	if last["failed"] != 2.0 || last["ended"] != 5.0 || prev["failed"] != 1.0 || prev["ended"] != 5.0 || rates[0].(map[string]any)["rate"] != nil {
		t.Fatalf("failure rate: this hour %v, the one before %v", last, prev)
	}
	if q := fmt.Sprint(r.body["queues"]); q != "[map[available:0 queue:fanout retryable:0 running:0 scheduled:0] map[available:2 queue:send retryable:0 running:0 scheduled:0]]" {
		t.Fatalf("queues %s", q)
	}
	expect(t, b.do(t, "GET", "/v1/overview?since=x", adminToken, nil), 400, wire.CodeBadRequest)
}

// TestWebhookDeliveryPreview: a failed webhook delivery can be previewed:
// its destination, redacted as in the logs, and the body every attempt posts
// (the delivery's ids, the recipient, the notification's params).
func TestWebhookDeliveryPreview(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(consoleConfig, "\nchannels:\n", `
  ping:
    channels:
      webhook: {default: immediate}
channels:
  webhook: {secret: preview-webhook-secret-0123456789abcdef}
`, 1)
	b := setup(t, setupOpts{yaml: yaml})
	expect(t, b.do(t, "PUT", "/v1/recipients/w1", adminToken,
		map[string]any{"webhook_url": "https://user:pw@hooks.example.test/in?token=s3cret"}), 200, "")
	nid, ids := ledgerFixture(t, b, "ping", "p-1", [4]string{"webhook", "failed", "w1", "1"})
	r := b.do(t, "GET", "/v1/deliveries/"+ids[0]+"/preview", adminToken, nil)
	expect(t, r, 200, "")
	parts := map[string]string{}
	for _, p := range r.body["parts"].([]any) {
		m := p.(map[string]any)
		parts[m["name"].(string)] = m["value"].(string)
	}
	if parts["url"] != "https://hooks.example.test/in" {
		t.Errorf("url part %q, want the destination without its credentials and query", parts["url"])
	}
	var body struct {
		Type string
		Data struct {
			ID, NotificationID, Notifier, Key string
			Recipient                         struct{ ID string }
			Params                            map[string]any
		}
	}
	if err := json.Unmarshal([]byte(parts["body"]), &body); err != nil {
		t.Fatalf("body part %q: %v", parts["body"], err)
	}
	if body.Type != "ping" || body.Data.ID != ids[0] || body.Data.Notifier != "ping" || body.Data.Key != "p-1" ||
		body.Data.Recipient.ID != "w1" || body.Data.Params["post_title"] != "Hello" {
		t.Fatalf("body %s, want the ping of notification %s to w1 as delivery %s", parts["body"], nid, ids[0])
	}
}
