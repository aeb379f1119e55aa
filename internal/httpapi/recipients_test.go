package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/internal/wire"
)

func TestRecipientProfile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expect(t, b.do(t, "GET", "/v1/recipients/ada", adminToken, nil), 404, wire.CodeNotFound)

	profile := map[string]any{
		"email": "ada@example.com", "name": "Ada Lovelace", "locale": "en-GB", "timezone": "Europe/London",
		"webhook_url": "https://hooks.example.com/ada", "data": map[string]any{"plan": "pro", "seats": json.Number("12345678901234567890")},
	}
	r := b.do(t, "PUT", "/v1/recipients/ada", adminToken, profile)
	expect(t, r, 200, "")
	for k, v := range map[string]any{"id": "ada", "email": "ada@example.com", "name": "Ada Lovelace", "locale": "en-GB",
		"timezone": "Europe/London", "webhook_url": "https://hooks.example.com/ada"} {
		if r.body[k] != v {
			t.Fatalf("put response %s: %s is %v, want %v", r.raw, k, r.body[k], v)
		}
	}
	if !strings.Contains(string(r.raw), `12345678901234567890`) {
		t.Fatalf("a large integer in data lost precision: %s", r.raw)
	}
	got := b.do(t, "GET", "/v1/recipients/ada", adminToken, nil)
	expect(t, got, 200, "")
	if got.body["email"] != "ada@example.com" || got.body["data"].(map[string]any)["plan"] != "pro" {
		t.Fatalf("get: %s", got.raw)
	}

	// A 410 from the webhook marked it gone; the same URL keeps the mark, a new
	// URL clears it.
	if _, err := b.pool.Exec(t.Context(), `UPDATE notify_recipients SET webhook_gone_at = now() WHERE id = 'ada'`); err != nil {
		t.Fatal(err)
	}
	// What GET returned can be written back as is.
	r = b.do(t, "PUT", "/v1/recipients/ada", adminToken, got.raw)
	expect(t, r, 200, "")
	if r.body["webhook_gone_at"] == nil {
		t.Fatalf("same webhook_url cleared webhook_gone_at: %s", r.raw)
	}
	profile["webhook_url"] = "https://hooks.example.com/ada2"
	r = b.do(t, "PUT", "/v1/recipients/ada", adminToken, profile)
	expect(t, r, 200, "")
	if r.body["webhook_gone_at"] != nil {
		t.Fatalf("new webhook_url kept webhook_gone_at: %s", r.raw)
	}

	// PUT replaces: absent fields are cleared.
	r = b.do(t, "PUT", "/v1/recipients/ada", adminToken, map[string]any{"email": "ada@example.org"})
	expect(t, r, 200, "")
	if r.body["name"] != nil || r.body["webhook_url"] != nil || r.body["email"] != "ada@example.org" {
		t.Fatalf("replace: %s", r.raw)
	}
	if d, _ := r.body["data"].(map[string]any); d == nil || len(d) != 0 {
		t.Fatalf("data not reset to {}: %s", r.raw)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_recipients`); n != 1 {
		t.Fatalf("%d recipients, want 1 (upsert)", n)
	}
}

func TestRecipientProfileValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		field string
		body  any
	}{
		{"email", map[string]any{"email": "not an address"}},
		{"email", map[string]any{"email": "Ada <ada@example.com>"}},
		{"email", map[string]any{"email": 5}},
		{"timezone", map[string]any{"timezone": "Mars/Olympus"}},
		{"timezone", map[string]any{"timezone": "Local"}},
		{"timezone", map[string]any{"timezone": "../../etc/passwd"}},
		{"locale", map[string]any{"locale": "english please"}},
		{"locale", map[string]any{"locale": "e"}},
		{"webhook_url", map[string]any{"webhook_url": "ftp://example.com/x"}},
		{"webhook_url", map[string]any{"webhook_url": "/relative"}},
		{"webhook_url", map[string]any{"webhook_url": "https://"}},
		{"data", map[string]any{"data": []int{1}}},
		{"data", map[string]any{"data": "x"}},
		{"name", map[string]any{"name": strings.Repeat("n", 256)}},
		{"id", map[string]any{"id": "someone-else"}},
		{"nickname", map[string]any{"nickname": "x"}},
	}
	for _, tt := range tests {
		r := b.do(t, "PUT", "/v1/recipients/ada", adminToken, tt.body)
		// Malformed JSON (wrong types, unknown fields) is a 400; a
		// well-formed value that breaks a rule is a 422 invalid_request.
		status, code := 422, wire.CodeInvalidRequest
		if m, _ := tt.body.(map[string]any); tt.field == "data" || tt.field == "nickname" || m[tt.field] == 5 {
			status, code = 400, wire.CodeBadRequest
		}
		if r.status != status || r.errCode() != code || !strings.Contains(r.errMessage(), tt.field) {
			t.Errorf("%v: %d %s, want %d naming %s", tt.body, r.status, r.raw, status, tt.field)
		}
	}
	long := strings.Repeat("x", 256)
	expect(t, b.do(t, "PUT", "/v1/recipients/"+long, adminToken, map[string]any{}), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "PUT", "/v1/recipients/%FF", adminToken, map[string]any{}), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "GET", "/v1/recipients/%00", adminToken, nil), 400, wire.CodeBadRequest)
	if n := count(t, b.pool, `SELECT count(*) FROM notify_recipients`); n != 0 {
		t.Fatalf("%d recipients written by refused requests", n)
	}
	// A minimal profile is fine, and ids may hold any UTF-8 but NUL.
	expect(t, b.do(t, "PUT", "/v1/recipients/%C3%A9l%C3%A8ve%2F1", adminToken, map[string]any{}), 200, "")
	if n := count(t, b.pool, `SELECT count(*) FROM notify_recipients WHERE id = 'élève/1'`); n != 1 {
		t.Fatal("escaped id not stored unescaped")
	}
}
