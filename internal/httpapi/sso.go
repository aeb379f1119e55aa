package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/jackc/pgx/v5"
	"golang.org/x/oauth2"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// Console single sign-on (console.oidc): GET /admin/sso/login sends the
// browser to the identity provider with an authorization code request
// (PKCE S256, a state and a nonce, kept in a short-lived cookie bound to
// /admin/sso/); GET /admin/sso/callback exchanges the code, verifies the ID
// token, gives the person a role and starts a session; POST
// /admin/sso/logout ends it. The session is a cookie (HttpOnly,
// SameSite=Lax, Secure unless the redirect URL is http on a loopback host)
// that the API reads in place of a bearer token; a request that changes
// something must also carry the session's CSRF token in X-CSRF-Token (the
// console reads it from the notifyd_csrf cookie).

// Cookie names and the CSRF header.
const (
	SessionCookie = "notifyd_session"
	CSRFCookie    = "notifyd_csrf"
	CSRFHeader    = "X-CSRF-Token"
	ssoCookie     = "notifyd_sso"
	ssoPath       = "/admin/sso/"
	ssoLoginTTL   = 10 * time.Minute
	ssoTimeout    = 10 * time.Second
)

// ssoClient is the HTTP client of calls to the identity provider
// (discovery, keys, code exchange): none may hang a sign-in.
var ssoClient = &http.Client{Timeout: ssoTimeout}

// Audit actions of sign-in.
const (
	AuditSignIn       = "console.sign_in"
	AuditSignInFailed = "console.sign_in_failed"
	AuditSignOut      = "console.sign_out"
)

// sso is the console's OpenID Connect client: the provider is discovered on
// the first sign-in (not at start, so a provider down at boot does not keep
// the daemon down) and kept.
type sso struct {
	cfg *config.OIDC

	mu       sync.Mutex
	provider *oidc.Provider
}

func (o *sso) oauth(ctx context.Context) (*oauth2.Config, *oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider == nil {
		// The provider keeps this context to fetch its signing keys later:
		// not the request's cancellation, which ends with the request;
		// ssoClient's timeout bounds each call.
		p, err := oidc.NewProvider(oidc.ClientContext(context.WithoutCancel(ctx), ssoClient), o.cfg.Issuer)
		if err != nil {
			return nil, nil, fmt.Errorf("console.oidc: discover %s: %w", o.cfg.Issuer, err)
		}
		o.provider = p
	}
	oc := &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, RedirectURL: o.cfg.RedirectURL,
		Endpoint: o.provider.Endpoint(), Scopes: []string{oidc.ScopeOpenID, "email", "profile"}}
	if o.cfg.RolesClaim != "" && o.cfg.RolesClaim != "email" {
		oc.Scopes = append(oc.Scopes, o.cfg.RolesClaim)
	}
	return oc, o.provider.Verifier(&oidc.Config{ClientID: o.cfg.ClientID}), nil
}

// secureCookies is false only for a redirect URL that is http on a loopback
// host (development and tests): a browser drops Secure cookies there.
func (o *sso) secureCookies() bool {
	u, err := url.Parse(o.cfg.RedirectURL)
	if err != nil || u.Scheme == "https" {
		return true
	}
	h := u.Hostname()
	ip := net.ParseIP(h)
	return !(h == "localhost" || ip != nil && ip.IsLoopback())
}

// randomToken is 32 random bytes, base64url.
func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// loginState is what the login cookie carries between the redirect to the
// provider and the callback.
type loginState struct{ state, nonce, verifier string }

func (l loginState) String() string { return l.state + "." + l.nonce + "." + l.verifier }

func parseLoginState(s string) (loginState, bool) {
	p := strings.Split(s, ".")
	if len(p) != 3 || p[0] == "" || p[1] == "" || p[2] == "" {
		return loginState{}, false
	}
	return loginState{p[0], p[1], p[2]}, true
}

// equalSecret compares two secrets in constant time.
func equalSecret(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

func (s *Server) ssoDisabled() error {
	return notFoundError("single sign-on is not configured (console.oidc)")
}

// ssoLogin is GET /admin/sso/login: a redirect to the provider's
// authorization endpoint.
func (s *Server) ssoLogin(w http.ResponseWriter, r *http.Request) error {
	if s.sso == nil {
		return s.ssoDisabled()
	}
	oc, _, err := s.sso.oauth(r.Context())
	if err != nil {
		return &wire.Error{Status: http.StatusBadGateway, Code: wire.CodeInternal, Message: err.Error()}
	}
	l := loginState{state: randomToken(), nonce: randomToken(), verifier: oauth2.GenerateVerifier()}
	http.SetCookie(w, &http.Cookie{Name: ssoCookie, Value: l.String(), Path: ssoPath, MaxAge: int(ssoLoginTTL.Seconds()),
		HttpOnly: true, Secure: s.sso.secureCookies(), SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, oc.AuthCodeURL(l.state, oidc.Nonce(l.nonce), oauth2.S256ChallengeOption(l.verifier)), http.StatusFound)
	return nil
}

// signInError is a failed sign-in: written to the audit log, answered 401
// (or 403 for a person with no role).
func (s *Server) signInFailed(r *http.Request, status int, who, reason string) error {
	e := &stores.AuditEntry{At: s.clock(), Actor: who, ActorKind: ActorOperator, Action: AuditSignInFailed, Object: who,
		IP: peerIP(r), Summary: []byte(fmt.Sprintf(`{"reason":%q}`, reason))}
	if err := stores.InsertAudit(r.Context(), s.pool, e); err != nil {
		return err
	}
	code := wire.CodeUnauthorized
	if status == http.StatusForbidden {
		code = wire.CodeForbidden
	}
	return &wire.Error{Status: status, Code: code, Message: "sign-in failed: " + reason + " (sign in again at " + ssoPath + "login)"}
}

// ssoCallback is GET /admin/sso/callback?code=&state=: it checks the state
// against the login cookie, exchanges the code with the PKCE verifier,
// verifies the ID token and its nonce, finds the person's role and starts a
// session (a row and the two cookies), then sends the browser to /admin/.
func (s *Server) ssoCallback(w http.ResponseWriter, r *http.Request) error {
	if s.sso == nil {
		return s.ssoDisabled()
	}
	q := r.URL.Query()
	c, err := r.Cookie(ssoCookie)
	var l loginState
	ok := err == nil
	if ok {
		l, ok = parseLoginState(c.Value)
	}
	// The login cookie is single-use.
	http.SetCookie(w, &http.Cookie{Name: ssoCookie, Path: ssoPath, MaxAge: -1, HttpOnly: true, Secure: s.sso.secureCookies(),
		SameSite: http.SameSiteLaxMode})
	if !ok {
		return s.signInFailed(r, http.StatusUnauthorized, "", "no sign-in in progress in this browser (the login cookie is missing or expired)")
	}
	if !equalSecret(q.Get("state"), l.state) {
		return s.signInFailed(r, http.StatusUnauthorized, "", "state does not match the sign-in this browser started")
	}
	if e := q.Get("error"); e != "" {
		return s.signInFailed(r, http.StatusUnauthorized, "", "the identity provider answered "+e+": "+q.Get("error_description"))
	}
	oc, verifier, err := s.sso.oauth(r.Context())
	if err != nil {
		return &wire.Error{Status: http.StatusBadGateway, Code: wire.CodeInternal, Message: err.Error()}
	}
	ctx := oidc.ClientContext(r.Context(), ssoClient)
	tok, err := oc.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(l.verifier))
	if err != nil {
		return s.signInFailed(r, http.StatusUnauthorized, "", "code exchange refused: "+err.Error())
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return s.signInFailed(r, http.StatusUnauthorized, "", "the token response has no id_token")
	}
	idt, err := verifier.Verify(ctx, raw)
	if err != nil {
		return s.signInFailed(r, http.StatusUnauthorized, "", "invalid ID token: "+err.Error())
	}
	if !equalSecret(idt.Nonce, l.nonce) {
		return s.signInFailed(r, http.StatusUnauthorized, idt.Subject, "the ID token's nonce does not match this sign-in")
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return s.signInFailed(r, http.StatusUnauthorized, idt.Subject, "unreadable ID token claims")
	}
	sess, err := s.ssoRole(r.Context(), idt.Subject, claims)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			return s.signInFailed(r, http.StatusForbidden, sess.Operator, we.Message)
		}
		return err
	}
	now := s.clock()
	sess.CreatedAt, sess.ExpiresAt = now, now.Add(s.cfg.Console.OIDC.SessionTTL.D())
	stok, csrf := randomToken(), randomToken()
	e := &stores.AuditEntry{At: now, Actor: sess.Operator, ActorKind: ActorOperator, Action: AuditSignIn, Object: sess.Operator,
		IP: peerIP(r), Summary: []byte(fmt.Sprintf(`{"role":%q,"tenants":%q}`, sess.Role, sess.Tenants))}
	if err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		// Sessions that can no longer be used go as new ones start.
		if _, err := stores.DeleteEndedConsoleSessions(r.Context(), tx, now, s.cfg.Console.OIDC.IdleTimeout.D()); err != nil {
			return err
		}
		if err := stores.CreateConsoleSession(r.Context(), tx, sess, stok, csrf); err != nil {
			return err
		}
		return stores.InsertAudit(r.Context(), tx, e)
	}); err != nil {
		return err
	}
	secure := s.sso.secureCookies()
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: stok, Path: "/", Expires: sess.ExpiresAt,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	// The console reads this one to send it back in X-CSRF-Token: a page of
	// another origin can neither read it nor set the header.
	http.SetCookie(w, &http.Cookie{Name: CSRFCookie, Value: csrf, Path: "/", Expires: sess.ExpiresAt,
		Secure: secure, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, "/admin/", http.StatusFound)
	return nil
}

// ssoRole finds the role of the person the ID token names: their row in the
// operators table (by email, else subject) wins; else the strongest role
// console.oidc.role_map gives a value of the roles claim. None is a 403.
func (s *Server) ssoRole(ctx context.Context, subject string, claims map[string]any) (*stores.ConsoleSession, error) {
	id := subject
	if email, _ := claims["email"].(string); email != "" {
		id = email
	}
	name, _ := claims["name"].(string)
	sess := &stores.ConsoleSession{Operator: id, Name: name}
	op, err := stores.GetOperator(ctx, s.pool, id)
	switch {
	case err == nil:
		sess.Role, sess.Tenants = op.Role, op.Tenants
		return sess, nil
	case !errors.Is(err, stores.ErrNotFound):
		return sess, err
	}
	cfg := s.cfg.Console.OIDC
	best := Role(0)
	for _, v := range claimValues(claims[cfg.RolesClaim]) {
		if r, ok := ParseRole(cfg.RoleMap[v]); ok && r > best {
			best = r
		}
	}
	if best == 0 || cfg.RolesClaim == "" {
		return sess, forbidden("%s is not an operator (PUT /v1/operators/{id}) and no value of its %q claim maps to a role (console.oidc.role_map)",
			id, cfg.RolesClaim)
	}
	sess.Role = best.String()
	return sess, nil
}

// claimValues reads a claim that is a string or a list of strings.
func claimValues(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// sessionPrincipal authenticates a request by its session cookie; nil, nil
// when it has none (or single sign-on is off). A state-changing request
// must carry the session's CSRF token in X-CSRF-Token.
func (s *Server) sessionPrincipal(r *http.Request) (*principal, error) {
	if s.sso == nil {
		return nil, nil
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return nil, nil
	}
	sess, err := stores.UseConsoleSession(r.Context(), s.pool, c.Value, s.clock(), s.cfg.Console.OIDC.IdleTimeout.D())
	if errors.Is(err, stores.ErrNotFound) {
		return nil, errorf(http.StatusUnauthorized, wire.CodeUnauthorized,
			"invalid console session: signed out, expired or idle too long (sign in again at %slogin)", ssoPath)
	}
	if err != nil {
		return nil, err
	}
	if !safeMethod(r.Method) {
		got := sha256.Sum256([]byte(r.Header.Get(CSRFHeader)))
		if r.Header.Get(CSRFHeader) == "" || subtle.ConstantTimeCompare(got[:], sess.CSRFHash) != 1 {
			return nil, forbidden("%s %s from a console session needs the session's CSRF token in %s", r.Method, r.URL.Path, CSRFHeader)
		}
	}
	role, _ := ParseRole(sess.Role)
	return &principal{kind: ActorOperator, id: sess.Operator, role: role, tenants: sess.Tenants}, nil
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// ssoLogout is POST /admin/sso/logout (with the CSRF header): the session's
// row is deleted and its cookies cleared; 303 to /admin/.
func (s *Server) ssoLogout(w http.ResponseWriter, r *http.Request) error {
	if s.sso == nil {
		return s.ssoDisabled()
	}
	p, err := s.sessionPrincipal(r)
	if err != nil {
		return err
	}
	if p == nil {
		return errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "no console session to sign out of")
	}
	c, _ := r.Cookie(SessionCookie)
	e := &stores.AuditEntry{At: s.clock(), Actor: p.id, ActorKind: ActorOperator, Action: AuditSignOut, Object: p.id, IP: peerIP(r)}
	err = pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		if _, err := stores.DeleteConsoleSession(r.Context(), tx, c.Value); err != nil {
			return err
		}
		return stores.InsertAudit(r.Context(), tx, e)
	})
	if err != nil && !errors.Is(err, stores.ErrNotFound) {
		return err
	}
	secure := s.sso.secureCookies()
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	http.SetCookie(w, &http.Cookie{Name: CSRFCookie, Path: "/", MaxAge: -1, Secure: secure, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, "/admin/", http.StatusSeeOther)
	return nil
}
