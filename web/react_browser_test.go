package web_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// maxBundleGzip is the budget of @notifyd/react with @notifyd/browser,
// minified and gzipped, React excluded.
const maxBundleGzip = 15 * 1024

// needNode skips (or, under CI or EnvRequireBrowser, fails) when npm or the
// front-end packages' node_modules are missing.
func needNode(t *testing.T) {
	t.Helper()
	msg := ""
	if _, err := exec.LookPath("npm"); err != nil {
		msg = "npm (Node.js 20 or later) is not installed"
	} else {
		for _, dir := range []string{"../clients/browser", "../clients/react"} {
			if _, err := os.Stat(filepath.Join(dir, "node_modules", "esbuild")); err != nil {
				msg = dir + "/node_modules is missing: run `npm ci` there"
			}
		}
	}
	if msg == "" {
		return
	}
	if os.Getenv("CI") != "" || os.Getenv(EnvRequireBrowser) != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// runIn runs a command in dir, with env added to the environment, and fails
// the test with its output.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NO_UPDATE_NOTIFIER=1", "npm_config_fund=false", "npm_config_audit=false"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// buildReactExample builds @notifyd/browser and @notifyd/react and runs
// their own suites (`npm test`: the headless client in Node against the
// daemon env names, server rendering with React 19 and 18), packs them with
// npm pack, installs the tarballs into a copy of examples/react-inbox outside
// the repository, offline (everything else comes from npm's cache, which `npm
// ci` in clients/react filled), with notifier types that `notifyd gen
// types` generates from the config yaml, and builds it (tsc, then esbuild). It returns the app's public
// directory and the gzipped size of the two packages' minified bundle; the
// directory also has ssr.html, markup rendered in Node for baseURL and
// token, and the script that hydrates it. This
// is the one test that writes the packages' dist/ directories.
func buildReactExample(t *testing.T, yaml string, env []string, ssrURL, ssrToken string) (public string, gz int) {
	t.Helper()
	tmp := t.TempDir()
	packs := filepath.Join(tmp, "packs")
	if err := os.Mkdir(packs, 0o755); err != nil {
		t.Fatal(err)
	}
	var tarballs []string
	for _, pkg := range []string{"browser", "react"} {
		dir := filepath.Join("..", "clients", pkg)
		t.Logf("npm test in clients/%s:\n%s", pkg, runIn(t, dir, env, "npm", "test"))
		out := runIn(t, dir, nil, "npm", "pack", "--ignore-scripts", "--silent", "--pack-destination", packs)
		lines := strings.Fields(strings.TrimSpace(out))
		tarballs = append(tarballs, filepath.Join(packs, lines[len(lines)-1]))
	}
	app := filepath.Join(tmp, "app")
	runIn(t, ".", nil, "cp", "-R", filepath.Join("..", "examples", "react-inbox"), app)
	_ = os.RemoveAll(filepath.Join(app, "node_modules"))
	_ = os.RemoveAll(filepath.Join(app, "public", "build"))
	// The notifyd binary, built into the temporary directory, writes the
	// types as an application generates them.
	bin, config := filepath.Join(tmp, "notifyd"), filepath.Join(tmp, "notifyd.yaml")
	runIn(t, "..", nil, "go", "build", "-o", bin, "./cmd/notifyd")
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	runIn(t, ".", nil, bin, "gen", "types", "-lang", "ts", "-config", config, "-o", filepath.Join(app, "src", "notifiers.ts"))
	runIn(t, app, nil, "npm", append([]string{"install", "--offline", "--no-audit", "--no-fund", "--no-save"}, tarballs...)...)
	runIn(t, app, nil, "npm", "run", "build")

	// Server rendering and hydration: ssr.html carries the markup that
	// react-dom/server renders in Node for the tree hydrate.js hydrates.
	for name, src := range map[string]string{
		"ssr-tree.mjs": `import { createElement as h } from "react";
import { NotifydProvider, Bell, Inbox, Toaster } from "@notifyd/react";
export const tree = (baseUrl, token) => h(NotifydProvider, { baseUrl, token }, h(Bell), h(Inbox), h(Toaster));
`,
		"ssr-render.mjs": `import { renderToString } from "react-dom/server";
import { tree } from "./ssr-tree.mjs";
process.stdout.write(renderToString(tree(process.argv[2], process.argv[3])));
`,
		"ssr-hydrate.mjs": `import { hydrateRoot } from "react-dom/client";
import { tree } from "./ssr-tree.mjs";
window.__recoverable = [];
const root = document.getElementById("root");
hydrateRoot(root, tree(root.dataset.url, root.dataset.token), { onRecoverableError: (e) => window.__recoverable.push(String(e && e.message || e)) });
window.__hydrating = true;
`,
	} {
		if err := os.WriteFile(filepath.Join(app, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runIn(t, app, nil, filepath.Join("node_modules", ".bin", "esbuild"), "ssr-hydrate.mjs", "--bundle", "--minify", "--outfile=public/build/hydrate.js")
	html := runIn(t, app, nil, "node", "ssr-render.mjs", ssrURL, ssrToken)
	page := `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>SSR</title><link rel="stylesheet" href="build/main.css"></head>
<body><div id="root" data-url="` + ssrURL + `" data-token="` + ssrToken + `">` + html + `</div><script src="build/hydrate.js"></script></body></html>`
	if err := os.WriteFile(filepath.Join(app, "public", "ssr.html"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}

	// The size a React app pays for the two packages: both bundled,
	// minified, React left out, gzipped.
	if err := os.WriteFile(filepath.Join(app, "size.js"), []byte(`export * from "@notifyd/react";`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runIn(t, app, nil, filepath.Join("node_modules", ".bin", "esbuild"), "size.js", "--bundle", "--minify", "--format=esm",
		"--external:react", "--external:react-dom", "--external:react/jsx-runtime", "--outfile=size.min.js")
	min, err := os.ReadFile(filepath.Join(app, "size.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(min)
	_ = zw.Close()
	return filepath.Join(app, "public"), buf.Len()
}

// cutProxy forwards TCP connections to a daemon until Cut: then it closes
// every open connection and refuses new ones until Restore.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); p.Cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cutProxy) serve(c net.Conn) {
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	go func() {
		_, _ = io.Copy(up, c)
		up.Close()
	}()
	_, _ = io.Copy(c, up)
	c.Close()
}

// Cut closes every connection and refuses new ones.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Restore accepts connections again.
func (p *cutProxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// TestBrowserReactInbox runs the suites of @notifyd/browser (in Node, against
// the daemon) and @notifyd/react (server rendering, React 19 and 18), builds
// examples/react-inbox from the packages' npm pack tarballs, installed
// offline in a clean directory, and drives it in headless Chromium against a real daemon
// (behind a proxy the test can cut): a notification sent through the API
// shows in the <Bell> count, the <Inbox> and a toast; marks round-trip; the
// stream's short-lived token expires and the refresh callback fetches a new
// one; a cut connection resumes from the last cursor without losing or
// repeating an item, and a mark that fails meanwhile is rolled back; axe-core
// finds no serious violation. It logs the
// packages' bundle size and fails above 15 KB.
func TestBrowserReactInbox(t *testing.T) {
	bin := findChromium(t)
	needNode(t)
	t.Parallel()

	_, dbURL := pgtest.NewDBURL(t)
	mailbox := smtpcapture.Start(t)
	yaml := fmt.Sprintf(browserConfig, mailbox.Port())
	cfg := servertest.Config(t, yaml)
	cfg.Database.URL = dbURL

	// The app's own server (started after the build) and the daemon, which
	// takes the app's origin.
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	appOrigin := "http://" + appLn.Addr().String()
	cfg.HTTP.AllowedOrigins = []string{appOrigin}
	d := startDemoDaemon(t, context.Background(), cfg, nil)

	public, gz := buildReactExample(t, yaml, []string{"NOTIFYD_TEST_API=" + d.api.base,
		"NOTIFYD_TEST_TOKEN_SECRET=" + cfg.HTTP.TokenSecret, "NOTIFYD_TEST_ADMIN_TOKEN=" + servertest.AdminToken}, d.api.base, d.token)
	t.Logf("bundle size of @notifyd/react + @notifyd/browser (minified, gzipped, React excluded): %d bytes (%.1f KB; budget %d KB)",
		gz, float64(gz)/1024, maxBundleGzip/1024)
	if gz > maxBundleGzip {
		t.Errorf("@notifyd/react + @notifyd/browser are %d bytes minified and gzipped; the budget is %d", gz, maxBundleGzip)
	}
	ctx := browserContext(t) // after the build: the browser's budget is for the browser

	// The app's own server: the built page, and the token endpoint its
	// backend would have. The first token lives a few seconds, the next an
	// hour: the stream's reauth (or a 401) must make the client ask again.
	var tokenCalls atomic.Int32
	appMux := http.NewServeMux()
	appMux.Handle("GET /", http.FileServer(http.Dir(public)))
	appMux.HandleFunc("GET /notifyd-token", func(w http.ResponseWriter, r *http.Request) {
		ttl := time.Hour
		if tokenCalls.Add(1) == 1 {
			ttl = 5 * time.Second
		}
		tok, err := notifyd.RecipientToken(cfg.HTTP.TokenSecret, "u2", ttl)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		_, _ = io.WriteString(w, tok)
	})
	appSrv := &http.Server{Handler: appMux}
	go func() { _ = appSrv.Serve(appLn) }()
	t.Cleanup(func() { _ = appSrv.Close() })

	proxy := startCutProxy(t, d.Addr())
	api, token := d.api, d.token
	send := func(key string) {
		t.Helper()
		if code := api.do("POST", "/v1/notifications", servertest.AdminToken, map[string]any{
			"notifier": "comment.created", "key": key, "actor": "u1", "recipients": []any{"u2"},
			"params": map[string]any{"post_title": key, "author_name": "Ada", "url": ""},
		}, nil); code != http.StatusAccepted {
			t.Fatalf("send %s = %d", key, code)
		}
	}
	serverItems := func() inboxPage {
		var pg inboxPage
		if code := api.do("GET", "/v1/inbox?limit=200", token, nil, &pg); code != 200 {
			t.Fatalf("GET /v1/inbox = %d", code)
		}
		return pg
	}

	b := startBrowser(t, bin)
	p := b.newPage(ctx)
	p.navigate(ctx, appOrigin+"/?notifyd="+proxyURL(proxy))
	const state = `({connection: document.querySelector(".connection")?.dataset.state,
		bell: document.querySelector(".notifyd-bell-button")?.getAttribute("aria-label"),
		badge: document.querySelector(".notifyd-badge")?.textContent ?? "",
		items: [...document.querySelectorAll(".notifyd-item")].map((li) => li.className + " " + li.querySelector(".notifyd-title").textContent),
		toasts: [...document.querySelectorAll(".notifyd-toast")].length,
		status: [...document.querySelectorAll(".notifyd-status")].map((s) => s.textContent)})`
	p.waitFor(ctx, "the stream to open", `document.querySelector(".connection")?.dataset.state === "open"`, state)
	p.waitFor(ctx, "the preference center", `document.querySelectorAll(".notifyd-pref-table select").length > 0`, state)

	// 1. The first token expires: the stream ends with reauth (or a request
	// gets a 401) and the refresh callback fetches a fresh token; the stream
	// opens again.
	servertest.Wait(left(ctx), func() bool { return tokenCalls.Load() >= 2 || ctx.Err() != nil })
	if n := tokenCalls.Load(); n < 2 {
		t.Fatalf("the token endpoint was called %d times: the expired token did not trigger the refresh callback", n)
	}
	p.waitFor(ctx, "the stream to open with the fresh token", `document.querySelector(".connection")?.dataset.state === "open"`, state)

	// 2. A notification sent through the API shows in the bell's count and
	// as a toast, and in the inbox when the bell opens.
	send("first")
	p.waitFor(ctx, "the bell to count it", `document.querySelector(".notifyd-badge")?.textContent === "1" &&
		document.querySelector(".notifyd-bell-button").getAttribute("aria-label") === "Notifications, 1 unread"`, state)
	p.waitFor(ctx, "the toast", `[...document.querySelectorAll(".notifyd-toast .notifyd-title")].some((e) => e.textContent === "Ada commented on first")`, state)
	p.click(ctx, `document.querySelector(".notifyd-bell-button")`)
	p.waitFor(ctx, "the inbox to list it", `[...document.querySelectorAll(".notifyd-item.notifyd-unread .notifyd-title")].map((e) => e.textContent).join() === "Ada commented on first"`, state)
	var focused bool
	p.eval(ctx, `document.activeElement?.tagName === "H2"`, &focused)
	if !focused {
		t.Error("opening the bell did not move focus into the panel")
	}
	send("second")
	p.waitFor(ctx, "the second item live, newest first", `[...document.querySelectorAll(".notifyd-item .notifyd-title")].map((e) => e.textContent).join("|") === "Ada commented on second|Ada commented on first"`, state)

	// 3. axe-core on the page with the panel open, a toast and the
	// preference center: no serious or critical violation.
	axe, err := os.ReadFile(filepath.Join("..", "clients", "react", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	p.eval(ctx, string(axe)+";true", nil)
	var violations []struct {
		ID     string `json:"id"`
		Impact string `json:"impact"`
		Help   string `json:"help"`
		Nodes  []struct {
			Target []any `json:"target"`
		} `json:"nodes"`
	}
	p.eval(ctx, `axe.run(document, {resultTypes: ["violations"]}).then((r) => r.violations.filter((v) => v.impact === "serious" || v.impact === "critical")
		.map((v) => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => ({target: n.target}))})))`, &violations)
	for _, v := range violations {
		t.Errorf("axe-core: %s (%s): %s at %v", v.ID, v.Impact, v.Help, v.Nodes)
	}

	// 4. Marks round-trip: a click marks the item read in the daemon and
	// the count drops; a read made elsewhere arrives through the stream.
	p.click(ctx, `[...document.querySelectorAll(".notifyd-item")].find((li) => li.textContent.includes("first")).querySelector(".notifyd-item-main")`)
	p.waitFor(ctx, "the count to drop", `document.querySelector(".notifyd-badge")?.textContent === "1"`, state)
	servertest.Wait(left(ctx), func() bool {
		for _, it := range serverItems().Items {
			if it.Key == "first" {
				return it.ReadAt != nil
			}
		}
		return ctx.Err() != nil
	})
	var second string
	for _, it := range serverItems().Items {
		if it.Key == "first" && it.ReadAt == nil {
			t.Fatal("the click did not mark the item read in the daemon")
		}
		if it.Key == "second" {
			second = it.ID
		}
	}
	if code := api.do("POST", "/v1/inbox/read", token, map[string]any{"ids": []string{second}}, nil); code != 200 {
		t.Fatalf("POST /v1/inbox/read = %d", code)
	}
	p.waitFor(ctx, "the read from elsewhere to arrive", `document.querySelectorAll(".notifyd-item.notifyd-unread").length === 0 && !document.querySelector(".notifyd-badge")`, state)

	// 5. The connection is cut; a notification sent meanwhile arrives once
	// the proxy is back, and no item shows twice. The list is not reloaded
	// on a reconnect (only on the stream's reset), so the item can only come
	// from the stream resumed from the last cursor.
	const pageLoads = `performance.getEntriesByType("resource").filter((e) => e.name.includes("/v1/inbox?")).length`
	var loadsBefore, loadsAfter int
	p.eval(ctx, pageLoads, &loadsBefore)
	proxy.Cut()
	p.waitFor(ctx, "the page to notice the cut", `document.querySelector(".connection")?.dataset.state !== "open"`, state)
	// A mark that fails (no answer while cut) is rolled back: the archived
	// item comes back and the error shows.
	p.click(ctx, `document.querySelector(".notifyd-item .notifyd-archive")`)
	p.waitFor(ctx, "the failed archive to be rolled back", `document.querySelectorAll(".notifyd-item").length === 2 &&
		[...document.querySelectorAll(".notifyd-inbox .notifyd-status")].some((s) => s.textContent.startsWith("network error"))`, state)
	send("third")
	servertest.Wait(left(ctx), func() bool { return len(serverItems().Items) == 3 || ctx.Err() != nil })
	proxy.Restore()
	p.waitFor(ctx, "the item sent during the cut, once", `document.querySelector(".connection")?.dataset.state === "open" &&
		[...document.querySelectorAll(".notifyd-item .notifyd-title")].map((e) => e.textContent).join("|") ===
		"Ada commented on third|Ada commented on second|Ada commented on first" &&
		document.querySelector(".notifyd-badge")?.textContent === "1"`, state)
	p.eval(ctx, pageLoads, &loadsAfter)
	if loadsBefore == 0 || loadsAfter != loadsBefore {
		t.Errorf("the inbox was loaded %d times before the cut and %d after: the item must come from the resumed stream, not a reload", loadsBefore, loadsAfter)
	}

	// 6. Mark all read and archive round-trip.
	p.click(ctx, `document.querySelector(".notifyd-mark-all")`)
	p.waitFor(ctx, "mark all read", `!document.querySelector(".notifyd-badge") && document.querySelectorAll(".notifyd-item.notifyd-unread").length === 0`, state)
	p.click(ctx, `document.querySelector(".notifyd-item .notifyd-archive")`)
	p.waitFor(ctx, "the archived item to leave", `document.querySelectorAll(".notifyd-item").length === 2`, state)
	servertest.Wait(left(ctx), func() bool { return len(serverItems().Items) == 2 || ctx.Err() != nil })
	for _, it := range serverItems().Items {
		if it.ReadAt == nil {
			t.Errorf("item %s is unread in the daemon after mark all read", it.Key)
		}
	}
	if n := len(serverItems().Items); n != 2 {
		t.Errorf("the daemon lists %d items after archiving one of three", n)
	}

	// 7. Escape closes the panel and focus returns to the bell.
	p.eval(ctx, `document.querySelector(".notifyd-panel").dispatchEvent(new KeyboardEvent("keydown", {key: "Escape", bubbles: true})), true`, nil)
	p.waitFor(ctx, "Escape to close the panel", `!document.querySelector(".notifyd-panel") && document.activeElement === document.querySelector(".notifyd-bell-button")`, state)

	// 8. The server-rendered page hydrates without a mismatch, then loads.
	p.navigate(ctx, appOrigin+"/ssr.html")
	p.waitFor(ctx, "the hydrated page to load its inbox", `window.__hydrating && document.querySelectorAll(".notifyd-item").length === 2`, state)
	var recoverable []string
	p.eval(ctx, `window.__recoverable`, &recoverable)
	if len(recoverable) > 0 {
		t.Errorf("hydration: %v", recoverable)
	}
	for _, line := range b.consoleLines() {
		if strings.Contains(line, "ydration") {
			t.Errorf("console: %s", line)
		}
	}
}

func proxyURL(p *cutProxy) string { return "http://" + p.ln.Addr().String() }

// consoleLines is a copy of the console messages and exceptions so far.
func (b *browser) consoleLines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.console...)
}
