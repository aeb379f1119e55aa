package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/web"
)

// The browser test runs a daemon on a test database.
func TestMain(m *testing.M) { pgtest.Main(m) }

func serve(t *testing.T, h http.Handler, method, path string, header http.Header) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestHandlerServesTheComponents(t *testing.T) {
	t.Parallel()
	// Mounted the way `notifyd dev` mounts it.
	mux := http.NewServeMux()
	mux.Handle("GET /ui/{file}", web.Handler())
	for _, name := range web.Files() {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(sourceOf(name))
			if err != nil {
				t.Fatal(err)
			}
			resp, body := serve(t, mux, "GET", "/ui/"+name, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("GET /ui/%s = %d %s", name, resp.StatusCode, body)
			}
			if body != string(want) {
				t.Errorf("GET /ui/%s: body differs from the file (%d bytes, want %d)", name, len(body), len(want))
			}
			for k, v := range map[string]string{
				"Content-Type":                "text/javascript; charset=utf-8",
				"Cache-Control":               web.CacheControl,
				"X-Content-Type-Options":      "nosniff",
				"Access-Control-Allow-Origin": "*",
			} {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			etag := resp.Header.Get("ETag")
			if !strings.HasPrefix(etag, `"`) || len(etag) < 10 {
				t.Fatalf("ETag = %q, want a strong validator", etag)
			}

			// Revalidation: 304 with no body.
			resp, body = serve(t, mux, "GET", "/ui/"+name, http.Header{"If-None-Match": {etag}})
			if resp.StatusCode != http.StatusNotModified || body != "" {
				t.Errorf("GET with If-None-Match = %d (%d bytes), want 304 and no body", resp.StatusCode, len(body))
			}
			// HEAD: the headers, no body.
			resp, body = serve(t, mux, "HEAD", "/ui/"+name, nil)
			if resp.StatusCode != 200 || body != "" || resp.Header.Get("Content-Type") != "text/javascript; charset=utf-8" {
				t.Errorf("HEAD = %d, %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
			}
		})
	}
	// Only the components: not the demo template, not the Go source, nothing else.
	for _, path := range []string{"/ui/demo.html", "/ui/web.go", "/ui/nope.js", "/ui/..%2fweb.go"} {
		resp, body := serve(t, mux, "GET", path, nil)
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Details []any  `json:"details"`
			} `json:"error"`
		}
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, resp.StatusCode)
			continue
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != "not_found" || e.Error.Details == nil {
			t.Errorf("GET %s: body %q is not the API's error shape (%v)", path, body, err)
		}
	}
	// Directly (no method pattern): other methods are refused.
	resp, _ := serve(t, web.Handler(), "POST", "/ui/notifyd-inbox.js", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST = %d, Allow %q; want 405 with Allow: GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// TestJavaScriptParses runs `node --check` on each served file as an ES
// module. Node is optional: without it this check is skipped (the browser
// test loads the modules in Chromium anyway).
func TestJavaScriptParses(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: skipping `node --check` of the components (the browser test still loads them)")
	}
	dir := t.TempDir()
	for _, name := range web.Files() {
		_, body := serve(t, web.Handler(), "GET", "/ui/"+name, nil)
		// .mjs: parse as an ES module, whatever the nearest package.json says.
		path := filepath.Join(dir, strings.TrimSuffix(name, ".js")+".mjs")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(node, "--check", path).CombinedOutput(); err != nil {
			t.Errorf("node --check %s: %v\n%s", name, err, out)
		}
	}
}

// TestJavaScriptSetsItemTextSafely is a guard on the components' source: data
// reaches the DOM through textContent only. innerHTML is used once per
// component, for the static shadow-root template.
// sourceOf is the file in the repository that /ui/name serves.
func sourceOf(name string) string {
	if name == web.ClientFile {
		return filepath.Join("..", "clients", "browser", "src", "index.js")
	}
	return name
}

func TestJavaScriptSetsItemTextSafely(t *testing.T) {
	t.Parallel()
	for _, name := range web.Files() {
		src, err := os.ReadFile(sourceOf(name))
		if err != nil {
			t.Fatal(err)
		}
		s := string(src)
		for _, bad := range []string{"outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s uses %s", name, bad)
			}
		}
		// The components set innerHTML once, for their static template; the
		// shared helpers and the service worker render nothing.
		want := 1
		if name == "notifyd-api.js" || name == web.ClientFile || name == "notifyd-push.js" || name == "notifyd-sw.js" {
			want = 0
		}
		if n := strings.Count(s, ".innerHTML"); n != want || (want == 1 && !strings.Contains(s, "root.innerHTML = `<style>${STYLE}</style>")) {
			t.Errorf("%s: %d uses of innerHTML; want %d", name, n, want)
		}
	}
}

func TestDemoPage(t *testing.T) {
	t.Parallel()
	evil := `"><script>alert(1)</script>`
	h := web.Demo(web.DemoOptions{Token: func() string { return evil }, Recipient: "u2</code><b>", SendURL: "/dev/send"})
	resp, body := serve(t, h, "GET", "/dev/demo", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /dev/demo = %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store (the page carries a token)", cc)
	}
	if strings.Contains(body, evil) || strings.Contains(body, "u2</code><b>") {
		t.Error("the demo page contains the token or recipient unescaped")
	}
	for _, want := range []string{
		`token="&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"`,
		`<script type="module" src="/ui/notifyd-inbox.js">`,
		`<script type="module" src="/ui/notifyd-preferences.js">`,
		`<notifyd-inbox id="inbox"`,
		`<notifyd-preferences id="prefs"`,
		`data-url="/dev/send"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the demo page lacks %s", want)
		}
	}

	// Without a token: no token attribute, the page asks, and shows a curl line.
	_, body = serve(t, web.Demo(web.DemoOptions{}), "GET", "/dev/demo", nil)
	if strings.Contains(body, ` token=`) || !strings.Contains(body, `id="ask"`) || !strings.Contains(body, `id="curl"`) {
		t.Error("a demo page without a token should ask for one and show the curl line")
	}
}
