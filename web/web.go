// Package web serves notifyd's browser components: plain JavaScript custom
// elements (ES modules, no build step) that talk to the recipient API.
//
//   - /ui/notifyd-inbox.js defines <notifyd-inbox endpoint token>: a bell with
//     the unread badge, the inbox panel with infinite scroll, mark read / mark
//     all read / archive, and live updates from GET /v1/inbox/stream.
//   - /ui/notifyd-preferences.js defines <notifyd-preferences endpoint
//     token>: the effective preferences as a notifier × channel table whose
//     changes are saved as rules with PUT /v1/preferences.
//   - /ui/notifyd-client.js is @notifyd/browser, the headless client
//     (clients/browser), which the components use for every request and the
//     stream; /ui/notifyd-api.js adapts it to the components' calls.
//   - /ui/notifyd-push.js is the inbox's desktop notifications (web push):
//     service worker registration, subscription, registration with the API;
//     /ui/notifyd-sw.js is that service worker, which shows each push and
//     opens its url on click.
//
// Handler serves them; Demo serves a page that uses both (`notifyd dev` mounts
// it at /dev/demo). The attributes, events and CSS custom properties of each
// element are documented at the top of its file.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/notifyd/notifyd/clients/browser"
)

//go:embed notifyd-api.js notifyd-inbox.js notifyd-preferences.js notifyd-push.js notifyd-sw.js demo.html
var files embed.FS

// Prefix is where Handler expects to be mounted: it serves /ui/{file}.
const Prefix = "/ui/"

// CacheControl is the Cache-Control of the component files. Their URLs carry
// no version, so browsers keep them a short while and then revalidate with the
// ETag (a 304 costs a few bytes); a notifyd upgrade reaches every page within
// five minutes.
const CacheControl = "public, max-age=300"

// asset is one served file, prepared once.
type asset struct {
	name        string
	contentType string
	etag        string
	body        []byte
}

// served are the files under /ui/. demo.html is not among them: it is a
// template, rendered by Demo.
var served = func() map[string]*asset {
	m := map[string]*asset{}
	for _, name := range Files() {
		body, err := fs.ReadFile(files, name)
		if name == ClientFile {
			body, err = browser.Source, nil
		}
		if err != nil {
			panic(err) // embedded above: cannot happen
		}
		sum := sha256.Sum256(body)
		m[name] = &asset{
			name:        name,
			contentType: contentType(name),
			etag:        `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`,
			body:        body,
		}
	}
	return m
}()

// ClientFile is the name under /ui/ of @notifyd/browser's ES module
// (clients/browser/src/index.js).
const ClientFile = "notifyd-client.js"

// Files lists the names Handler serves under /ui/, sorted. notifyd-client.js
// is the headless client and notifyd-api.js the helper both components import
// by relative URL; notifyd-push.js and notifyd-sw.js are the inbox's desktop
// notifications.
func Files() []string {
	return []string{"notifyd-api.js", ClientFile, "notifyd-inbox.js", "notifyd-preferences.js", "notifyd-push.js", "notifyd-sw.js"}
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".html":
		return "text/html; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	}
	return "application/octet-stream"
}

// Handler serves GET and HEAD /ui/{file} for the component files: the right
// Content-Type, an ETag with If-None-Match (304), Cache-Control, nosniff and
// Access-Control-Allow-Origin: * (a module script loaded from another origin
// is fetched in CORS mode; the files are public and carry no credentials).
// Any other name is a 404 in the API's error shape, another method a 405.
//
// Mount it on "GET /ui/" or "GET /ui/{file}"; it reads the last path element.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path+"; allowed: GET, HEAD")
			return
		}
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		a, ok := served[name]
		if !ok || !strings.HasPrefix(r.URL.Path, Prefix) {
			writeError(w, http.StatusNotFound, "not_found", "no file "+r.URL.Path+"; the components are "+Prefix+"notifyd-inbox.js and "+Prefix+"notifyd-preferences.js")
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", CacheControl)
		h.Set("ETag", a.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Access-Control-Allow-Origin", "*")
		// ServeContent answers If-None-Match with 304, HEAD without a body,
		// and Range requests.
		http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
	})
}

// writeError writes the API's error shape without importing the API.
func writeError(w http.ResponseWriter, status int, code, message string) {
	type body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details []any  `json:"details"`
	}
	b, _ := json.Marshal(struct {
		Error body `json:"error"`
	}{body{code, message, []any{}}}) // strings only: cannot fail
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// DemoOptions configure the demo page.
type DemoOptions struct {
	// Endpoint is the notifyd base URL the components call. Empty means the
	// page's own origin.
	Endpoint string
	// Token returns the recipient token injected into the page (called per
	// request, so a long-running dev server can mint fresh ones). Nil or an
	// empty result leaves the page asking for one: it then reads ?token= and
	// ?endpoint= from its own URL.
	Token func() string
	// Recipient is the id the token belongs to, shown on the page.
	Recipient string
	// SendURL, when set, is a same-origin URL the "send a test notification"
	// button POSTs to (`notifyd dev` serves /dev/send). Empty shows a curl line
	// instead.
	SendURL string
	// AssetsPrefix is where Handler is mounted. Empty means Prefix.
	AssetsPrefix string
}

type demoData struct {
	Endpoint, Token, Recipient, SendURL, Assets string
}

var demoTemplate = template.Must(template.ParseFS(files, "demo.html"))

// Demo serves the demo page: both components, wired to opts. Every value is
// escaped by html/template for where it lands (attribute, script, text).
// The page carries a recipient token, so it is sent with Cache-Control:
// no-store and never framed.
func Demo(opts DemoOptions) http.Handler {
	assets := opts.AssetsPrefix
	if assets == "" {
		assets = Prefix
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data := demoData{Endpoint: opts.Endpoint, Recipient: opts.Recipient, SendURL: opts.SendURL, Assets: assets}
		if opts.Token != nil {
			data.Token = opts.Token()
		}
		var buf bytes.Buffer
		if err := demoTemplate.Execute(&buf, data); err != nil {
			slog.Default().WarnContext(r.Context(), "render the demo page", "err", err)
			writeError(w, http.StatusInternalServerError, "internal", "the demo page could not be rendered")
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		_, _ = w.Write(buf.Bytes())
	})
}
