package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/oidctest"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
)

// ssoDaemon starts a daemon whose console signs in with a fake provider
// (oidctest) on loopback; roleMap maps the groups claim.
func ssoDaemon(t *testing.T, roleMap map[string]string) (d *server.Server, base string, idp *oidctest.Provider) {
	t.Helper()
	_, dbURL := pgtest.NewDBURL(t)
	idp = oidctest.New(t, "notifyd-console", "s3cret-client")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base = "http://" + ln.Addr().String()
	cfg := servertest.Config(t, "")
	cfg.Database.URL = dbURL
	cfg.HTTP.Rate.Admin = 0
	cfg.Console.OIDC = &config.OIDC{Issuer: idp.URL, ClientID: idp.ClientID, ClientSecret: idp.ClientSecret,
		RedirectURL: base + "/admin/sso/callback", RolesClaim: "groups", RoleMap: roleMap,
		SessionTTL: config.Duration(time.Hour), IdleTimeout: config.Duration(10 * time.Minute)}
	d, err = server.New(context.Background(), server.Options{Config: cfg, Listener: ln, Logger: servertest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; d.Close() })
	servertest.Eventually(t, 10*time.Second, "the API answers", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return d, base, idp
}

// browser is an HTTP client with a cookie jar that follows redirects, as a
// browser does.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 10 * time.Second}
}

func do(t *testing.T, c *http.Client, method, u string, hdr map[string]string, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func cookie(c *http.Client, base, name string) *http.Cookie {
	u, _ := url.Parse(base + "/")
	for _, k := range c.Jar.Cookies(u) {
		if k.Name == name {
			return k
		}
	}
	return nil
}

func auditActions(t *testing.T, d *server.Server, action string) []string {
	t.Helper()
	rows, err := d.Pool().Query(t.Context(), `SELECT actor FROM notify_audit WHERE action = $1 ORDER BY at, id`, action)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// TestSSOSignInSessionSignOut: sign-in through the provider (PKCE, state,
// nonce) lands on /admin/ with a session cookie (HttpOnly, SameSite=Lax);
// the session is the operator's (their table row gives the role); a
// state-changing request needs the CSRF token; sign-out ends the session,
// and its cookie is refused afterwards. Sign-in and sign-out are audited.
func TestSSOSignInSessionSignOut(t *testing.T) {
	t.Parallel()
	d, base, idp := ssoDaemon(t, nil)
	if st, b := call(t, base, "PUT", "/v1/operators/ada@example.test", servertest.AdminToken,
		map[string]any{"name": "Ada", "role": "operator"}); st != 201 {
		t.Fatalf("PUT operator: %d %s", st, b)
	}
	c := browser(t)
	st, b := do(t, c, "GET", base+"/admin/sso/login", nil, "")
	if st != 200 || !strings.Contains(string(b), "<html") {
		t.Fatalf("sign-in ended with %d %.200s, want the console page", st, b)
	}
	if idp.Exchanges() != 1 {
		t.Fatalf("token requests: %d, want 1", idp.Exchanges())
	}
	sess := cookie(c, base, "notifyd_session")
	csrf := cookie(c, base, "notifyd_csrf")
	if sess == nil || csrf == nil {
		t.Fatalf("cookies after sign-in: session %v csrf %v", sess, csrf)
	}
	var n int
	if err := d.Pool().QueryRow(t.Context(), `SELECT count(*) FROM notify_console_sessions WHERE hash = sha256($1::bytea)`,
		[]byte(sess.Value)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("session rows by hash: %d (%v), want 1", n, err)
	}
	if err := d.Pool().QueryRow(t.Context(), `SELECT count(*) FROM notify_console_sessions WHERE hash = $1::bytea`,
		[]byte(sess.Value)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("session stored in clear: %d rows (%v)", n, err)
	}
	st, b = do(t, c, "GET", base+"/v1/me", nil, "")
	var meRaw map[string]any
	_ = json.Unmarshal(b, &meRaw)
	if st != 200 || meRaw["actor"] != "ada@example.test" || meRaw["actor_kind"] != "operator" || meRaw["role"] != "operator" {
		t.Fatalf("GET /v1/me with the session: %d %s", st, b)
	}
	put := base + "/v1/suppressions/email/x@example.test"
	if st, b := do(t, c, "PUT", put, nil, `{}`); st != 403 || !strings.Contains(string(b), "X-CSRF-Token") {
		t.Fatalf("PUT without the CSRF token: %d %s, want 403", st, b)
	}
	if st, b := do(t, c, "PUT", put, map[string]string{"X-CSRF-Token": "forged"}, `{}`); st != 403 {
		t.Fatalf("PUT with a wrong CSRF token: %d %s, want 403", st, b)
	}
	if st, b := do(t, c, "PUT", put, map[string]string{"X-CSRF-Token": csrf.Value}, `{}`); st/100 != 2 {
		t.Fatalf("PUT with the CSRF token: %d %s", st, b)
	}
	if got := auditActions(t, d, "suppression.add"); len(got) != 1 || got[0] != "ada@example.test" {
		t.Fatalf("suppression.add audit actors %v", got)
	}
	if st, b := do(t, c, "DELETE", base+"/v1/operators/ada@example.test", map[string]string{"X-CSRF-Token": csrf.Value}, ""); st != 403 {
		t.Fatalf("an operator deleting an operator: %d %s, want 403", st, b)
	}
	// Sign-out needs the CSRF token too.
	if st, _ := do(t, c, "POST", base+"/admin/sso/logout", nil, ""); st != 403 {
		t.Fatalf("sign-out without the CSRF token: %d, want 403", st)
	}
	if st, b := do(t, c, "POST", base+"/admin/sso/logout", map[string]string{"X-CSRF-Token": csrf.Value}, ""); st != 200 || !strings.Contains(string(b), "<html") {
		t.Fatalf("sign-out: %d %s", st, b)
	}
	if cookie(c, base, "notifyd_session") != nil {
		t.Fatal("the session cookie survived sign-out")
	}
	// The old cookie, replayed, names no session.
	if st, b := do(t, http.DefaultClient, "GET", base+"/v1/me", map[string]string{"Cookie": "notifyd_session=" + sess.Value}, ""); st != 401 {
		t.Fatalf("the signed-out session: %d %s, want 401", st, b)
	}
	if got := auditActions(t, d, "console.sign_in"); len(got) != 1 || got[0] != "ada@example.test" {
		t.Fatalf("sign-in audit rows %v", got)
	}
	if got := auditActions(t, d, "console.sign_out"); len(got) != 1 {
		t.Fatalf("sign-out audit rows %v", got)
	}
}

// TestSSOCookieAttributes: the session cookie is HttpOnly and SameSite=Lax,
// the CSRF cookie readable by the console; on loopback http neither is
// Secure (a browser would drop it), which the config check allows only there.
func TestSSOCookieAttributes(t *testing.T) {
	t.Parallel()
	_, base, idp := ssoDaemon(t, map[string]string{"eng": "viewer"})
	idp.SetUser(oidctest.User{Subject: "s-6", Email: "lin@example.test", Groups: []string{"eng"}})
	c := browser(t)
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if strings.HasSuffix(req.URL.Path, "/admin/") {
			return http.ErrUseLastResponse
		}
		return nil
	}
	resp, err := c.Get(base + "/admin/sso/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 302 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := map[string]*http.Cookie{}
	for _, k := range resp.Cookies() {
		got[k.Name] = k
	}
	s, x := got["notifyd_session"], got["notifyd_csrf"]
	if s == nil || !s.HttpOnly || s.SameSite != http.SameSiteLaxMode || s.Path != "/" {
		t.Fatalf("session cookie %+v", s)
	}
	if x == nil || x.HttpOnly || x.SameSite != http.SameSiteLaxMode {
		t.Fatalf("csrf cookie %+v", x)
	}
}

// TestSSORoleFromGroupsClaim: without an operators row the strongest role
// the groups claim maps to is the session's; a person whose groups map to
// no role is refused (403) and the failure is audited.
func TestSSORoleFromGroupsClaim(t *testing.T) {
	t.Parallel()
	d, base, idp := ssoDaemon(t, map[string]string{"eng": "viewer", "eng-admins": "admin"})
	idp.SetUser(oidctest.User{Subject: "s-2", Email: "grace@example.test", Groups: []string{"eng", "eng-admins"}})
	c := browser(t)
	if st, b := do(t, c, "GET", base+"/admin/sso/login", nil, ""); st != 200 {
		t.Fatalf("sign-in: %d %s", st, b)
	}
	st, b := do(t, c, "GET", base+"/v1/me", nil, "")
	if st != 200 || !strings.Contains(string(b), `"role":"admin"`) || !strings.Contains(string(b), "grace@example.test") {
		t.Fatalf("me: %d %s", st, b)
	}
	idp.SetUser(oidctest.User{Subject: "s-3", Email: "eve@example.test", Groups: []string{"sales"}})
	c2 := browser(t)
	if st, b := do(t, c2, "GET", base+"/admin/sso/login", nil, ""); st != 403 || !strings.Contains(string(b), "role_map") {
		t.Fatalf("sign-in with no role: %d %s, want 403", st, b)
	}
	if cookie(c2, base, "notifyd_session") != nil {
		t.Fatal("a refused sign-in set a session cookie")
	}
	if got := auditActions(t, d, "console.sign_in_failed"); len(got) != 1 || got[0] != "eve@example.test" {
		t.Fatalf("failed sign-in audit rows %v", got)
	}
}

// TestSSORefusesForgedState: a callback whose state is not the one this
// browser's sign-in started, an ID token whose nonce differs, a code
// exchanged without the PKCE verifier the challenge was made from, and a
// forged session cookie are each refused (401) and leave no session.
func TestSSORefusesForgedState(t *testing.T) {
	t.Parallel()
	d, base, idp := ssoDaemon(t, map[string]string{"eng": "viewer"})
	idp.SetUser(oidctest.User{Subject: "s-4", Email: "bob@example.test", Groups: []string{"eng"}})
	noFollow := func(c *http.Client) {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	// Start a sign-in, stop at the provider's redirect back.
	start := func() (*http.Client, *url.URL) {
		c := browser(t)
		noFollow(c)
		resp, err := c.Get(base + "/admin/sso/login")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		auth, _ := url.Parse(resp.Header.Get("Location"))
		if auth.Query().Get("code_challenge_method") != "S256" || auth.Query().Get("nonce") == "" || auth.Query().Get("state") == "" {
			t.Fatalf("authorize URL %s lacks PKCE, nonce or state", auth)
		}
		resp, err = c.Get(auth.String())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		back, _ := url.Parse(resp.Header.Get("Location"))
		return c, back
	}

	c, back := start()
	q := back.Query()
	q.Set("state", "forged")
	back.RawQuery = q.Encode()
	before := idp.Exchanges()
	if st, b := do(t, c, "GET", back.String(), nil, ""); st != 401 || !strings.Contains(string(b), "state") {
		t.Fatalf("forged state: %d %s, want 401", st, b)
	}
	if idp.Exchanges() != before {
		t.Fatal("a callback with a forged state exchanged its code")
	}

	// The callback in another browser (no login cookie).
	_, back = start()
	if st, _ := do(t, browser(t), "GET", back.String(), nil, ""); st != 401 {
		t.Fatalf("callback without the login cookie: %d, want 401", st)
	}

	// A wrong PKCE verifier: the provider refuses the exchange.
	c, back = start()
	u, _ := url.Parse(base + "/admin/sso/")
	for _, k := range c.Jar.Cookies(u) {
		if k.Name == "notifyd_sso" {
			parts := strings.Split(k.Value, ".")
			parts[2] = strings.Repeat("A", 43)
			c.Jar.SetCookies(u, []*http.Cookie{{Name: "notifyd_sso", Value: strings.Join(parts, "."), Path: "/admin/sso/"}})
		}
	}
	if st, b := do(t, c, "GET", back.String(), nil, ""); st != 401 || !strings.Contains(string(b), "exchange") {
		t.Fatalf("wrong PKCE verifier: %d %s, want 401", st, b)
	}

	// An ID token with another nonce.
	idp.SetNonce("not-this-sign-in")
	c, back = start()
	if st, b := do(t, c, "GET", back.String(), nil, ""); st != 401 || !strings.Contains(string(b), "nonce") {
		t.Fatalf("wrong nonce: %d %s, want 401", st, b)
	}
	idp.SetNonce("")

	var n int
	if err := d.Pool().QueryRow(t.Context(), `SELECT count(*) FROM notify_console_sessions`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("sessions after refused sign-ins: %d (%v)", n, err)
	}
	if got := auditActions(t, d, "console.sign_in_failed"); len(got) != 4 {
		t.Fatalf("failed sign-in rows: %d, want 4", len(got))
	}
	if st, _ := do(t, http.DefaultClient, "GET", base+"/v1/me", map[string]string{"Cookie": "notifyd_session=forged"}, ""); st != 401 {
		t.Fatalf("forged session cookie: %d, want 401", st)
	}
}

// TestSSOSessionTimeouts: a session unused for longer than idle_timeout,
// and one past session_ttl, is refused; a live one is not.
func TestSSOSessionTimeouts(t *testing.T) {
	t.Parallel()
	d, base, idp := ssoDaemon(t, map[string]string{"eng": "viewer"})
	idp.SetUser(oidctest.User{Subject: "s-5", Email: "kim@example.test", Groups: []string{"eng"}})
	signIn := func() string {
		c := browser(t)
		if st, b := do(t, c, "GET", base+"/admin/sso/login", nil, ""); st != 200 {
			t.Fatalf("sign-in: %d %s", st, b)
		}
		return cookie(c, base, "notifyd_session").Value
	}
	me := func(tok string) int {
		st, _ := do(t, http.DefaultClient, "GET", base+"/v1/me", map[string]string{"Cookie": "notifyd_session=" + tok}, "")
		return st
	}
	idle, old := signIn(), signIn()
	if me(idle) != 200 || me(old) != 200 {
		t.Fatal("fresh sessions refused")
	}
	// 9 of the 10 idle minutes pass: still live, and the use restarts them.
	exec := func(sql, tok string) {
		if _, err := d.Pool().Exec(t.Context(), sql, []byte(tok)); err != nil {
			t.Fatal(err)
		}
	}
	exec(`UPDATE notify_console_sessions SET last_seen_at = now() - interval '9 minutes' WHERE hash = sha256($1::bytea)`, idle)
	if me(idle) != 200 {
		t.Fatal("a session idle 9 of 10 minutes refused")
	}
	exec(`UPDATE notify_console_sessions SET last_seen_at = now() - interval '11 minutes' WHERE hash = sha256($1::bytea)`, idle)
	if me(idle) != 401 {
		t.Fatal("a session idle 11 minutes (idle_timeout 10m) accepted")
	}
	exec(`UPDATE notify_console_sessions SET expires_at = now() - interval '1 second' WHERE hash = sha256($1::bytea)`, old)
	if me(old) != 401 {
		t.Fatal("a session past its session_ttl accepted")
	}
	// The next sign-in deletes the ended sessions' rows.
	live := signIn()
	var n int
	if err := d.Pool().QueryRow(t.Context(), `SELECT count(*) FROM notify_console_sessions`).Scan(&n); err != nil || n != 1 || me(live) != 200 {
		t.Fatalf("sessions after a sign-in: %d (%v), want only the live one", n, err)
	}
}
