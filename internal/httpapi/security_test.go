package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/notifyd/notifyd/internal/httpapi"
)

// TestAdminResponsesAreNeverFramedOrCached: every admin endpoint, its
// refusals included, and a route mounted through AdminExtra answer with
// X-Frame-Options: DENY, frame-ancestors 'none' and Cache-Control: no-store,
// even when the handler set a Cache-Control of its own.
func TestAdminResponsesAreNeverFramedOrCached(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: func(o *httpapi.Options) {
		o.AdminExtra = map[string]http.Handler{"GET /admin-page": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "public, max-age=86400")
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{}`))
		})}
	}})
	tests := []struct {
		method, path, token string
		body                any
		status              int
	}{
		{"PUT", "/v1/recipients/u1", adminToken, `{"email":"u1@example.com"}`, 200},
		{"GET", "/v1/recipients/u1", adminToken, nil, 200},
		{"GET", "/v1/recipients/nobody", adminToken, nil, 404},
		{"GET", "/v1/recipients/u1", "", nil, 401},
		{"GET", "/v1/recipients/u1", recipientToken(t, "u1"), nil, 401},
		{"GET", "/v1/recipients/u1/inbox", adminToken, nil, 200},
		{"GET", "/v1/recipients/u1/preferences", adminToken, nil, 200},
		{"GET", "/v1/recipients/u1/mutes", adminToken, nil, 200},
		{"GET", "/v1/recipients/u1/subscriptions", adminToken, nil, 200},
		{"GET", "/v1/topics/t/subscribers", adminToken, nil, 200},
		{"PUT", "/v1/topics/t/subscribers/u1", adminToken, nil, 200},
		{"POST", "/v1/notifications", adminToken, `{`, 400},
		{"GET", "/v1/notifications/01900000-0000-7000-8000-000000000000", adminToken, nil, 404},
		{"DELETE", "/v1/notifications/comment.created/nope", adminToken, nil, 404},
		{"GET", "/admin-page", adminToken, nil, 200},
		{"GET", "/admin-page", "", nil, 401},
	}
	for _, tt := range tests {
		r := b.do(t, tt.method, tt.path, tt.token, tt.body)
		if r.status != tt.status {
			t.Fatalf("%s %s = %d, want %d: %s", tt.method, tt.path, r.status, tt.status, r.raw)
		}
		if got := r.header.Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("%s %s: X-Frame-Options %q, want DENY", tt.method, tt.path, got)
		}
		if got := r.header.Values("Content-Security-Policy"); len(got) != 1 || got[0] != "frame-ancestors 'none'" {
			t.Errorf("%s %s: Content-Security-Policy %q, want frame-ancestors 'none'", tt.method, tt.path, got)
		}
		if got := r.header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s %s: Cache-Control %q, want no-store", tt.method, tt.path, got)
		}
	}
}
