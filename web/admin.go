package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"io/fs"
	"net/http"
	"path"
	"time"
)

// The operator's console: plain JavaScript, no build step, embedded here and
// served at /admin/ by the API (which adds the no-framing and no-store
// headers of every admin page). The page itself carries no data and no
// token: the operator pastes an operator token (or the admin token), which
// stays in the tab's sessionStorage and is sent as a bearer token to the
// same origin's API, or signs in with single sign-on (console.oidc), which
// leaves an HttpOnly session cookie and a CSRF token the page sends back.

//go:embed admin/index.html admin/console.js admin/console.css
var adminFiles embed.FS

// AdminPrefix is where Admin expects to be mounted.
const AdminPrefix = "/admin/"

// adminCSP keeps the console to its own origin: its scripts and styles only
// (nothing inline: rendered templates are shown as text), API calls to this
// origin, never framed, no forms posted anywhere, no <base> rewriting.
const adminCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

var adminServed = func() map[string]*asset {
	m := map[string]*asset{}
	entries, err := fs.ReadDir(adminFiles, "admin")
	if err != nil {
		panic(err) // embedded above: cannot happen
	}
	for _, e := range entries {
		body, err := fs.ReadFile(adminFiles, "admin/"+e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(body)
		m[e.Name()] = &asset{name: e.Name(), contentType: contentType(e.Name()),
			etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`, body: body}
	}
	return m
}()

// AdminFiles lists the console's files, as served under AdminPrefix.
func AdminFiles() []string { return []string{"console.css", "console.js", "index.html"} }

// Admin serves the console: GET /admin/ (and /admin/index.html) is the page,
// /admin/console.js and /admin/console.css what it loads; any other name is
// a 404 in the API's error shape. The page is a single document: its views
// (notifications, a notification, a delivery, a recipient, previews) are
// fragments of its URL (#/n/<id>), so a link to one can be shared. Every
// response has a strict Content-Security-Policy, nosniff and no-store.
func Admin() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := path.Base(r.URL.Path)
		if r.URL.Path == AdminPrefix || r.URL.Path+"/" == AdminPrefix {
			name = "index.html"
		}
		a, ok := adminServed[name]
		if !ok || path.Dir(r.URL.Path)+"/" != AdminPrefix && r.URL.Path != AdminPrefix {
			writeError(w, http.StatusNotFound, "not_found", "no file "+r.URL.Path+"; the console is "+AdminPrefix)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", adminCSP)
		http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
	})
}
