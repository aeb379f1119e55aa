package httpapi

import (
	"errors"
	"html/template"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/unsubscribe"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// maxUnsubscribeBody bounds the body of POST /v1/unsubscribe/{token}: the
// one-click body is 26 bytes, a multipart one a couple of hundred.
const maxUnsubscribeBody = 16 << 10

// unsubscribeResponse is the JSON answer of POST /v1/unsubscribe/{token}.
type unsubscribeResponse struct {
	Unsubscribed bool     `json:"unsubscribed"`
	Channel      string   `json:"channel"`
	Scopes       []string `json:"scopes"`
}

// unsubscribeToken verifies the path's token at the server's clock and
// checks that what it names can still be written: a registered per-recipient
// channel and rules the registry accepts. Anything else is the same 404 (a
// tampered link, an expired one, one made with another http.token_secret,
// one for a channel no longer registered), so the answer tells a prober
// nothing. A valid token spends one of its recipient's http.rate.recipient
// tokens (429 when there is none): a link cannot be replayed in a loop.
func (s *Server) unsubscribeToken(w http.ResponseWriter, r *http.Request) (unsubscribe.Token, []notifyd.Rule, error) {
	notFound := notFoundError("this unsubscribe link is not valid")
	if s.unsub == nil {
		return unsubscribe.Token{}, nil, notFound
	}
	tok, err := s.unsub.VerifyAt(r.PathValue("token"), s.clock())
	if err != nil {
		return unsubscribe.Token{}, nil, notFound
	}
	if err := s.limitRecipient(w, tok.Recipient); err != nil {
		return unsubscribe.Token{}, nil, err
	}
	if p, ok := s.reg.Lookup(tok.Channel); !ok || !p.PerRecipient {
		return unsubscribe.Token{}, nil, notFound
	}
	rules := make([]notifyd.Rule, 0, len(tok.Scopes))
	seen := map[string]bool{}
	for _, sc := range tok.Scopes {
		rule := notifyd.Rule{Scope: sc, Channel: tok.Channel, Mode: notifyd.ModeOff}
		if seen[sc] || s.reg.ValidateRule(rule) != nil {
			return unsubscribe.Token{}, nil, notFound
		}
		seen[sc] = true
		rules = append(rules, rule)
	}
	return tok, rules, nil
}

// setPageHeaders are the headers of the unsubscribe page and answers: the
// token is in the URL, so no referrer leaves with it, nothing is cached, and
// no other site may frame the page to trick a click (AdminPage adds
// X-Frame-Options and no-store).
func setPageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Add("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'")
}

// unsubscribePage is GET /v1/unsubscribe/{token}: a small page that says
// what the link turns off and asks for a click. It never writes: mail
// scanners and link previews follow GETs.
func (s *Server) unsubscribePage(w http.ResponseWriter, r *http.Request) error {
	setPageHeaders(w)
	tok, _, err := s.unsubscribeToken(w, r)
	if err != nil {
		return err
	}
	return writePage(w, http.StatusOK, pageData{Confirm: true, Channel: tok.Channel, What: describeScopes(tok.Scopes)})
}

// unsubscribePost is POST /v1/unsubscribe/{token}: the one-click unsubscribe
// (RFC 8058). The token is the only authority. The body is
// List-Unsubscribe=One-Click, form-encoded or multipart as mailbox providers
// send it, or empty; a List-Unsubscribe field with another value is a 400.
// It writes {"scope": <each scope>, "channel": <the token's>, "mode": "off"}
// into the recipient's rules (the rest of the set is kept) and answers 200:
// JSON, or a short page for a browser (the confirm page's form). Repeating it
// changes nothing more.
func (s *Server) unsubscribePost(w http.ResponseWriter, r *http.Request) error {
	setPageHeaders(w)
	tok, rules, err := s.unsubscribeToken(w, r)
	if err != nil {
		return err
	}
	if err := checkOneClickBody(w, r); err != nil {
		return err
	}
	stored := make([]stores.PreferenceRule, len(rules))
	for i, rule := range rules {
		stored[i] = stores.PreferenceRule{Scope: rule.Scope, Channel: rule.Channel, Mode: string(rule.Mode)}
	}
	err = pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		return stores.PutPreferenceRules(r.Context(), tx, tok.Recipient, tok.IssuedAt, stored)
	})
	if errors.Is(err, stores.ErrErased) {
		// Erased after the link was sent: nothing of the recipient is
		// written back, and the link is as dead as any other.
		return notFoundError("this unsubscribe link is not valid")
	}
	if err != nil {
		return err
	}
	s.logger.InfoContext(r.Context(), "one-click unsubscribe", "recipient", tok.Recipient, "channel", tok.Channel,
		"scopes", tok.Scopes)
	if wantsHTML(r) {
		return writePage(w, http.StatusOK, pageData{Done: true, Channel: tok.Channel, What: describeScopes(tok.Scopes)})
	}
	wire.WriteJSON(w, http.StatusOK, unsubscribeResponse{Unsubscribed: true, Channel: tok.Channel, Scopes: tok.Scopes})
	return nil
}

// checkOneClickBody reads the body: empty, or a form whose List-Unsubscribe
// field, when present, is One-Click.
func checkOneClickBody(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxUnsubscribeBody)
	var values url.Values
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "multipart/form-data":
		if params["boundary"] == "" {
			return badRequest("multipart body without a boundary")
		}
		if err := r.ParseMultipartForm(maxUnsubscribeBody); err != nil {
			return bodyError(err)
		}
		values = r.MultipartForm.Value
	default:
		data, err := io.ReadAll(r.Body)
		if err != nil {
			return bodyError(err)
		}
		if values, err = url.ParseQuery(strings.TrimSpace(string(data))); err != nil {
			return badRequest("body: want List-Unsubscribe=One-Click")
		}
	}
	if v, ok := values["List-Unsubscribe"]; ok && (len(v) != 1 || v[0] != "One-Click") {
		return badRequest("body: List-Unsubscribe must be One-Click")
	}
	return nil
}

func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errorf(http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "body over %d bytes", maxUnsubscribeBody)
	}
	return badRequest("unreadable body: %v", err)
}

// wantsHTML reports whether the client is a browser that asked for a page.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// describeScopes names what the scopes turn off, for the page: "comments"
// for category:comments, "billing and comments" for two.
func describeScopes(scopes []string) []string {
	out := make([]string, len(scopes))
	for i, sc := range scopes {
		_, name, _ := strings.Cut(sc, ":")
		out[i] = name
	}
	return out
}

type pageData struct {
	Confirm, Done bool
	Channel       string
	What          []string
}

var unsubscribeTmpl = template.Must(template.New("unsubscribe").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>{{if .Done}}Unsubscribed{{else}}Unsubscribe{{end}}</title>
<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;line-height:1.5;color:#222}
button{font:inherit;padding:.5rem 1.25rem;border:0;border-radius:.375rem;background:#1f5fbf;color:#fff;cursor:pointer}</style>
</head><body>
{{if .Done}}<h1>You are unsubscribed</h1>
<p>You will no longer get {{.Channel}} about {{range $i, $w := .What}}{{if $i}}, {{end}}<strong>{{$w}}</strong>{{end}}.</p>
{{else}}<h1>Unsubscribe?</h1>
<p>Stop {{.Channel}} about {{range $i, $w := .What}}{{if $i}}, {{end}}<strong>{{$w}}</strong>{{end}}.</p>
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><button type="submit">Unsubscribe</button></form>
{{end}}</body></html>
`))

func writePage(w http.ResponseWriter, status int, d pageData) error {
	var b strings.Builder
	if err := unsubscribeTmpl.Execute(&b, d); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, b.String())
	return nil
}
