package web_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/oidctest"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
)

// TestBrowserConsoleSSO signs in to /admin/ in headless Chromium through an
// OpenID Connect provider the test runs on loopback (discovery, JWKS,
// authorize, a token endpoint that checks PKCE): the console lands signed
// in with the role the groups claim gives, with no token pasted, the
// session cookie out of the page's reach (HttpOnly); signing out ends the
// session on the server.
func TestBrowserConsoleSSO(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	ctx := browserContext(t)
	_, dbURL := pgtest.NewDBURL(t)
	idp := oidctest.New(t, "notifyd-console", "s3cret-client")
	idp.SetUser(oidctest.User{Subject: "s-1", Email: "ada@example.test", Name: "Ada", Groups: []string{"support"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	cfg := servertest.Config(t, "")
	cfg.Database.URL = dbURL
	cfg.Console.OIDC = &config.OIDC{Issuer: idp.URL, ClientID: idp.ClientID, ClientSecret: idp.ClientSecret,
		RedirectURL: base + "/admin/sso/callback", RolesClaim: "groups", RoleMap: map[string]string{"support": "operator"},
		SessionTTL: config.Duration(time.Hour), IdleTimeout: config.Duration(10 * time.Minute)}
	d, err := server.New(ctx, server.Options{Config: cfg, Listener: ln, Logger: servertest.Logger(), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done; d.Close() })

	b := startBrowser(t, bin)
	p := b.newPage(ctx)
	p.navigate(ctx, base+"/admin/")
	p.waitFor(ctx, "the sign-in form", `!document.querySelector("#signin").hidden`, "document.body.innerText")
	p.click(ctx, `document.querySelector("#sso-signin")`)
	p.waitFor(ctx, "the console signed in as Ada, operator",
		`location.pathname === "/admin/" && document.querySelector("#whoami").textContent.includes("ada@example.test (operator")`,
		`location.href + " | " + document.body.innerText`)
	var cookies string
	p.eval(ctx, `document.cookie`, &cookies)
	if !strings.Contains(cookies, "notifyd_csrf=") || strings.Contains(cookies, "notifyd_session") {
		t.Fatalf("document.cookie %q: want the CSRF cookie only (the session cookie is HttpOnly)", cookies)
	}
	if !p.visible(ctx, "#signout") {
		t.Fatal("no sign-out button")
	}
	var n int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM notify_console_sessions WHERE operator = 'ada@example.test'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("sessions: %d (%v)", n, err)
	}
	p.click(ctx, `document.querySelector("#signout")`)
	p.waitFor(ctx, "signed out", `!document.querySelector("#signin").hidden && !document.cookie.includes("notifyd_csrf")`,
		"document.body.innerText")
	servertest.Eventually(t, left(ctx), "the session row to be deleted", func() bool {
		return d.Pool().QueryRow(ctx, `SELECT count(*) FROM notify_console_sessions`).Scan(&n) == nil && n == 0
	})
}

// visible reports whether the element sel names is shown.
func (p *page) visible(ctx context.Context, sel string) bool {
	var ok bool
	p.eval(ctx, `(() => { const e = document.querySelector(`+jsString(sel)+`); return !!e && !e.hidden; })()`, &ok)
	return ok
}
