package httpapi_test

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/wire"
)

func TestSuppressionsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: emailTestConfig})

	r := b.do(t, "PUT", "/v1/suppressions/email/Ada@Example.test", adminToken, nil)
	expect(t, r, 200, "")
	if r.body["address"] != "ada@example.test" || r.body["reason"] != "manual" || r.body["channel"] != "email" {
		t.Fatalf("PUT: %s", r.raw)
	}
	created := r.body["created_at"]
	r = b.do(t, "PUT", "/v1/suppressions/email/ada@example.test", adminToken, map[string]any{"reason": "asked by support"})
	expect(t, r, 200, "")
	if r.body["reason"] != "asked by support" || r.body["created_at"] != created {
		t.Fatalf("re-PUT: %s", r.raw)
	}
	for _, a := range []string{"b@example.test", "c@example.test", "d@example.test"} {
		expect(t, b.do(t, "PUT", "/v1/suppressions/email/"+a, adminToken, nil), 200, "")
	}

	// Refusals, nothing written.
	for _, tt := range []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{"PUT", "/v1/suppressions/email/not-an-address", nil, 422, wire.CodeInvalidRequest},
		{"PUT", "/v1/suppressions/email/" + url.PathEscape("Ada <x@example.test>"), nil, 422, wire.CodeInvalidRequest},
		{"PUT", "/v1/suppressions/in_app/x@example.test", nil, 404, wire.CodeNotFound},
		{"PUT", "/v1/suppressions/pager/x@example.test", nil, 404, wire.CodeNotFound},
		{"PUT", "/v1/suppressions/email/x@example.test", map[string]any{"reason": strings.Repeat("r", 201)}, 422, wire.CodeInvalidRequest},
		{"PUT", "/v1/suppressions/email/x@example.test", map[string]any{"reason": "a\nb"}, 422, wire.CodeInvalidRequest},
		{"PUT", "/v1/suppressions/email/x@example.test", map[string]any{"why": "x"}, 400, wire.CodeBadRequest},
		{"PUT", "/v1/suppressions/email/x@example.test", "[", 400, wire.CodeBadRequest},
		{"GET", "/v1/suppressions?limit=0", nil, 400, wire.CodeBadRequest},
		{"GET", "/v1/suppressions?cursor=nope", nil, 400, wire.CodeBadCursor},
		{"GET", "/v1/suppressions?channel=pager", nil, 404, wire.CodeNotFound},
	} {
		r := b.do(t, tt.method, tt.path, adminToken, tt.body)
		if r.status != tt.status || r.errCode() != tt.code {
			t.Errorf("%s %s %v: %d %s, want %d %s", tt.method, tt.path, tt.body, r.status, r.raw, tt.status, tt.code)
		}
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_suppressions`); n != 4 {
		t.Fatalf("%d suppressions, want 4", n)
	}
	expect(t, b.do(t, "GET", "/v1/suppressions", "", nil), 401, wire.CodeUnauthorized)
	expect(t, b.do(t, "GET", "/v1/suppressions", recipientToken(t, "u1"), nil), 401, wire.CodeUnauthorized)

	// Keyset pages cover the list once, in order.
	var got []string
	cursor := ""
	for range 10 {
		q := "/v1/suppressions?channel=email&limit=3"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		r := b.do(t, "GET", q, adminToken, nil)
		expect(t, r, 200, "")
		for _, s := range r.body["suppressions"].([]any) {
			got = append(got, s.(map[string]any)["address"].(string))
		}
		next, _ := r.body["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if strings.Join(got, ",") != "ada@example.test,b@example.test,c@example.test,d@example.test" {
		t.Fatalf("pages: %v", got)
	}
	r = b.do(t, "GET", "/v1/suppressions?address=C@example.test", adminToken, nil)
	expect(t, r, 200, "")
	if s := r.body["suppressions"].([]any); len(s) != 1 || s[0].(map[string]any)["address"] != "c@example.test" {
		t.Fatalf("address filter: %s", r.raw)
	}

	r = b.do(t, "DELETE", "/v1/suppressions/email/ADA@example.test", adminToken, nil)
	expect(t, r, 200, "")
	if r.body["deleted"] != true {
		t.Fatalf("DELETE: %s", r.raw)
	}
	r = b.do(t, "DELETE", "/v1/suppressions/email/ada@example.test", adminToken, nil)
	if expect(t, r, 200, ""); r.body["deleted"] != false {
		t.Fatalf("second DELETE: %s", r.raw)
	}
}

func TestBounces(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: emailTestConfig})
	r := b.do(t, "POST", "/v1/bounces", adminToken, map[string]any{"channel": "email", "address": "Gone@example.test", "kind": "hard", "reason": "5.1.1 user unknown"})
	expect(t, r, 200, "")
	if r.body["suppressed"] != true || r.body["suppression"].(map[string]any)["reason"] != "hard: 5.1.1 user unknown" {
		t.Fatalf("hard: %s", r.raw)
	}
	long := "5.1.1\n" + strings.Repeat("é", 150)
	r = b.do(t, "POST", "/v1/bounces", adminToken, map[string]any{"channel": "email", "address": "Gone@example.test", "kind": "hard", "reason": long})
	expect(t, r, 200, "")
	if got := r.body["suppression"].(map[string]any)["reason"].(string); !strings.HasPrefix(got, "hard: 5.1.1 é") || len(got) > 210 || !utf8.ValidString(got) {
		t.Fatalf("a long diagnostic: %q", got)
	}
	r = b.do(t, "POST", "/v1/bounces", adminToken, map[string]any{"channel": "email", "address": "spam@example.test", "kind": "complaint"})
	if expect(t, r, 200, ""); r.body["suppression"].(map[string]any)["reason"] != "complaint" {
		t.Fatalf("complaint: %s", r.raw)
	}
	for i := 1; i <= 2; i++ {
		r = b.do(t, "POST", "/v1/bounces", adminToken, map[string]any{"channel": "email", "address": "full@example.test", "kind": "soft"})
		expect(t, r, 200, "")
		if r.body["suppressed"] != false || r.body["soft_bounces"] != float64(i) {
			t.Fatalf("soft %d: %s", i, r.raw)
		}
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_suppressions WHERE address = 'full@example.test'`); n != 0 {
		t.Fatal("a soft bounce suppressed")
	}
	for _, body := range []any{
		map[string]any{"channel": "email", "address": "x@example.test", "kind": "bounced"},
		map[string]any{"channel": "email", "address": "x@example.test"},
		map[string]any{"channel": "email", "kind": "hard"},
		map[string]any{"address": "x@example.test", "kind": "hard"},
		map[string]any{"channel": "email", "address": "not an address", "kind": "hard"},
	} {
		expect(t, b.do(t, "POST", "/v1/bounces", adminToken, body), 422, wire.CodeInvalidRequest)
	}
	expect(t, b.do(t, "POST", "/v1/bounces", adminToken, map[string]any{"channel": "pager", "address": "x@example.test", "kind": "hard"}), 404, wire.CodeNotFound)
	expect(t, b.do(t, "POST", "/v1/bounces", adminToken, map[string]any{"channel": "email", "address": "x@example.test", "kind": "hard", "extra": 1}), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "POST", "/v1/bounces", adminToken, `{"channel":`), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "POST", "/v1/bounces", "", map[string]any{"channel": "email", "address": "x@example.test", "kind": "hard"}), 401, wire.CodeUnauthorized)
	if n := count(t, b.pool, `SELECT count(*) FROM notify_suppressions WHERE address = 'x@example.test'`); n != 0 {
		t.Fatal("a refused report was written")
	}
}

func TestErasureKeepsSuppressionsUnlessAsked(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: emailTestConfig})
	for _, id := range []string{"u1", "u2"} {
		expect(t, b.do(t, "PUT", "/v1/recipients/"+id, adminToken, map[string]any{"email": id + "@example.test"}), 200, "")
		expect(t, b.do(t, "PUT", "/v1/suppressions/email/"+id+"@example.test", adminToken, nil), 200, "")
	}
	r := b.do(t, "DELETE", "/v1/recipients/u1", adminToken, nil)
	if expect(t, r, 200, ""); r.body["suppressions"] != float64(0) {
		t.Fatalf("erase: %s", r.raw)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_suppressions WHERE address = 'u1@example.test'`); n != 1 {
		t.Fatal("erasure lifted the suppression without being asked")
	}
	expect(t, b.do(t, "DELETE", "/v1/recipients/u2?suppressions=maybe", adminToken, nil), 400, wire.CodeBadRequest)
	r = b.do(t, "DELETE", "/v1/recipients/u2?suppressions=true", adminToken, nil)
	if expect(t, r, 200, ""); r.body["suppressions"] != float64(1) {
		t.Fatalf("erase with suppressions: %s", r.raw)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_suppressions WHERE address = 'u2@example.test'`); n != 0 {
		t.Fatal("the suppression was kept")
	}
}

// http.bounce_token reports bounces, as the admin token does, and nothing
// else: every other admin route refuses it.
func TestBounceToken(t *testing.T) {
	t.Parallel()
	const bounceToken = "bounce-relay-token-0123456789abcdef"
	b := setup(t, setupOpts{yaml: emailTestConfig, options: func(o *httpapi.Options) { o.Config.HTTP.BounceToken = bounceToken }})
	r := b.do(t, "POST", "/v1/bounces", bounceToken, map[string]any{"channel": "email", "address": "gone@example.test", "kind": "hard"})
	if expect(t, r, 200, ""); r.body["suppressed"] != true {
		t.Fatalf("bounce with the bounce token: %s", r.raw)
	}
	expect(t, b.do(t, "POST", "/v1/bounces", bounceToken+"x", map[string]any{"channel": "email", "address": "x@example.test", "kind": "hard"}),
		401, wire.CodeUnauthorized)
	for _, req := range [][2]string{
		{"GET", "/v1/suppressions"},
		{"DELETE", "/v1/suppressions/email/gone@example.test"},
		{"GET", "/v1/notifications"},
		{"DELETE", "/v1/recipients/u1"},
	} {
		expect(t, b.do(t, req[0], req[1], bounceToken, nil), 401, wire.CodeUnauthorized)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_suppressions`); n != 1 {
		t.Fatalf("%d suppressions, want the one bounce", n)
	}
}
