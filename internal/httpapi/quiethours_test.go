package httpapi_test

import (
	"fmt"
	"testing"

	"github.com/notifyd/notifyd/internal/wire"
)

// Quiet hours on the admin profile: written when given, kept when absent
// (the recipient sets them), cleared by null; a malformed value is a 422
// naming quiet_hours, and nothing is written.
func TestProfileQuietHours(t *testing.T) {
	t.Parallel()
	b := setup(t)
	night := map[string]any{"start": "22:00", "end": "07:00"}
	r := b.do(t, "PUT", "/v1/recipients/ada", adminToken, map[string]any{"timezone": "Europe/Paris", "quiet_hours": night})
	expect(t, r, 200, "")
	if fmt.Sprint(r.body["quiet_hours"]) != fmt.Sprint(night) {
		t.Fatalf("put: %s", r.raw)
	}
	r = b.do(t, "PUT", "/v1/recipients/ada", adminToken, map[string]any{"email": "ada@example.com"})
	expect(t, r, 200, "")
	if fmt.Sprint(r.body["quiet_hours"]) != fmt.Sprint(night) {
		t.Fatalf("a profile write without quiet_hours changed them: %s", r.raw)
	}
	for _, bad := range []any{
		map[string]any{"start": "22:00"},
		map[string]any{"start": "22:00", "end": "22:00"},
		map[string]any{"start": "25:00", "end": "07:00"},
		map[string]any{"start": "10pm", "end": "07:00"},
		map[string]any{"start": "22:00", "end": "07:00", "zone": "UTC"},
		"22:00-07:00",
	} {
		r := b.do(t, "PUT", "/v1/recipients/ada", adminToken, map[string]any{"quiet_hours": bad})
		expect(t, r, 422, wire.CodeInvalidRequest)
		if d := r.errDetails(); len(d) != 1 || d[0].(map[string]any)["field"] != "quiet_hours" {
			t.Fatalf("%v: details %s", bad, r.raw)
		}
	}
	// A quiet-hours window with a timezone that does not exist is refused
	// for the timezone.
	r = b.do(t, "PUT", "/v1/recipients/ada", adminToken, map[string]any{"timezone": "Mars/Olympus", "quiet_hours": night})
	expect(t, r, 422, wire.CodeInvalidRequest)
	got := b.do(t, "GET", "/v1/recipients/ada", adminToken, nil)
	if got.body["email"] != "ada@example.com" || fmt.Sprint(got.body["quiet_hours"]) != fmt.Sprint(night) {
		t.Fatalf("a refused write changed the profile: %s", got.raw)
	}
	r = b.do(t, "PUT", "/v1/recipients/ada", adminToken, map[string]any{"quiet_hours": nil})
	expect(t, r, 200, "")
	if r.body["quiet_hours"] != nil {
		t.Fatalf("null did not clear: %s", r.raw)
	}
}

// The recipient reads and sets their own quiet hours with their token (the
// preference center's calls); the admin twin takes the id from the path.
func TestRecipientQuietHours(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := recipientToken(t, "grace")
	r := b.do(t, "GET", "/v1/quiet-hours", tok, nil)
	expect(t, r, 200, "")
	if r.body["quiet_hours"] != nil || r.body["timezone"] != "" {
		t.Fatalf("no profile: %s", r.raw)
	}
	r = b.do(t, "PUT", "/v1/quiet-hours", tok, map[string]any{"quiet_hours": map[string]any{"start": "23:30", "end": "06:15"}})
	expect(t, r, 200, "")
	want := "map[end:06:15 start:23:30]"
	if fmt.Sprint(r.body["quiet_hours"]) != want {
		t.Fatalf("put: %s", r.raw)
	}
	expect(t, b.do(t, "PUT", "/v1/quiet-hours", tok, map[string]any{"quiet_hours": map[string]any{"start": "7", "end": "8"}}),
		422, wire.CodeInvalidRequest)
	expect(t, b.do(t, "PUT", "/v1/quiet-hours", tok, map[string]any{}), 422, wire.CodeInvalidRequest)
	expect(t, b.do(t, "PUT", "/v1/quiet-hours", tok, `{"quiet_hours": `), 400, wire.CodeBadRequest)
	r = b.do(t, "GET", "/v1/recipients/grace/quiet-hours", adminToken, nil)
	expect(t, r, 200, "")
	if fmt.Sprint(r.body["quiet_hours"]) != want {
		t.Fatalf("admin twin: %s", r.raw)
	}
	// What GET answers can be written back.
	expect(t, b.do(t, "PUT", "/v1/quiet-hours", tok, r.raw), 200, "")
	expect(t, b.do(t, "PUT", "/v1/quiet-hours", tok, map[string]any{"quiet_hours": nil}), 200, "")
	if n := count(t, b.pool, `SELECT count(*) FROM notify_recipients WHERE id = 'grace' AND quiet_hours IS NULL`); n != 1 {
		t.Fatalf("null did not clear the stored value")
	}
	expect(t, b.do(t, "GET", "/v1/quiet-hours", "", nil), 401, wire.CodeUnauthorized)
}

// GET /v1/notifications/{id} shows the workflow statuses: when a scheduled
// delivery is due, and the delivery that carried a batched one.
func TestGetNotificationWorkflowStatuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sent := b.do(t, "POST", "/v1/notifications", adminToken, sendBody("c-wf"))
	expect(t, sent, 202, "")
	id := sent.body["id"].(string)
	lead := "01930000-0000-7000-8000-000000000001"
	if _, err := b.pool.Exec(t.Context(), `
		INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, next_attempt_at, batched_into, last_error)
		VALUES (gen_random_uuid(), $1, 'comment.created', 'c-wf', 'u1', 'email', 'immediate', 'scheduled', '2030-01-02T03:34:05Z', NULL, NULL),
		       (gen_random_uuid(), $1, 'comment.created', 'c-wf', 'u2', 'email', 'immediate', 'batched', NULL, $2, NULL),
		       (gen_random_uuid(), $1, 'comment.created', 'c-wf', 'u3', 'email', 'immediate', 'throttled', NULL, NULL, 'throttled: at most 5')`,
		id, lead); err != nil {
		t.Fatal(err)
	}
	r := b.do(t, "GET", "/v1/notifications/"+id, adminToken, nil)
	expect(t, r, 200, "")
	got := map[string]map[string]any{}
	for _, d := range r.body["deliveries"].([]any) {
		m := d.(map[string]any)
		got[m["recipient"].(string)] = m
	}
	if d := got["u1"]; d["status"] != "scheduled" || d["next_attempt_at"] != "2030-01-02T03:34:05Z" {
		t.Fatalf("scheduled delivery %v", d)
	}
	if d := got["u2"]; d["status"] != "batched" || d["batched_into"] != lead || d["next_attempt_at"] != nil {
		t.Fatalf("batched delivery %v", d)
	}
	if d := got["u3"]; d["status"] != "throttled" || d["last_error"] != "throttled: at most 5" {
		t.Fatalf("throttled delivery %v", d)
	}
}
