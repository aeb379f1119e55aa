// Package tracking mints and checks the signed links of email open and
// click tracking (notifiers.<n>.channels.email.track), and rewrites a
// message's HTML to use them.
//
// An open link is {base}/t/o/{token}, a 1×1 GIF; a click link is
// {base}/t/c/{token}, a redirect to the URL the token carries. A token is
// base64url of the payload ("o" or "c", the delivery id, the issue time in
// Unix seconds and, for a click, the URL, separated by newlines), ".", and
// base64url of the first 128 bits of HMAC-SHA256 over the payload, keyed
// with HMAC(http.token_secret, Domain). A click token redirects only to the
// URL that was signed into it: no other URL can be made to verify, so the
// route is no open redirect.
package tracking

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"html"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Domain separates the tracking key from every other use of http.token_secret.
const Domain = "notifyd/v1/tracking"

// Paths of the public routes, after the public base URL.
const (
	OpenPath  = "/t/o/"
	ClickPath = "/t/c/"
)

// Kinds of link.
const (
	Open  = "o"
	Click = "c"
)

const macLen = 16

// MaxURL bounds the URL a click link carries; a longer one is left as it is.
const MaxURL = 1500

// Signer mints and checks tracking tokens with one key. Use New.
type Signer struct {
	key []byte
}

// New returns a Signer keyed by secret (http.token_secret); an empty
// secret is an error.
func New(secret string) (*Signer, error) {
	if secret == "" {
		return nil, errors.New("tracking links need http.token_secret")
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(Domain))
	return &Signer{key: m.Sum(nil)}, nil
}

func (s *Signer) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(payload)
	return m.Sum(nil)[:macLen]
}

// Link is what a verified token says.
type Link struct {
	Kind     string // Open or Click
	Delivery string
	Issued   time.Time
	URL      string // a click's destination; "" for an open
}

// Token signs l.
func (s *Signer) Token(l Link) string {
	p := l.Kind + "\n" + l.Delivery + "\n" + strconv.FormatInt(l.Issued.Unix(), 10)
	if l.Kind == Click {
		p += "\n" + l.URL
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(p)) + "." + enc.EncodeToString(s.mac([]byte(p)))
}

// Verify returns the link tok names when this Signer made it for kind;
// false for anything else (malformed, forged, another secret's, the other
// kind).
func (s *Signer) Verify(tok, kind string) (Link, bool) {
	enc := base64.RawURLEncoding
	b64, m64, ok := strings.Cut(tok, ".")
	if !ok || len(tok) > 4*MaxURL {
		return Link{}, false
	}
	p, err1 := enc.DecodeString(b64)
	mac, err2 := enc.DecodeString(m64)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, s.mac(p)) {
		return Link{}, false
	}
	parts := strings.SplitN(string(p), "\n", 4)
	if len(parts) < 3 || parts[0] != kind || (kind == Click) != (len(parts) == 4) {
		return Link{}, false
	}
	sec, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return Link{}, false
	}
	l := Link{Kind: kind, Delivery: parts[1], Issued: time.Unix(sec, 0).UTC()}
	if kind == Click {
		l.URL = parts[3]
	}
	return l, true
}

// Rewriter rewrites the HTML of one message.
type Rewriter struct {
	Signer *Signer
	// Base is the public base URL, without a trailing slash.
	Base string
	// Skip reports a link that must stay as it is (an unsubscribe link).
	Skip func(u string) bool
}

var anchorHref = regexp.MustCompile(`(?is)(<a\s[^>]*?\bhref\s*=\s*)("[^"]*"|'[^']*')`)

var bodyEnd = regexp.MustCompile(`(?i)</body\s*>`)

// Rewrite returns body with, when clicks, every http(s) link of an <a>
// element replaced by a signed click link to it (links Skip names, and ones
// over MaxURL, stay), and, when opens, an open pixel before </body> (or at
// the end).
func (rw *Rewriter) Rewrite(body, delivery string, issued time.Time, opens, clicks bool) string {
	if clicks {
		body = anchorHref.ReplaceAllStringFunc(body, func(m string) string {
			sub := anchorHref.FindStringSubmatch(m)
			raw := html.UnescapeString(sub[2][1 : len(sub[2])-1])
			target := strings.TrimSpace(raw)
			u, err := url.Parse(target)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(target) > MaxURL ||
				(rw.Skip != nil && rw.Skip(target)) {
				return m
			}
			tok := rw.Signer.Token(Link{Kind: Click, Delivery: delivery, Issued: issued, URL: target})
			return sub[1] + `"` + rw.Base + ClickPath + tok + `"`
		})
	}
	if opens {
		tok := rw.Signer.Token(Link{Kind: Open, Delivery: delivery, Issued: issued})
		pixel := `<img src="` + rw.Base + OpenPath + tok + `" width="1" height="1" alt="" style="display:block;border:0;width:1px;height:1px">`
		if loc := bodyEnd.FindStringIndex(body); loc != nil {
			body = body[:loc[0]] + pixel + body[loc[0]:]
		} else {
			body += pixel
		}
	}
	return body
}

// machineAgents are parts of the User-Agent of mail privacy proxies and
// link scanners that fetch a message's images and links by themselves.
var machineAgents = []string{
	"bot", "crawler", "spider", "preview", "scanner", "proofpoint", "mimecast", "barracuda",
	"safelinks", "urldefense", "symantec", "trendmicro", "forcepoint", "fortiguard", "sophos",
	"python-requests", "go-http-client", "curl/", "wget/", "headless",
}

// MachineWindow is how soon after the send an open or a click counts as a
// machine's: link scanners and privacy proxies fetch as the message
// arrives, a person later.
const MachineWindow = 2 * time.Second

// Machine reports whether a request for l, made at now with method and
// userAgent, looks like a machine's rather than a person's: a HEAD request,
// no User-Agent or the bare "Mozilla/5.0" of Apple's Mail Privacy
// Protection proxy, a known scanner's User-Agent, or a request within
// MachineWindow of the send.
func Machine(l Link, now time.Time, method, userAgent string) bool {
	ua := strings.ToLower(strings.TrimSpace(userAgent))
	if method == "HEAD" || ua == "" || ua == "mozilla/5.0" {
		return true
	}
	for _, a := range machineAgents {
		if strings.Contains(ua, a) {
			return true
		}
	}
	return now.Sub(l.Issued) < MachineWindow
}

// EventKey is the event key of a tracked open or click: one open and one
// click per URL are recorded per delivery, once for people and once for
// machines.
func EventKey(l Link, machine bool) string {
	k := "notifyd:open"
	if l.Kind == Click {
		h := sha256.Sum256([]byte(l.URL))
		k = "notifyd:click:" + base64.RawURLEncoding.EncodeToString(h[:18])
	}
	if machine {
		k += ":machine"
	}
	return k
}
