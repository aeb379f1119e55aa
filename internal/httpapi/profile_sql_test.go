package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/wire"
)

// storedProfile is recipient id's row as stored, without its id and times.
func storedProfile(t *testing.T, b *bundle, id string) string {
	t.Helper()
	var row string
	err := b.pool.QueryRow(context.Background(), `SELECT (to_jsonb(r) - 'id' - 'created_at' - 'updated_at')::text
FROM notify_recipients r WHERE id = $1`, id).Scan(&row)
	if err != nil {
		t.Fatalf("profile of %s: %v", id, err)
	}
	return row
}

// PUT /v1/recipients/{id}, the Go API and the SQL function write a profile
// through one definition, notify_put_recipient: the same profile written
// the three ways is the same row, and so is the same replacement.
func TestProfileWrittenThreeWays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	client, err := notifyd.NewClient(b.pool, notifyd.ClientConfig{Config: b.cfg})
	if err != nil {
		t.Fatal(err)
	}
	writes := []struct {
		http map[string]any
		go_  notifyd.Profile
		sql  string
	}{
		{
			http: map[string]any{"email": "ada@example.com", "name": "Ada", "locale": "pt-BR", "timezone": "Europe/Paris",
				"webhook_url": "https://hooks.example.com/ada", "phone": "+14155550123", "data": map[string]any{"plan": "pro", "seats": 3},
				"quiet_hours": map[string]any{"start": "22:00", "end": "07:00"}},
			go_: notifyd.Profile{Email: "ada@example.com", Name: "Ada", Locale: "pt-BR", Timezone: "Europe/Paris",
				WebhookURL: "https://hooks.example.com/ada", Phone: "+14155550123", Data: map[string]any{"plan": "pro", "seats": 3},
				QuietHours: &notifyd.QuietHours{Start: "22:00", End: "07:00"}},
			sql: `{"email": "ada@example.com", "name": "Ada", "locale": "pt-BR", "timezone": "Europe/Paris",
				"webhook_url": "https://hooks.example.com/ada", "phone": "+14155550123", "data": {"plan": "pro", "seats": 3},
				"quiet_hours": {"start": "22:00", "end": "07:00"}}`,
		},
		// A replacement: PUT and the Go API clear what they do not give and
		// keep quiet_hours; from SQL, null clears and an absent key keeps.
		{
			http: map[string]any{"email": "ada@example.org"},
			go_:  notifyd.Profile{Email: "ada@example.org"},
			sql: `{"email": "ada@example.org", "name": null, "locale": null, "timezone": "", "webhook_url": null,
				"phone": null, "data": null}`,
		},
	}
	for i, w := range writes {
		expect(t, b.do(t, "PUT", "/v1/recipients/via-http", adminToken, w.http), 200, "")
		if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return client.PutRecipientTx(ctx, tx, "via-go", w.go_) }); err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(ctx, `SELECT notify_put_recipient('via-sql', $1)`, w.sql); err != nil {
			t.Fatal(err)
		}
		h, g, s := storedProfile(t, b, "via-http"), storedProfile(t, b, "via-go"), storedProfile(t, b, "via-sql")
		if h != g || g != s {
			t.Fatalf("write %d differs:\nHTTP %s\nGo   %s\nSQL  %s", i, h, g, s)
		}
		if i == 0 && !strings.Contains(h, `"timezone": "Europe/Paris"`) {
			t.Fatalf("write %d: %s", i, h)
		}
		if i == 1 && (!strings.Contains(h, `"name": null`) || !strings.Contains(h, `"quiet_hours": {"end": "07:00", "start": "22:00"}`)) {
			t.Fatalf("write %d: %s", i, h)
		}
	}
}

// Every rule of a profile field refuses the value the same way from SQL
// (SQLSTATE 22023, the field in COLUMN and leading the message), over HTTP
// (422 invalid_request whose detail names the field with the same words)
// and from the Go API (an *InputError for the field), and writes nothing.
func TestProfileInvalidFields(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	client, err := notifyd.NewClient(b.pool, notifyd.ClientConfig{Config: b.cfg})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 256)
	tests := []struct {
		field string
		value any
		http  int              // the status over HTTP: 422, or 400 for a JSON type the request cannot hold
		go_   *notifyd.Profile // the same through the Go API, where it can express it
	}{
		{"email", "not an address", 422, &notifyd.Profile{Email: "not an address"}},
		{"email", "Ada <ada@example.com>", 422, &notifyd.Profile{Email: "Ada <ada@example.com>"}},
		{"email", "ada@example.com ", 422, &notifyd.Profile{Email: "ada@example.com "}},
		{"email", strings.Repeat("a", 250) + "@x.io", 422, &notifyd.Profile{Email: strings.Repeat("a", 250) + "@x.io"}},
		{"email", 5, 400, nil},
		{"name", long, 422, &notifyd.Profile{Name: long}},
		{"locale", "english please", 422, &notifyd.Profile{Locale: "english please"}},
		{"locale", "e", 422, &notifyd.Profile{Locale: "e"}},
		{"timezone", "Mars/Olympus", 422, &notifyd.Profile{Timezone: "Mars/Olympus"}},
		{"timezone", "Local", 422, &notifyd.Profile{Timezone: "Local"}},
		{"timezone", "europe/paris", 422, &notifyd.Profile{Timezone: "europe/paris"}},
		{"timezone", "EST5", 422, &notifyd.Profile{Timezone: "EST5"}},
		{"timezone", "../../etc/passwd", 422, &notifyd.Profile{Timezone: "../../etc/passwd"}},
		{"webhook_url", "ftp://example.com/x", 422, &notifyd.Profile{WebhookURL: "ftp://example.com/x"}},
		{"webhook_url", "/relative", 422, &notifyd.Profile{WebhookURL: "/relative"}},
		{"webhook_url", "https://", 422, &notifyd.Profile{WebhookURL: "https://"}},
		{"webhook_url", "https://exa mple.com/", 422, &notifyd.Profile{WebhookURL: "https://exa mple.com/"}},
		{"phone", "555-1234", 422, &notifyd.Profile{Phone: "555-1234"}},
		{"phone", "+0123456789", 422, &notifyd.Profile{Phone: "+0123456789"}},
		{"quiet_hours", map[string]any{"start": "25:00", "end": "07:00"}, 422, &notifyd.Profile{QuietHours: &notifyd.QuietHours{Start: "25:00", End: "07:00"}}},
		{"quiet_hours", map[string]any{"start": "22:00", "end": "22:00"}, 422, &notifyd.Profile{QuietHours: &notifyd.QuietHours{Start: "22:00", End: "22:00"}}},
		{"quiet_hours", map[string]any{"start": "22:00"}, 422, nil},
		{"quiet_hours", "22:00-07:00", 422, nil},
		{"tokens_valid_after", "yesterday", 422, nil},
		{"tokens_valid_after", "2024-02-30T00:00:00Z", 422, nil},
		{"tokens_valid_after", "2024-01-01 00:00:00", 422, nil},
		{"tokens_valid_after", 1700000000, 400, nil},
		{"data", "x", 400, nil},
		{"data", []any{1}, 400, nil},
	}
	for _, tt := range tests {
		raw, err := json.Marshal(map[string]any{tt.field: tt.value})
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.pool.Exec(ctx, `SELECT notify_put_recipient('u1', $1)`, string(raw))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != tt.field ||
			!strings.HasPrefix(pgErr.Message, tt.field+": ") {
			t.Errorf("SQL %s: %v, want 22023 naming %s", raw, err, tt.field)
			continue
		}
		words := strings.TrimPrefix(pgErr.Message, tt.field+": ")

		r := b.do(t, "PUT", "/v1/recipients/u1", adminToken, string(raw))
		if r.status != tt.http {
			t.Errorf("PUT %s: %d %s, want %d", raw, r.status, r.raw, tt.http)
		} else if tt.http == 422 {
			d, _ := r.errDetails()[0].(map[string]any)
			if r.errCode() != wire.CodeInvalidRequest || d["field"] != tt.field || d["message"] != words {
				t.Errorf("PUT %s: %s, want the detail {%s: %s}", raw, r.raw, tt.field, words)
			}
		} else if r.errCode() != wire.CodeBadRequest || !strings.Contains(r.errMessage(), tt.field) {
			t.Errorf("PUT %s: %s, want a 400 naming %s", raw, r.raw, tt.field)
		}

		if tt.go_ != nil {
			err := client.PutRecipient(ctx, "u1", *tt.go_)
			var inputErr *notifyd.InputError
			if !errors.As(err, &inputErr) || inputErr.Field != tt.field || inputErr.Message != words {
				t.Errorf("PutRecipient %+v: %v, want %s: %s", *tt.go_, err, tt.field, words)
			}
		}
	}
	// An unknown key: from SQL the key is the field; over HTTP, unknown
	// fields are malformed requests.
	_, err = b.pool.Exec(ctx, `SELECT notify_put_recipient('u1', '{"nickname": "x"}')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != "nickname" || pgErr.Message != "nickname: unknown field" {
		t.Errorf("SQL nickname: %v", err)
	}
	expect(t, b.do(t, "PUT", "/v1/recipients/u1", adminToken, `{"nickname": "x"}`), 400, wire.CodeBadRequest)
	if n := count(t, b.pool, `SELECT count(*) FROM notify_recipients`); n != 0 {
		t.Fatalf("%d profiles written by refused writes", n)
	}
}
