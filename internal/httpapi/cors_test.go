package httpapi_test

import (
	"net/http"
	"testing"
)

func TestCORS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Without allowed_origins: no CORS headers, preflight is a 405.
	req, _ := http.NewRequest(http.MethodOptions, b.srv.URL+"/v1/inbox", nil)
	req.Header.Set("Origin", "https://app.example.test")
	req.Header.Set("Access-Control-Request-Method", "GET")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS headers without allowed_origins")
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
	// A real request from the allowed origin carries the header; another origin does not.
	r := b.do(t, "GET", "/v1/inbox/counts", recipientToken(t, "u1"), nil)
	if r.status != 200 {
		t.Fatalf("counts = %d", r.status)
	}
	get, _ := http.NewRequest("GET", b.srv.URL+"/v1/inbox/counts", nil)
	get.Header.Set("Authorization", "Bearer "+recipientToken(t, "u1"))
	get.Header.Set("Origin", "https://evil.example.test")
	resp, err = http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("a foreign origin was allowed")
	}
	get.Header.Set("Origin", "https://app.example.test")
	resp, err = http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.test" {
		t.Fatal("the allowed origin got no Access-Control-Allow-Origin")
	}
}

func cloneWithURL(r *http.Request, url string) *http.Request {
	n, _ := http.NewRequest(r.Method, url, nil)
	n.Header = r.Header.Clone()
	return n
}
