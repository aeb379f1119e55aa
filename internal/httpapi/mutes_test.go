package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/wire"
)

func TestMutes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: prefsConfig})
	tok := recipientToken(t, "ada")

	r := b.do(t, "GET", "/v1/mutes", tok, nil)
	expect(t, r, 200, "")
	if string(r.raw) != `{"mutes":[]}`+"\n" {
		t.Fatalf("no mutes: %s", r.raw)
	}

	until := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	r = b.do(t, "PUT", "/v1/mutes", tok, map[string]any{"target": "topic:post-9", "until": until.Format(time.RFC3339)})
	expect(t, r, 200, "")
	if r.body["target"] != "topic:post-9" || r.body["until"] != until.Format(time.RFC3339) {
		t.Fatalf("put: %s", r.raw)
	}
	// until null or absent: until removed. Replacing a mute changes its end.
	r = b.do(t, "PUT", "/v1/mutes", tok, map[string]any{"target": "notifier:comment.created", "until": nil})
	expect(t, r, 200, "")
	if r.body["until"] != nil {
		t.Fatalf("forever: %s", r.raw)
	}
	expect(t, b.do(t, "PUT", "/v1/mutes", tok, `{"target":"topic:post-9"}`), 200, "")
	// An offset time is fine and comes back in UTC.
	r = b.do(t, "PUT", "/v1/mutes", tok, map[string]any{"target": "topic:org/x y", "until": "2999-01-02T03:04:05+02:00"})
	expect(t, r, 200, "")
	if r.body["until"] != "2999-01-02T01:04:05Z" {
		t.Fatalf("offset until: %s", r.raw)
	}

	r = b.do(t, "GET", "/v1/mutes", tok, nil)
	expect(t, r, 200, "")
	want := `{"mutes":[{"target":"notifier:comment.created","until":null},{"target":"topic:org/x y","until":"2999-01-02T01:04:05Z"},{"target":"topic:post-9","until":null}]}`
	if strings.TrimSpace(string(r.raw)) != want {
		t.Fatalf("mutes\n got %s\nwant %s", r.raw, want)
	}
	// The admin view is the same list.
	if a := b.do(t, "GET", "/v1/recipients/ada/mutes", adminToken, nil); strings.TrimSpace(string(a.raw)) != want {
		t.Fatalf("admin mutes: %s", a.raw)
	}

	// An expired mute is not listed (the fan-out ignores it too).
	if _, err := b.pool.Exec(t.Context(), `UPDATE notify_mutes SET until = now() - interval '1 minute' WHERE target = 'topic:org/x y'`); err != nil {
		t.Fatal(err)
	}
	r = b.do(t, "GET", "/v1/mutes", tok, nil)
	if strings.Contains(string(r.raw), "org/x y") {
		t.Fatalf("expired mute listed: %s", r.raw)
	}

	// Unmute by query, by body; a second time and an expired mute say false.
	for _, tt := range []struct {
		path    string
		body    any
		deleted bool
	}{
		{"/v1/mutes?target=topic%3Apost-9", nil, true},
		{"/v1/mutes?target=topic%3Apost-9", nil, false},
		{"/v1/mutes", map[string]any{"target": "notifier:comment.created"}, true},
		{"/v1/mutes?target=topic%3Aorg%2Fx+y", nil, false},
		{"/v1/mutes?target=notifier%3Aremoved.from.config", nil, false},
	} {
		r := b.do(t, "DELETE", tt.path, tok, tt.body)
		expect(t, r, 200, "")
		if r.body["deleted"] != tt.deleted {
			t.Errorf("DELETE %s %v: %s, want deleted %v", tt.path, tt.body, r.raw, tt.deleted)
		}
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_mutes`); n != 0 {
		t.Fatalf("%d mutes left", n)
	}

	// The admin twins write the recipient in the path.
	expect(t, b.do(t, "PUT", "/v1/recipients/bob/mutes", adminToken, map[string]any{"target": "topic:t"}), 200, "")
	r = b.do(t, "DELETE", "/v1/recipients/bob/mutes?target=topic:t", adminToken, nil)
	expect(t, r, 200, "")
	if r.body["deleted"] != true {
		t.Fatalf("admin unmute: %s", r.raw)
	}
}

func TestMuteValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: prefsConfig})
	tok := recipientToken(t, "val")
	past := time.Now().Add(-time.Minute).Format(time.RFC3339)
	tests := []struct {
		method, path string
		body         any
		status       int
		code, field  string
	}{
		{"PUT", "/v1/mutes", map[string]any{"target": "notifier:nope"}, 422, wire.CodeInvalidRequest, "target"},
		{"PUT", "/v1/mutes", map[string]any{"target": "notifier:"}, 422, wire.CodeInvalidRequest, "target"},
		{"PUT", "/v1/mutes", map[string]any{"target": "topic:"}, 422, wire.CodeInvalidRequest, "target"},
		{"PUT", "/v1/mutes", map[string]any{"target": "topic:" + strings.Repeat("t", 256)}, 422, wire.CodeInvalidRequest, "target"},
		{"PUT", "/v1/mutes", map[string]any{"target": "category:comments"}, 422, wire.CodeInvalidRequest, "target"},
		{"PUT", "/v1/mutes", map[string]any{"target": "post-9"}, 422, wire.CodeInvalidRequest, "target"},
		{"PUT", "/v1/mutes", map[string]any{"target": ""}, 422, wire.CodeInvalidRequest, "target"},
		{"PUT", "/v1/mutes", map[string]any{}, 422, wire.CodeInvalidRequest, "target"},
		{"PUT", "/v1/mutes", map[string]any{"target": "topic:a", "until": past}, 422, wire.CodeInvalidRequest, "until"},
		{"PUT", "/v1/mutes", map[string]any{"target": "topic:a", "until": "tomorrow"}, 400, wire.CodeBadRequest, "until"},
		{"PUT", "/v1/mutes", map[string]any{"target": "topic:a", "until": 5}, 400, wire.CodeBadRequest, "until"},
		{"PUT", "/v1/mutes", map[string]any{"target": "topic:a", "for": "1h"}, 400, wire.CodeBadRequest, "for"},
		{"PUT", "/v1/mutes", nil, 400, wire.CodeBadRequest, ""},
		{"PUT", "/v1/recipients/val/mutes", map[string]any{"target": "notifier:nope"}, 422, wire.CodeInvalidRequest, "target"},
		{"DELETE", "/v1/mutes", nil, 422, wire.CodeInvalidRequest, "target"},
		{"DELETE", "/v1/mutes?target=bogus", nil, 422, wire.CodeInvalidRequest, "target"},
		{"DELETE", "/v1/mutes?target=topic:a", map[string]any{"target": "topic:b"}, 400, wire.CodeBadRequest, "target"},
		{"DELETE", "/v1/mutes?target=topic:%FF", nil, 400, wire.CodeBadRequest, "target"},
		{"DELETE", "/v1/mutes?target=topic:%00", nil, 400, wire.CodeBadRequest, "target"},
	}
	for _, tt := range tests {
		token := tok
		if strings.HasPrefix(tt.path, "/v1/recipients/") {
			token = adminToken
		}
		r := b.do(t, tt.method, tt.path, token, tt.body)
		if r.status != tt.status || r.errCode() != tt.code {
			t.Errorf("%s %s %v: %d %s, want %d %s", tt.method, tt.path, tt.body, r.status, r.raw, tt.status, tt.code)
			continue
		}
		if tt.field != "" && !strings.HasPrefix(r.errMessage(), tt.field+":") {
			t.Errorf("%s %s %v: message %q does not name %s", tt.method, tt.path, tt.body, r.errMessage(), tt.field)
		}
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_mutes`); n != 0 {
		t.Fatalf("refused requests wrote %d mutes", n)
	}

	// At most 1000 active mutes per recipient; changing one at the limit is fine.
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO notify_mutes (recipient, target)
		SELECT 'val', 'topic:' || g FROM generate_series(1, 1000) g`); err != nil {
		t.Fatal(err)
	}
	expect(t, b.do(t, "PUT", "/v1/mutes", tok, map[string]any{"target": "topic:1001"}), 422, wire.CodeInvalidRequest)
	expect(t, b.do(t, "PUT", "/v1/mutes", tok, map[string]any{"target": "topic:7",
		"until": time.Now().Add(time.Hour).Format(time.RFC3339)}), 200, "")
	if n := count(t, b.pool, `SELECT count(*) FROM notify_mutes WHERE recipient = 'val'`); n != 1000 {
		t.Fatal(fmt.Sprint(n, " mutes"))
	}
}
