package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/wire"
)

// TestListNotificationsFiltersAndPages: newest first, each filter narrows,
// and keyset pages walk the list without a gap or a repeat.
func TestListNotificationsFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var keys []string
	for i := range 5 {
		key := fmt.Sprintf("k-%d", i)
		to := []string{"u2"}
		if i%2 == 0 {
			to = []string{"u1", "u2"}
		}
		r := b.do(t, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": key,
			"recipients": to, "params": map[string]any{"post_title": "p"}})
		expect(t, r, 202, "")
		keys = append([]string{key}, keys...) // newest first: ids are UUIDv7, monotonic in a process
	}
	list := func(q string) ([]string, string) {
		t.Helper()
		r := b.do(t, "GET", "/v1/notifications?"+q, adminToken, nil)
		expect(t, r, 200, "")
		var got []string
		for _, it := range r.body["items"].([]any) {
			got = append(got, it.(map[string]any)["key"].(string))
		}
		next, _ := r.body["next_cursor"].(string)
		return got, next
	}
	if got, next := list(""); fmt.Sprint(got) != fmt.Sprint(keys) || next != "" {
		t.Fatalf("all: %v next %q, want %v and no cursor", got, next, keys)
	}
	if got, _ := list("recipient=u1"); fmt.Sprint(got) != "[k-4 k-2 k-0]" {
		t.Fatalf("recipient=u1: %v", got)
	}
	if got, _ := list("key=k-3&notifier=comment.created"); fmt.Sprint(got) != "[k-3]" {
		t.Fatalf("key=k-3: %v", got)
	}
	if got, _ := list("status=cancelled"); len(got) != 0 {
		t.Fatalf("status=cancelled: %v", got)
	}
	if got, _ := list("before=" + url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339))); len(got) != 0 {
		t.Fatalf("before an hour ago: %v", got)
	}
	var walked []string
	q := "limit=2"
	for pages := 0; ; pages++ {
		got, next := list(q)
		walked = append(walked, got...)
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
		q = "limit=2&cursor=" + url.QueryEscape(next)
	}
	if fmt.Sprint(walked) != fmt.Sprint(keys) {
		t.Fatalf("pages of 2 walked %v, want %v", walked, keys)
	}
	expect(t, b.do(t, "GET", "/v1/notifications?cursor=nope", adminToken, nil), 400, wire.CodeBadCursor)
	expect(t, b.do(t, "GET", "/v1/notifications?limit=500", adminToken, nil), 400, wire.CodeBadRequest)
	expect(t, b.do(t, "GET", "/v1/notifications", "", nil), 401, wire.CodeUnauthorized)
}

// TestAdminRefusesCrossSiteWrites: a browser's state-changing request from
// another site is refused even with the admin token, before anything is
// written; the same request from a script (no browser headers) or from the
// console's own origin goes through.
func TestAdminRefusesCrossSiteWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	send := func(key string, header map[string]string) response {
		req, err := http.NewRequestWithContext(t.Context(), "POST", b.srv.URL+"/v1/notifications",
			strings.NewReader(`{"notifier":"comment.created","key":"`+key+`","recipients":["u2"],"params":{"post_title":"p"}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return rawRequest(t, b, req)
	}
	// Refused by the CORS layer (the origin is not in http.allowed_origins)
	// before the admin layer's own check would.
	r := send("evil", map[string]string{"Origin": "https://evil.example.test", "Sec-Fetch-Site": "cross-site"})
	expect(t, r, 403, httpapi.CodeOriginNotAllowed)
	// A cross-site write the browser marks without an Origin is refused by
	// the admin layer itself.
	expect(t, send("evil-too", map[string]string{"Sec-Fetch-Site": "cross-site"}), 403, httpapi.CodeForbidden)
	if r.header.Get("X-Frame-Options") != "DENY" {
		t.Fatal("the refusal is not an admin page (framing allowed)")
	}
	var n int
	if err := b.pool.QueryRow(t.Context(), `SELECT count(*) FROM notify_notifications WHERE key IN ('evil', 'evil-too')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the refused request wrote %d notifications (%v)", n, err)
	}
	expect(t, send("script", nil), 202, "")
	expect(t, send("console", map[string]string{"Origin": b.srv.URL, "Sec-Fetch-Site": "same-origin"}), 202, "")
	// Reading is never refused: a GET changes nothing.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", b.srv.URL+"/v1/notifications", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	expect(t, rawRequest(t, b, req), 200, "")
}
