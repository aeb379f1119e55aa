package email

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/wneessen/go-mail"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/unsubscribe"
	"github.com/notifyd/notifyd/config"
)

// UnsubscribePath is where notifyd answers one-click unsubscribe links:
// {unsubscribe_url}/v1/unsubscribe/{token}.
const UnsubscribePath = "/v1/unsubscribe/"

// oneClick is the List-Unsubscribe-Post value of RFC 8058.
const oneClick = "List-Unsubscribe=One-Click"

// unsubscriber adds the one-click unsubscribe headers to a message.
type unsubscriber struct {
	signer *unsubscribe.Signer
	ttl    time.Duration    // unsubscribe_ttl
	clock  func() time.Time // dates the tokens
	base   string           // the validated unsubscribe_url, without a trailing slash
	mailto string           // "" or the validated unsubscribe_mailto address
	// notifier returns a notifier's category and whether it is required;
	// ok is false for a notifier it does not know.
	notifier func(name string) (category string, required, ok bool)
}

// scope is the preference scope an unsubscribe from notifier writes: its
// category, or the notifier itself when it has none; "" when the notifier is
// required (no link).
func (u *unsubscriber) scope(notifier, category string) string {
	if u.notifier != nil {
		c, required, ok := u.notifier(notifier)
		if ok {
			if required {
				return ""
			}
			category = c
		}
	}
	if category != "" {
		return "category:" + category
	}
	return "notifier:" + notifier
}

// set adds List-Unsubscribe and List-Unsubscribe-Post naming recipient and
// scopes to m; no scope, no headers. The token is base64url and the base URL
// was checked at load, so the header holds exactly one https URI (and one
// mailto) whatever the recipient id is.
func (u *unsubscriber) set(m *mail.Msg, recipient string, scopes []string) error {
	if u == nil || len(scopes) == 0 {
		return nil
	}
	now := u.clock()
	tok, err := u.signer.Sign(unsubscribe.Token{Channel: Name, Recipient: recipient, Scopes: scopes,
		IssuedAt: now, Expires: now.Add(u.ttl)})
	if err != nil {
		return err
	}
	v := "<" + u.base + UnsubscribePath + tok + ">"
	if u.mailto != "" {
		v += ", <mailto:" + u.mailto + "?subject=" + url.PathEscape("unsubscribe "+tok) + ">"
	}
	m.SetGenHeaderPreformatted(mail.HeaderListUnsubscribe, v)
	m.SetGenHeaderPreformatted(mail.HeaderListUnsubscribePost, oneClick)
	return nil
}

// digestScopes are the scopes a digest's link unsubscribes from: the scope
// of every item of a notifier that is not required, once each, in order of
// first appearance, at most unsubscribe.MaxScopes.
func (u *unsubscriber) digestScopes(items []channels.DigestItem) []string {
	var out []string
	for _, it := range items {
		sc := u.scope(it.Notifier, it.Category)
		if sc != "" && !slices.Contains(out, sc) && len(out) < unsubscribe.MaxScopes {
			out = append(out, sc)
		}
	}
	return out
}

// checkUnsubscribeURL reports what is wrong with channels.email.unsubscribe_url:
// an absolute https URL without query or fragment (http only for a
// loopback host, as in `notifyd dev`), nothing a header could not carry.
func checkUnsubscribeURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%q is not a URL: %v", raw, err)
	}
	switch {
	case u.Host == "" || u.Opaque != "":
		return "", fmt.Errorf("%q must be an absolute URL such as https://notify.acme.test", raw)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "", fmt.Errorf("%q must have no credentials, query or fragment (notifyd appends %s{token})", raw, UnsubscribePath)
	case u.Scheme == "https":
	case u.Scheme == "http" && loopbackHost(u.Hostname()):
	default:
		return "", fmt.Errorf("%q must be https (mailbox providers only offer one-click unsubscribe over https; http is allowed for a loopback host in development)", raw)
	}
	s := strings.TrimRight(u.String(), "/")
	if strings.ContainsAny(s, "<>, \t\r\n\"") {
		return "", fmt.Errorf("%q has characters a List-Unsubscribe header cannot carry", raw)
	}
	return s, nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// checkMailto reports what is wrong with channels.email.unsubscribe_mailto: a
// bare address (an optional "mailto:" is dropped).
func checkMailto(raw string) (string, error) {
	a := strings.TrimPrefix(strings.TrimSpace(raw), "mailto:")
	at := strings.LastIndexByte(a, '@')
	if at <= 0 || at == len(a)-1 || strings.ContainsAny(a, "<>,?&%\"() \t\r\n;:\\[]") {
		return "", fmt.Errorf("%q must be a bare address such as unsubscribe@acme.test", raw)
	}
	return a, nil
}

// newUnsubscriber builds the headers' maker from the checked config; nil
// when unsubscribe_url is not set.
func newUnsubscriber(cfg *Config, opts Options) (*unsubscriber, error) {
	if cfg.UnsubscribeURL == "" {
		if cfg.UnsubscribeMailto != "" {
			return nil, fmt.Errorf("email: channels.email.unsubscribe_mailto needs unsubscribe_url (one-click unsubscribe is the https link)")
		}
		return nil, nil
	}
	base, err := checkUnsubscribeURL(cfg.UnsubscribeURL)
	if err != nil {
		return nil, fmt.Errorf("email: channels.email.unsubscribe_url: %w", err)
	}
	u := &unsubscriber{base: base, notifier: opts.Notifier, ttl: cfg.UnsubscribeTTL.D(), clock: opts.Clock}
	if u.ttl <= 0 {
		u.ttl = unsubscribe.DefaultTTL
	}
	if u.clock == nil {
		u.clock = time.Now
	}
	if cfg.UnsubscribeMailto != "" {
		if u.mailto, err = checkMailto(cfg.UnsubscribeMailto); err != nil {
			return nil, fmt.Errorf("email: channels.email.unsubscribe_mailto: %w", err)
		}
	}
	if u.signer, err = unsubscribe.NewSigner(opts.TokenSecret); err != nil {
		return nil, fmt.Errorf("email: channels.email.unsubscribe_url: %w", err)
	}
	return u, nil
}

// checkUnsubscribe reports unsubscribe_url and unsubscribe_mailto problems
// at load, with file and line.
func checkUnsubscribe(p *config.Problems, sec *config.Section, cfg *Config, c *config.Config, checking bool) {
	if cfg.ListUnsubscribe != "" {
		p.Add(sec, "list_unsubscribe", "was removed: set unsubscribe_url, and notifyd adds signed one-click unsubscribe links (List-Unsubscribe and List-Unsubscribe-Post) and honours them")
	}
	if cfg.UnsubscribeURL == "" {
		if cfg.UnsubscribeMailto != "" {
			p.Add(sec, "unsubscribe_mailto", "needs unsubscribe_url (the one-click link is the https one)")
		}
		return
	}
	if _, err := checkUnsubscribeURL(cfg.UnsubscribeURL); err != nil {
		p.Add(sec, "unsubscribe_url", "%v", err)
	}
	if cfg.UnsubscribeTTL.D() < 24*time.Hour {
		p.Add(sec, "unsubscribe_ttl", "must be at least 24h (a mailbox provider may follow the link days later), got %s", cfg.UnsubscribeTTL)
	}
	if cfg.UnsubscribeMailto != "" {
		if _, err := checkMailto(cfg.UnsubscribeMailto); err != nil {
			p.Add(sec, "unsubscribe_mailto", "%v", err)
		}
	}
	if c != nil && c.HTTP.TokenSecret == "" && !checking {
		p.Add(sec, "unsubscribe_url", "needs http.token_secret: the links are signed with a key derived from it")
	}
}
