package web_test

import (
	"fmt"
	"html/template"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// appPage is an application's page on another origin than the daemon: it
// loads the components from the daemon's /ui/ (public code, any origin may)
// and points them at the daemon's API, as docs/front-end.md shows.
var appPage = template.Must(template.New("app").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>app</title>
<script type="module" src="{{.UI}}/ui/notifyd-inbox.js"></script>
<script type="module" src="{{.UI}}/ui/notifyd-preferences.js"></script>
<script>window.__errors = []; document.addEventListener("notifyd:error", (e) => window.__errors.push(e.detail));</script>
</head><body>
<notifyd-inbox endpoint="{{.Endpoint}}" token="{{.Token}}"></notifyd-inbox>
<notifyd-preferences endpoint="{{.Endpoint}}" token="{{.Token}}"></notifyd-preferences>
</body></html>`))

// TestBrowserCrossOriginHint: a page on an origin the daemon does not take
// (two loopback ports) loads the components, and they say what to fix
// ("add this origin to http.allowed_origins"), not "Failed to fetch"; the
// page reads nothing else. A daemon that cannot answer at all (nothing on
// the port) gives the same hint after the browser's network error.
func TestBrowserCrossOriginHint(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	ctx := browserContext(t)
	_, dbURL := pgtest.NewDBURL(t)
	mailbox := smtpcapture.Start(t)
	cfg := servertest.Config(t, fmt.Sprintf(browserConfig, mailbox.Port()))
	cfg.Database.URL = dbURL
	if len(cfg.HTTP.AllowedOrigins) != 0 {
		t.Fatalf("the config allows %v", cfg.HTTP.AllowedOrigins)
	}
	d := startDemoDaemon(t, ctx, cfg, nil)
	if code := d.api.do("POST", "/v1/notifications", servertest.AdminToken, map[string]any{"notifier": "mention.created",
		"key": "m-1", "recipients": []string{"u2"}, "params": map[string]any{"who": "Ada"}}, nil); code != http.StatusAccepted {
		t.Fatalf("send = %d", code)
	}

	// Nothing listens here: the browser's request fails without an answer.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + probe.Addr().String()
	probe.Close()

	app := http.NewServeMux()
	app.HandleFunc("GET /app", func(w http.ResponseWriter, r *http.Request) {
		endpoint := d.api.base
		if r.URL.Query().Get("dead") != "" {
			endpoint = dead
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = appPage.Execute(w, map[string]string{"UI": d.api.base, "Endpoint": endpoint, "Token": d.token})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: app}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	appOrigin := "http://" + ln.Addr().String()

	b := startBrowser(t, bin)
	p := b.newPage(ctx)
	state := `({errors: JSON.stringify(window.__errors).slice(0, 1500), inbox: ` + inboxState + `,
		prefs: ` + prefs(`$(".error") ? $(".error").innerText : ""`) + `})`

	// The daemon answers: 403 origin_not_allowed, readable by the page.
	p.navigate(ctx, appOrigin+"/app")
	hint := "add it to http.allowed_origins"
	p.waitFor(ctx, "the components to say what to fix", `window.__errors.some((e) => e.code === "origin_not_allowed" && e.status === 403 &&
		e.message.includes(`+jsString(hint)+`) && e.message.includes(`+jsString(appOrigin)+`))`, state)
	p.waitFor(ctx, "the preference center to show the hint", prefs(`!$(".error").hidden && $(".error").innerText.includes(`+jsString(hint)+`)`), state)
	p.click(ctx, in(`$(".bell")`))
	p.waitFor(ctx, "the inbox panel to show the hint", in(`$(".status").textContent.includes(`+jsString(hint)+`) && $$(".item").length === 0`), state)
	var leaked bool
	p.eval(ctx, `window.__errors.some((e) => e.message.includes("Failed to fetch"))`, &leaked)
	if leaked {
		t.Fatal(`a component still says only "Failed to fetch"`)
	}

	// Nothing answers: the browser's network error, with the hint.
	p.navigate(ctx, appOrigin+"/app?dead=1")
	p.waitFor(ctx, "the network error to carry the hint", `window.__errors.some((e) => e.code === "network_error" &&
		e.message.includes("http.allowed_origins") && e.message.includes(`+jsString(appOrigin)+`) && e.message.includes(`+jsString(dead)+`))`, state)
	var msg string
	p.eval(ctx, `window.__errors.find((e) => e.code === "network_error").message`, &msg)
	if !strings.HasPrefix(msg, "network error: ") {
		t.Fatalf("network error message %q", msg)
	}
}
