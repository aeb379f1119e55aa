package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// RequireAdmin wraps h so it runs only for an admin caller whose role the
// route's rule allows (routeRules, by the pattern the request was routed
// to): "Authorization: Bearer <operator token>", or the config's
// http.admin_token (the break-glass admin). A recipient token or a tenant
// key is not an admin credential; a role too weak for the route, or a
// caller confined to tenants on a route that reaches across them, is a 403.
func (s *Server) RequireAdmin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, err := s.checkAdmin(r)
		if err != nil {
			wire.WriteError(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// requireBounce authorises POST /v1/bounces: the admin token, or
// http.bounce_token, which authorises that route and no other. A refusal
// names neither token's value.
func (s *Server) requireBounce(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if want := s.cfg.HTTP.BounceToken; want != "" {
			if got, ok := bearer(r); ok {
				g, wnt := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
				if subtle.ConstantTimeCompare(g[:], wnt[:]) == 1 {
					h.ServeHTTP(w, r)
					return
				}
			}
		}
		s.RequireAdmin(h).ServeHTTP(w, r)
	})
}

// checkAdmin authenticates an admin request and authorizes it for its
// route, returning the request carrying who made it.
func (s *Server) checkAdmin(r *http.Request) (*http.Request, error) {
	p, err := s.authenticateStaff(r)
	if err != nil {
		return r, err
	}
	ar, err := authorize(r, p)
	if err != nil {
		return r, err
	}
	return ar, nil
}

// Recipient authenticates a recipient request and returns the recipient id
// (the token's subject). The token is read from "Authorization: Bearer <jwt>"
// or, when that header is absent, from the access_token query parameter (for
// EventSource, which cannot set headers). The error is an *wire.Error to hand to
// WriteError: 400 bad_request for a query string that does not parse, else
// 401 unauthorized: the token is missing, forged, expired, not HS256,
// without iat, with a crit header, longer-lived than http.max_token_ttl, or
// recipient tokens are disabled (no http.token_secret).
func (s *Server) Recipient(r *http.Request) (string, error) {
	c, err := s.RecipientClaims(r)
	return c.Recipient, err
}

// RecipientClaims is Recipient returning the token's claims: the stream
// ends at ExpiresAt.
func (s *Server) RecipientClaims(r *http.Request) (notifyd.RecipientClaims, error) {
	if r.Header.Get("Authorization") == "" {
		q, err := parseQuery(r)
		if err != nil {
			return notifyd.RecipientClaims{}, err
		}
		if tok := q.Get("access_token"); tok != "" {
			c, err := s.parseRecipient(tok)
			if err == nil {
				err = s.checkRevoked(r, c)
			}
			return c, err
		}
	}
	c, err := s.recipientFromHeader(r)
	if err == nil {
		err = s.checkRevoked(r, c)
	}
	return c, err
}

// checkRevoked refuses a token issued before its recipient's
// tokens_valid_after: one primary-key read per authenticated request.
// Strictly before: iat has whole seconds, so a token minted in the second
// of the revocation is refused too (mint it a second later).
func (s *Server) checkRevoked(r *http.Request, c notifyd.RecipientClaims) error {
	after, err := stores.TokensValidAfter(r.Context(), s.pool, c.Recipient)
	if err != nil {
		return err
	}
	if !after.IsZero() && c.IssuedAt.Before(after) {
		return errorf(http.StatusUnauthorized, wire.CodeUnauthorized,
			"invalid recipient token: revoked (issued before the recipient's tokens_valid_after %s)", after.Format(time.RFC3339))
	}
	return nil
}

func (s *Server) recipientFromHeader(r *http.Request) (notifyd.RecipientClaims, error) {
	tok, ok := bearer(r)
	if !ok {
		return notifyd.RecipientClaims{}, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "missing Authorization: Bearer <recipient token>")
	}
	return s.parseRecipient(tok)
}

func (s *Server) parseRecipient(tok string) (notifyd.RecipientClaims, error) {
	if s.cfg.HTTP.TokenSecret == "" {
		return notifyd.RecipientClaims{}, errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "recipient endpoints are disabled: http.token_secret is not set")
	}
	// The server's clock decides expiry, like every other time it uses.
	c, err := notifyd.VerifyRecipientToken(s.cfg.HTTP.TokenSecret, tok, s.clock(), s.cfg.HTTP.MaxTokenTTL.D())
	if err != nil {
		// The cause (expired, bad signature, wrong algorithm) helps a developer
		// and tells an attacker nothing they do not know.
		return notifyd.RecipientClaims{}, &wire.Error{Status: http.StatusUnauthorized, Code: wire.CodeUnauthorized, Message: "invalid recipient token: " + err.Error()}
	}
	return c, nil
}

// bearer returns the token of "Authorization: Bearer <token>" (the scheme is
// case-insensitive).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// RequireAdminBrowser is RequireAdmin for pages a person opens in a browser
// (River UI at /riverui/): it also accepts HTTP Basic authentication whose
// password is the admin token (any user name), and answers a refusal with a
// Basic challenge so the browser asks for it. The browser then sends the
// credentials with the page's own API calls.
func (s *Server) RequireAdminBrowser(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pass, ok := r.BasicAuth(); ok {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+pass)
		}
		r, err := s.checkAdmin(r)
		if err != nil {
			wire.WriteError(basicChallenge{w}, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// basicChallenge turns a 401's challenge into a Basic one.
type basicChallenge struct{ http.ResponseWriter }

func (b basicChallenge) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		b.Header().Set("WWW-Authenticate", `Basic realm="notifyd admin", charset="UTF-8"`)
	}
	b.ResponseWriter.WriteHeader(code)
}
