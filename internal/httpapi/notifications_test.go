package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/wire"
)

func sendBody(key string) map[string]any {
	return map[string]any{
		"notifier":   "comment.created",
		"key":        key,
		"actor":      "u0",
		"recipients": []any{"u1", map[string]any{"id": "u2", "reason": "author"}},
		"topics":     []string{"post-9"},
		"params":     map[string]any{"post_title": "Hello", "author_name": "Ada"},
	}
}

func TestSendAndDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first := b.do(t, "POST", "/v1/notifications", adminToken, sendBody("c-1"))
	expect(t, first, 202, "")
	id, _ := first.body["id"].(string)
	if len(id) != 36 || first.body["duplicate"] != false {
		t.Fatalf("first send: %s", first.raw)
	}
	second := b.do(t, "POST", "/v1/notifications", adminToken, sendBody("c-1"))
	expect(t, second, 200, "")
	if second.body["id"] != id || second.body["duplicate"] != true {
		t.Fatalf("second send: %s, want id %s duplicate true", second.raw, id)
	}

	// One notification with what was sent, and one fan-out job.
	var recipients, reasons, topics []string
	var actor, title string
	err := b.pool.QueryRow(t.Context(), `SELECT recipients, reasons, topics, actor, params->>'post_title'
		FROM notify_notifications WHERE id = $1`, id).Scan(&recipients, &reasons, &topics, &actor, &title)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(recipients, []string{"u1", "u2"}) || !slices.Equal(reasons, []string{"direct", "author"}) ||
		!slices.Equal(topics, []string{"post-9"}) || actor != "u0" || title != "Hello" {
		t.Fatalf("stored %v %v %v %q %q", recipients, reasons, topics, actor, title)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_notifications`); n != 1 {
		t.Fatalf("%d notifications, want 1", n)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout'`); n != 1 {
		t.Fatalf("%d fan-out jobs, want 1", n)
	}
}

func TestSendConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const senders = 8
	var wg sync.WaitGroup
	results := make([]response, senders)
	for i := range senders {
		wg.Go(func() { results[i] = b.do(t, "POST", "/v1/notifications", adminToken, sendBody("race")) })
	}
	wg.Wait()
	fresh := 0
	for _, r := range results {
		switch r.status {
		case 202:
			fresh++
		case 200:
		default:
			t.Fatalf("concurrent send: %d %s", r.status, r.raw)
		}
		if r.body["id"] != results[0].body["id"] {
			t.Fatalf("different ids: %s vs %s", r.raw, results[0].raw)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d sends answered 202, want exactly 1", fresh)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_notifications`); n != 1 {
		t.Fatalf("%d notifications, want 1", n)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout'`); n != 1 {
		t.Fatalf("%d fan-out jobs, want 1", n)
	}
}

func TestSendRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)

	tests := []struct {
		name   string
		body   any
		status int
		code   string
		detail map[string]any // a detail that must be present
	}{
		{
			name:   "params fail the schema",
			body:   `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":7}}`,
			status: 422, code: wire.CodeInvalidParams,
			detail: map[string]any{"pointer": "/post_title"},
		},
		{
			name:   "required param missing",
			body:   `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{}}`,
			status: 422, code: wire.CodeInvalidParams,
			detail: map[string]any{"pointer": "/post_title"},
		},
		{
			name:   "unknown notifier",
			body:   `{"notifier":"nope","key":"k","recipients":["u1"],"params":{}}`,
			status: 404, code: wire.CodeUnknownNotifier,
		},
		{
			name:   "too many recipients",
			body:   `{"notifier":"comment.created","key":"k","recipients":["a","b","c","d"],"params":{"post_title":"x"}}`,
			status: 422, code: wire.CodeTooManyRecipients,
		},
		{
			name:   "missing key",
			body:   `{"notifier":"comment.created","recipients":["u1"],"params":{"post_title":"x"}}`,
			status: 422, code: wire.CodeInvalidRequest,
			detail: map[string]any{"field": "key"},
		},
		{
			name:   "no audience",
			body:   `{"notifier":"comment.created","key":"k","params":{"post_title":"x"}}`,
			status: 422, code: wire.CodeInvalidRequest,
			detail: map[string]any{"field": "recipients"},
		},
		{
			name:   "recipient id too long",
			body:   `{"notifier":"comment.created","key":"k","recipients":["` + strings.Repeat("x", 256) + `"],"params":{"post_title":"x"}}`,
			status: 422, code: wire.CodeInvalidRequest,
			detail: map[string]any{"field": "recipients[0].id"},
		},
		{
			name:   "recipient element of the wrong type",
			body:   `{"notifier":"comment.created","key":"k","recipients":["u1", 5],"params":{"post_title":"x"}}`,
			status: 400, code: wire.CodeBadRequest,
			detail: map[string]any{"field": "recipients[1]"},
		},
		{
			name:   "recipient object with an unknown field",
			body:   `{"notifier":"comment.created","key":"k","recipients":[{"id":"u1","why":"x"}],"params":{"post_title":"x"}}`,
			status: 400, code: wire.CodeBadRequest,
			detail: map[string]any{"field": "recipients[0].why"},
		},
		{
			name:   "recipient object with a wrong type",
			body:   `{"notifier":"comment.created","key":"k","recipients":[{"id":5}],"params":{"post_title":"x"}}`,
			status: 400, code: wire.CodeBadRequest,
			detail: map[string]any{"field": "recipients[0].id"},
		},
		{
			name:   "params not an object",
			body:   `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":[1]}`,
			status: 400, code: wire.CodeBadRequest,
			detail: map[string]any{"field": "params"},
		},
		{
			name:   "bad send_at",
			body:   `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x"},"send_at":"tomorrow"}`,
			status: 400, code: wire.CodeBadRequest,
			detail: map[string]any{"field": "send_at"},
		},
		{
			name:   "notifier of the wrong type",
			body:   `{"notifier":1,"key":"k","recipients":["u1"],"params":{}}`,
			status: 400, code: wire.CodeBadRequest,
			detail: map[string]any{"field": "notifier"},
		},
		{
			name:   "topics of the wrong type",
			body:   `{"notifier":"comment.created","key":"k","topics":"post-9","params":{"post_title":"x"}}`,
			status: 400, code: wire.CodeBadRequest,
			detail: map[string]any{"field": "topics"},
		},
		{
			name:   "unknown field",
			body:   `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x"},"priority":1}`,
			status: 400, code: wire.CodeBadRequest,
			detail: map[string]any{"field": "priority"},
		},
		{name: "malformed JSON", body: `{"notifier":"comment.created",`, status: 400, code: wire.CodeBadRequest},
		{name: "syntax error", body: `{"notifier" "comment.created"}`, status: 400, code: wire.CodeBadRequest},
		{name: "trailing data", body: `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x"}} {}`, status: 400, code: wire.CodeBadRequest},
		{name: "not an object", body: `["comment.created"]`, status: 400, code: wire.CodeBadRequest},
		{name: "null", body: `null`, status: 400, code: wire.CodeBadRequest},
		{name: "empty body", body: ``, status: 400, code: wire.CodeBadRequest},
		{name: "invalid UTF-8", body: "{\"notifier\":\"comment.created\",\"key\":\"k\xff\",\"recipients\":[\"u1\"],\"params\":{\"post_title\":\"x\"}}", status: 400, code: wire.CodeBadRequest},
		{name: "NUL in a string", body: `{"notifier":"comment.created","key":"k","recipients":[{"id":"u1","reason":"a\u0000b"}],"params":{"post_title":"x"}}`, status: 400, code: wire.CodeBadRequest},
		{name: "NUL in params", body: `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"\u0000"}}`, status: 400, code: wire.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := b.do(t, "POST", "/v1/notifications", adminToken, tt.body)
			expect(t, r, tt.status, tt.code)
			if tt.detail != nil && !hasDetail(r.errDetails(), tt.detail) {
				t.Fatalf("details %s lack %v", r.raw, tt.detail)
			}
			if f, ok := tt.detail["field"].(string); ok && !strings.Contains(r.errMessage(), f) {
				t.Fatalf("message %q does not name the field %q", r.errMessage(), f)
			}
		})
	}
	// Nothing was written by any of them.
	if n := count(t, b.pool, `SELECT count(*) FROM notify_notifications`); n != 0 {
		t.Fatalf("%d notifications written by refused requests", n)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM river_job`); n != 0 {
		t.Fatalf("%d jobs written by refused requests", n)
	}
}

func hasDetail(details []any, want map[string]any) bool {
	for _, d := range details {
		m, _ := d.(map[string]any)
		ok := m["message"] != nil
		for k, v := range want {
			if m[k] != v {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"` +
		strings.Repeat("x", 2<<20) + `"}}`
	expect(t, b.do(t, "POST", "/v1/notifications", adminToken, big), 413, wire.CodeBodyTooLarge)
	if n := count(t, b.pool, `SELECT count(*) FROM notify_notifications`); n != 0 {
		t.Fatalf("%d notifications written", n)
	}

	// The limit is http.max_body, and a body just under it passes.
	small := setup(t, setupOpts{maxBody: 200})
	fits := `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x"}}`
	expect(t, small.do(t, "POST", "/v1/notifications", adminToken, fits), 202, "")
	over := `{"notifier":"comment.created","key":"k2","recipients":["u1"],"params":{"post_title":"` + strings.Repeat("x", 200) + `"}}`
	expect(t, small.do(t, "POST", "/v1/notifications", adminToken, over), 413, wire.CodeBodyTooLarge)
}

func TestBodyTooLargeChunked(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{maxBody: 1 << 10})
	// A body of unknown length is sent chunked: there is no Content-Length to
	// refuse early, so the limit must hold while reading.
	body := io.MultiReader(strings.NewReader(`{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"`),
		strings.NewReader(strings.Repeat("x", 4<<10)), strings.NewReader(`"}}`))
	req, err := http.NewRequestWithContext(t.Context(), "POST", b.srv.URL+"/v1/notifications", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("chunked oversized body: %d, want 413", resp.StatusCode)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_notifications`); n != 0 {
		t.Fatalf("%d notifications written", n)
	}
}

func TestGetNotification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sent := b.do(t, "POST", "/v1/notifications", adminToken, sendBody("c-get"))
	expect(t, sent, 202, "")
	id := sent.body["id"].(string)

	// What fan-out would have written: an email delivery and an inbox item.
	if _, err := b.pool.Exec(t.Context(), `
		INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, reason, mode, status, attempts, last_error)
		VALUES (gen_random_uuid(), $1, 'comment.created', 'c-get', 'u1', 'email', 'direct', 'immediate', 'failed', 2, 'smtp 451')`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), `
		INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, reason, title)
		VALUES (gen_random_uuid(), $1, 'u2', 'comment.created', 'c-get', 'author', 'hi')`, id); err != nil {
		t.Fatal(err)
	}

	r := b.do(t, "GET", "/v1/notifications/"+id, adminToken, nil)
	expect(t, r, 200, "")
	for _, k := range []string{"id", "notifier", "key", "status", "error", "created_at", "deliveries"} {
		if _, ok := r.body[k]; !ok {
			t.Fatalf("response lacks %q: %s", k, r.raw)
		}
	}
	if r.body["id"] != id || r.body["notifier"] != "comment.created" || r.body["key"] != "c-get" || r.body["status"] != "pending" {
		t.Fatalf("notification %s", r.raw)
	}
	deliveries := r.body["deliveries"].([]any)
	if len(deliveries) != 2 {
		t.Fatalf("deliveries %s, want 2", r.raw)
	}
	byChannel := map[string]map[string]any{}
	for _, d := range deliveries {
		m := d.(map[string]any)
		for _, k := range []string{"recipient", "channel", "reason", "mode", "status", "attempts", "last_error", "updated_at"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("delivery lacks %q: %v", k, m)
			}
		}
		byChannel[m["channel"].(string)] = m
	}
	if e := byChannel["email"]; e["recipient"] != "u1" || e["status"] != "failed" || e["attempts"] != float64(2) || e["last_error"] != "smtp 451" {
		t.Fatalf("email delivery %v", e)
	}
	if ia := byChannel["in_app"]; ia["recipient"] != "u2" || ia["reason"] != "author" || ia["status"] != "sent" {
		t.Fatalf("in_app delivery %v", ia)
	}

	expect(t, b.do(t, "GET", "/v1/notifications/0190b8a4-0000-7000-8000-000000000000", adminToken, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "GET", "/v1/notifications/not-a-uuid", adminToken, nil), 404, wire.CodeNotFound)
}

func TestCancelNotification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sent := b.do(t, "POST", "/v1/notifications", adminToken, sendBody("c/slash"))
	expect(t, sent, 202, "")
	id := sent.body["id"].(string)
	if _, err := b.pool.Exec(t.Context(), `
		INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, reason, mode, status)
		VALUES (gen_random_uuid(), $1, 'comment.created', 'c/slash', 'u1', 'email', 'direct', 'immediate', 'pending')`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), `
		INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, reason, title)
		VALUES (gen_random_uuid(), $1, 'u1', 'comment.created', 'c/slash', 'direct', 'hi')`, id); err != nil {
		t.Fatal(err)
	}

	r := b.do(t, "DELETE", "/v1/notifications/comment.created/c/slash", adminToken, nil)
	expect(t, r, 200, "")
	if r.body["cancelled"] != float64(2) {
		t.Fatalf("cancel: %s, want cancelled 2 (a delivery and an inbox item)", r.raw)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'cancelled'`, id); n != 1 {
		t.Fatal("notification not cancelled")
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE key = 'c/slash'`); n != 0 {
		t.Fatalf("%d inbox items left", n)
	}
	// Again: it exists, nothing left to withdraw.
	r = b.do(t, "DELETE", "/v1/notifications/comment.created/c%2Fslash", adminToken, nil)
	expect(t, r, 200, "")
	if r.body["cancelled"] != float64(0) {
		t.Fatalf("second cancel: %s", r.raw)
	}
	expect(t, b.do(t, "DELETE", "/v1/notifications/comment.created/never-sent", adminToken, nil), 404, wire.CodeNotFound)
}

// DELETE of a notification with more inbox items than a transaction may
// write change-log rows (65,536) withdraws them all.
func TestCancelNotificationOfMoreThan65536Items(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 66000
	const id = "01900000-0000-7000-8000-00000000c0de"
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO notify_notifications (id, notifier, key, status, normalized)
		VALUES ($1, 'comment.created', 'wide', 'fanned_out', true)`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), `
		INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, reason, title)
		SELECT gen_random_uuid(), $1, 'w' || g, 'comment.created', 'wide', 'direct', 'hi' FROM generate_series(1, $2::int) g`,
		id, n); err != nil {
		t.Fatal(err)
	}
	r := b.do(t, "DELETE", "/v1/notifications/comment.created/wide", adminToken, nil)
	expect(t, r, 200, "")
	if r.body["cancelled"] != float64(n) {
		t.Fatalf("cancel: %s, want cancelled %d", r.raw, n)
	}
	if left := count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE key = 'wide'`); left != 0 {
		t.Fatalf("%d inbox items left", left)
	}
}

func TestSendManyKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Distinct keys are distinct notifications, and send_at schedules.
	for i := range 3 {
		body := sendBody(fmt.Sprintf("k-%d", i))
		body["send_at"] = time.Now().AddDate(1, 0, 0).UTC().Format(time.RFC3339)
		expect(t, b.do(t, "POST", "/v1/notifications", adminToken, body), 202, "")
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE status = 'scheduled'`); n != 3 {
		t.Fatalf("%d scheduled notifications, want 3", n)
	}
}
