package httpapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/server/servertest"
)

// The SQL API refuses what the HTTP API refuses, with the same limits: the
// same bad sends go through POST /v1/notifications (a 4xx), notify_send as
// an application calls it (SQLSTATE 22023 naming the field) and the Go API
// (an error naming the field), and none of them writes anything. The limits
// are the config's (http.max_topics, http.max_body, 10 times max_recipients
// before duplicates collapse, 255 bytes for an id) and send_at within 10
// years of now.
func TestSQLAPIEnforcesTheHTTPLimits(t *testing.T) {
	t.Parallel()
	const maxBody = 16 << 10
	b := setup(t, setupOpts{maxBody: maxBody})
	ctx := t.Context()
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_tenants (id) VALUES ('acme')`); err != nil {
		t.Fatal(err)
	}
	client, err := notifyd.NewClient(b.pool, notifyd.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}

	type send struct {
		key, actor, tenant string
		recipients         []string
		topics             []string
		params             map[string]any
		sendAt             string // RFC 3339, or PostgreSQL's infinity words (SQL only)
	}
	ok := send{key: "k", recipients: []string{"u1"}, params: map[string]any{"post_title": "Hi"}}
	with := func(f func(*send)) send { s := ok; s.recipients = []string{"u1"}; f(&s); return s }
	long := strings.Repeat("x", 256)
	many := func(n int, f string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(f, i)
		}
		return out
	}
	// The same id n times: one recipient once duplicates collapse.
	same := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "u1"
		}
		return out
	}
	now := time.Now().UTC()
	tests := []struct {
		name   string
		s      send
		status int    // POST /v1/notifications; 0 when JSON cannot say it
		field  string // what notify_send and the Go API name
	}{
		{"topics over http.max_topics", with(func(s *send) { s.topics = many(101, "t%d") }), 422, "topics"},
		{"recipients over 10 times max_recipients", with(func(s *send) { s.recipients = same(31) }), 422, "recipients"},
		{"params over http.max_body", with(func(s *send) { s.params = map[string]any{"post_title": strings.Repeat("p", maxBody)} }), 413, "params"},
		{"send_at 11 years ahead", with(func(s *send) { s.sendAt = now.AddDate(11, 0, 0).Format(time.RFC3339) }), 422, "send_at"},
		{"send_at 11 years ago", with(func(s *send) { s.sendAt = now.AddDate(-11, 0, 0).Format(time.RFC3339) }), 422, "send_at"},
		{"send_at year 9999", with(func(s *send) { s.sendAt = "9999-12-31T23:59:59Z" }), 422, "send_at"},
		{"send_at infinity", with(func(s *send) { s.sendAt = "infinity" }), 0, "send_at"},
		{"send_at -infinity", with(func(s *send) { s.sendAt = "-infinity" }), 0, "send_at"},
		{"long key", with(func(s *send) { s.key = long }), 422, "key"},
		{"long actor", with(func(s *send) { s.actor = long }), 422, "actor"},
		{"long topic", with(func(s *send) { s.topics = []string{long} }), 422, "topics[0]"},
		{"long recipient id", with(func(s *send) { s.recipients = []string{long} }), 422, "recipients[0].id"},
		{"long tenant", with(func(s *send) { s.tenant = long }), 422, "tenant"},
	}
	for _, tt := range tests {
		s := tt.s
		// HTTP.
		if tt.status != 0 {
			body := map[string]any{"notifier": "comment.created", "key": s.key, "recipients": s.recipients,
				"topics": s.topics, "params": s.params}
			if s.actor != "" {
				body["actor"] = s.actor
			}
			if s.tenant != "" {
				body["tenant"] = s.tenant
			}
			if s.sendAt != "" {
				body["send_at"] = s.sendAt
			}
			r := b.do(t, "POST", "/v1/notifications", adminToken, body)
			if r.status != tt.status {
				t.Errorf("%s: POST /v1/notifications = %d %s, want %d", tt.name, r.status, r.raw, tt.status)
			} else if tt.status != http.StatusRequestEntityTooLarge {
				d, _ := r.errDetails()[0].(map[string]any)
				if d["field"] != tt.field {
					t.Errorf("%s: POST /v1/notifications names %v, want %s", tt.name, d["field"], tt.field)
				}
			}
		}
		// SQL, as an application calls it.
		var sendAt, actor, tenant any
		if s.sendAt != "" {
			sendAt = s.sendAt
		}
		if s.actor != "" {
			actor = s.actor
		}
		if s.tenant != "" {
			tenant = s.tenant
		}
		recipients := "[]"
		if len(s.recipients) > 0 {
			recipients = `["` + strings.Join(s.recipients, `", "`) + `"]`
		}
		topics := s.topics
		if topics == nil {
			topics = []string{}
		}
		params := fmt.Sprintf(`{"post_title": %q}`, s.params["post_title"])
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT * FROM notify_send($1, $2, $3::jsonb, $4::jsonb, $5::text[], $6, $7::timestamptz, $8)`,
				"comment.created", s.key, recipients, params, topics, actor, sendAt, tenant)
			return err
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != tt.field {
			t.Errorf("%s: notify_send = %v, want SQLSTATE 22023 naming %s", tt.name, err, tt.field)
		}
		// The Go API (SendTx, without a config: the SQL checks).
		if !strings.Contains(s.sendAt, "infinity") {
			n := notifyd.Notification{Notifier: "comment.created", Key: s.key, Actor: s.actor, Tenant: s.tenant,
				Topics: s.topics, Params: s.params}
			for _, id := range s.recipients {
				n.Recipients = append(n.Recipients, notifyd.Recipient{ID: id})
			}
			if s.sendAt != "" {
				if n.SendAt, err = time.Parse(time.RFC3339, s.sendAt); err != nil {
					t.Fatal(err)
				}
			}
			_, err = client.Send(ctx, n)
			var in *notifyd.InputError
			switch {
			case tt.field == "recipients" && errors.Is(err, notifyd.ErrTooManyRecipients):
			case errors.As(err, &in) && in.Field == tt.field:
			default:
				t.Errorf("%s: Send = %v, want an error naming %s", tt.name, err, tt.field)
			}
		}
	}
	if n := servertest.Count(t, b.pool, `SELECT (SELECT count(*) FROM notify_notifications) + (SELECT count(*) FROM river_job)`); n != 0 {
		t.Fatalf("refused sends wrote %d rows", n)
	}

	// A profile's data: PUT /v1/recipients and notify_put_recipient alike.
	big := map[string]any{"data": map[string]any{"blob": strings.Repeat("d", maxBody)}}
	if r := b.do(t, "PUT", "/v1/recipients/u1", adminToken, big); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("PUT /v1/recipients with %d bytes of data = %d %s, want 413", maxBody, r.status, r.raw)
	}
	_, err = b.pool.Exec(ctx, `SELECT notify_put_recipient('u1', jsonb_build_object('data', jsonb_build_object('blob', repeat('d', $1))))`, maxBody)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != "data" {
		t.Errorf("notify_put_recipient with %d bytes of data = %v, want SQLSTATE 22023 naming data", maxBody, err)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_recipients`); n != 0 {
		t.Fatalf("refused profiles wrote %d rows", n)
	}

	// What the limits allow goes through every door.
	for i, at := range []string{"", now.AddDate(9, 0, 0).Format(time.RFC3339), now.AddDate(-9, 0, 0).Format(time.RFC3339)} {
		body := map[string]any{"notifier": "comment.created", "key": fmt.Sprintf("ok-%d", i), "recipients": same(30),
			"topics": many(100, "t%d"), "params": map[string]any{"post_title": strings.Repeat("p", maxBody/2)}}
		if at != "" {
			body["send_at"] = at
		}
		if r := b.do(t, "POST", "/v1/notifications", adminToken, body); r.status != http.StatusAccepted {
			t.Errorf("a send at the limits (send_at %q) = %d %s, want 202", at, r.status, r.raw)
		}
	}
}

// Keys are per tenant over HTTP too: the same key sent for two tenants is
// two notifications, and DELETE /v1/notifications/{notifier}/{key}?tenant=
// cancels that tenant's only; without ?tenant= it is the notification sent
// with no tenant.
func TestCancelByKeyIsPerTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO notify_tenants (id) VALUES ('acme'), ('globex')`); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, tenant := range []string{"acme", "globex", "acme"} {
		r := b.do(t, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "k-1",
			"tenant": tenant, "recipients": []string{"u1"}, "params": map[string]any{"post_title": "Hi"}})
		id, _ := r.body["id"].(string)
		switch {
		case ids[tenant] == "" && r.status == http.StatusAccepted:
			ids[tenant] = id
		case ids[tenant] == id && r.status == http.StatusOK && r.body["duplicate"] == true:
		default:
			t.Fatalf("send k-1 for %s = %d %s (sent before: %v)", tenant, r.status, r.raw, ids)
		}
	}
	if ids["acme"] == ids["globex"] {
		t.Fatalf("acme and globex share notification %s", ids["acme"])
	}
	expect(t, b.do(t, "DELETE", "/v1/notifications/comment.created/k-1", adminToken, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "DELETE", "/v1/notifications/comment.created/k-1?tenant=acme", adminToken, nil), 200, "")
	status := func(id string) string {
		var s string
		if err := b.pool.QueryRow(t.Context(), `SELECT status FROM notify_notifications WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := status(ids["acme"]); got != "cancelled" {
		t.Fatalf("acme's k-1 is %s, want cancelled", got)
	}
	if got := status(ids["globex"]); got == "cancelled" {
		t.Fatal("acme's cancel cancelled globex's k-1")
	}
	// By id: the notification's own tenant.
	expect(t, b.do(t, "DELETE", "/v1/notifications/"+ids["globex"]+"?notifier=comment.created&key=k-1", adminToken, nil), 200, "")
	if got := status(ids["globex"]); got != "cancelled" {
		t.Fatalf("globex's k-1 is %s after DELETE by id, want cancelled", got)
	}
}

// Params the HTTP API refuses for a format (format: uri, uuid, date,
// date-time, email), an exclusive bound or an item count are refused by notify_send and the Go API too, before
// anything is written, at the same pointer; what the format allows passes
// all three.
func TestSQLAPIChecksParamFormatsAsHTTPDoes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: `
http: {admin_token: ` + adminToken + `, token_secret: ` + tokenSecret + `}
notifiers:
  link.shared:
    params:
      type: object
      properties:
        link: {type: string, format: uri}
        id: {type: string, format: uuid}
        day: {type: string, format: date}
        at: {type: string, format: date-time}
        mail: {type: string, format: email}
        share: {type: number, exclusiveMinimum: 0, exclusiveMaximum: 1}
        tags: {type: array, minItems: 1, maxItems: 2}
    channels:
      in_app: {title: "{{.link}}"}
`})
	ctx := t.Context()
	client, err := notifyd.NewClient(b.pool, notifyd.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]any{"/link": "example.com/a", "/id": "0190c6b2-7a3c-7def-8a12-3456789abcdx",
		"/day": "2026-13-01", "/at": "2026-12-07 20:00:00Z", "/mail": "ada.example.com", "/share": 1,
		"/tags": []string{"a", "b", "c"}}
	for pointer, v := range bad {
		params := map[string]any{pointer[1:]: v}
		r := b.do(t, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "link.shared", "key": "k",
			"recipients": []string{"u1"}, "params": params})
		if r.status != http.StatusUnprocessableEntity || r.errCode() != wire.CodeInvalidParams {
			t.Errorf("%s %q: POST /v1/notifications = %d %s, want 422 invalid_params", pointer, v, r.status, r.raw)
		}
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			raw, _ := json.Marshal(v)
			_, err := tx.Exec(ctx, `SELECT * FROM notify_send('link.shared', 'k', '["u1"]', jsonb_build_object($1::text, $2::jsonb))`,
				pointer[1:], string(raw))
			return err
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != "params" || pgErr.Detail != pointer {
			t.Errorf("%s %q: notify_send = %v, want SQLSTATE 22023 on params at %s", pointer, v, err, pointer)
		}
		_, err = client.Send(ctx, notifyd.Notification{Notifier: "link.shared", Key: "k",
			Recipients: []notifyd.Recipient{{ID: "u1"}}, Params: params})
		var pe *config.ParamsError
		if !errors.As(err, &pe) || pe.Details[0].Pointer != pointer {
			t.Errorf("%s %q: Send = %v, want a ParamsError at %s", pointer, v, err, pointer)
		}
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications`); n != 0 {
		t.Fatalf("refused sends wrote %d notifications", n)
	}
	good := map[string]any{"link": "https://example.com/a", "id": "0190c6b2-7a3c-7def-8a12-3456789abcde",
		"day": "2026-12-01", "at": "2026-12-07T20:00:00Z", "mail": "ada@example.com", "share": 0.5, "tags": []string{"a"}}
	if r := b.do(t, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "link.shared", "key": "ok-http",
		"recipients": []string{"u1"}, "params": good}); r.status != http.StatusAccepted {
		t.Errorf("good params over HTTP = %d %s", r.status, r.raw)
	}
	if _, err := client.Send(ctx, notifyd.Notification{Notifier: "link.shared", Key: "ok-go",
		Recipients: []notifyd.Recipient{{ID: "u1"}}, Params: good}); err != nil {
		t.Errorf("good params through the Go API: %v", err)
	}
}
