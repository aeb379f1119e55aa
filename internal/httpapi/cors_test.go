package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/internal/httpapi"
)

func TestCORS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Without allowed_origins: the preflight of another origin is granted,
	// and the request that follows is refused before any handler runs, with
	// an answer the page can read (it names http.allowed_origins).
	req, _ := http.NewRequest(http.MethodOptions, b.srv.URL+"/v1/inbox", nil)
	req.Header.Set("Origin", "https://app.example.test")
	req.Header.Set("Access-Control-Request-Method", "GET")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.test" {
		t.Fatalf("preflight of a foreign origin = %d %v, want 204 granted (the request is refused instead)", resp.StatusCode, resp.Header)
	}
	refused := func(b *bundle, method, path, origin string, header map[string]string) {
		t.Helper()
		req, _ := http.NewRequest(method, b.srv.URL+path, strings.NewReader(`{"all":true}`))
		req.Header.Set("Authorization", "Bearer "+recipientToken(t, "u1"))
		req.Header.Set("Origin", origin)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		before := dbState(t, b.pool)
		r := rawRequest(t, b, req)
		expect(t, r, 403, httpapi.CodeOriginNotAllowed)
		if r.header.Get("Access-Control-Allow-Origin") != origin || !strings.Contains(r.errMessage(), "http.allowed_origins") ||
			!strings.Contains(r.errMessage(), origin) {
			t.Fatalf("%s %s from %s: %v %s", method, path, origin, r.header, r.raw)
		}
		if changed := changedTables(before, dbState(t, b.pool)); len(changed) > 0 {
			t.Fatalf("%s %s from a foreign origin wrote to %v", method, path, changed)
		}
	}
	refused(b, "GET", "/v1/inbox/counts", "https://app.example.test", map[string]string{"Sec-Fetch-Site": "cross-site"})
	refused(b, "POST", "/v1/inbox/read", "https://app.example.test", map[string]string{"Sec-Fetch-Site": "cross-site"})
	// Without Sec-Fetch-Site, the Origin's host against Host decides.
	refused(b, "GET", "/v1/inbox/counts", "http://other.example.test", nil)
	// The page's own origin passes, with or without the header.
	same := b.srv.URL
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "same-origin"}, nil} {
		get, _ := http.NewRequest("GET", b.srv.URL+"/v1/inbox/counts", nil)
		get.Header.Set("Authorization", "Bearer "+recipientToken(t, "u1"))
		get.Header.Set("Origin", same)
		for k, v := range h {
			get.Header.Set(k, v)
		}
		if r := rawRequest(t, b, get); r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("same origin (%v) = %d %v", h, r.status, r.header)
		}
	}

	b = setup(t, setupOpts{yaml: `
http: {admin_token: ` + adminToken + `, token_secret: ` + tokenSecret + `, allowed_origins: ["https://app.example.test"]}
`})
	resp, err = http.DefaultClient.Do(cloneWithURL(req, b.srv.URL+"/v1/inbox"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.test" ||
		resp.Header.Get("Access-Control-Allow-Headers") == "" {
		t.Fatalf("preflight = %d %v", resp.StatusCode, resp.Header)
	}
	// A real request from the allowed origin is served with the header;
	// another origin is refused, readably.
	r := b.do(t, "GET", "/v1/inbox/counts", recipientToken(t, "u1"), nil)
	if r.status != 200 {
		t.Fatalf("counts = %d", r.status)
	}
	refused(b, "GET", "/v1/inbox/counts", "https://evil.example.test", map[string]string{"Sec-Fetch-Site": "cross-site"})
	get, _ := http.NewRequest("GET", b.srv.URL+"/v1/inbox/counts", nil)
	get.Header.Set("Authorization", "Bearer "+recipientToken(t, "u1"))
	get.Header.Set("Origin", "https://app.example.test")
	get.Header.Set("Sec-Fetch-Site", "cross-site")
	if r := rawRequest(t, b, get); r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "https://app.example.test" {
		t.Fatalf("the allowed origin: %d %v", r.status, r.header)
	}
}

func cloneWithURL(r *http.Request, url string) *http.Request {
	n, _ := http.NewRequest(r.Method, url, nil)
	n.Header = r.Header.Clone()
	return n
}
