package httpapi

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/notifyd/notifyd/internal/wire"
)

// CodeOriginNotAllowed (403): a browser request from an origin that is not
// in http.allowed_origins. It is answered before any handler runs, with CORS
// headers so that the page can read why.
const CodeOriginNotAllowed = "origin_not_allowed"

// cors lets the browser origins in http.allowed_origins call the API: it
// answers preflight requests (OPTIONS with Access-Control-Request-Method) with
// 204 and adds Access-Control-Allow-Origin to the responses of allowed
// origins. Credentials are bearer tokens in a header (or, for EventSource, the
// access_token parameter), never cookies, so Allow-Credentials is not sent.
//
// A page on another origin calling the API (/v1/) gets an answer it can
// read, so that it can say what to fix. A failed preflight is all a page sees of a refusal ("Failed
// to fetch": no status, no body), so the preflight of an origin that is not
// allowed is granted too, and every request from it (the real request after
// that preflight, and a simple request or an EventSource that needs none) is
// refused with 403 origin_not_allowed before any handler runs: its body names
// the origin and http.allowed_origins, and it carries
// Access-Control-Allow-Origin so the page can read it. Such an origin reads
// nothing but that error and changes nothing; before, its requests were
// served and only their answers withheld by the browser.
//
// A request is cross-origin when the browser says so (Sec-Fetch-Site
// cross-site or same-site) or, from a browser that does not send it, when
// its Origin's host is not the request's Host. Same-origin requests (the
// console, the dev pages) and requests without browser headers (scripts)
// pass untouched.
func (s *Server) cors(next http.Handler) http.Handler {
	allowed := s.cfg.HTTP.AllowedOrigins
	if slices.Contains(allowed, "*") {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Origin") == "" {
				next.ServeHTTP(w, r)
				return
			}
			h := w.Header()
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Allow-Origin", "*")
			if preflight(r) {
				allowPreflight(w)
				return
			}
			exposeHeaders(w)
			next.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		if !slices.Contains(allowed, origin) && (!crossOrigin(r, origin) || !strings.HasPrefix(r.URL.Path, "/v1/")) {
			// The page's own origin; or not the API: the components' files
			// at /ui/ are public (web.Handler allows every origin), and the
			// console and River UI take no cross-origin calls.
			next.ServeHTTP(w, r)
			return
		}
		h.Set("Access-Control-Allow-Origin", origin)
		if preflight(r) {
			allowPreflight(w)
			return
		}
		exposeHeaders(w)
		if !slices.Contains(allowed, origin) {
			// Like every admin answer: never framed, never cached.
			h.Set("X-Frame-Options", "DENY")
			h.Set("Content-Security-Policy", "frame-ancestors 'none'")
			wire.WriteError(w, r, &wire.Error{Status: http.StatusForbidden, Code: CodeOriginNotAllowed,
				Message: "this notifyd API does not take requests from the origin " + origin +
					": add it to http.allowed_origins in the daemon's config (then restart it)",
				Details: []any{wire.FieldDetail{Field: "Origin", Message: "not in http.allowed_origins"}}})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func preflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
}

func allowPreflight(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

func exposeHeaders(w http.ResponseWriter) {
	w.Header().Set("Access-Control-Expose-Headers", strings.Join([]string{"WWW-Authenticate", "Allow", "Retry-After"}, ", "))
}

// crossOrigin reports whether a request that carries origin comes from a page
// of another origin: what Sec-Fetch-Site says, or, without it, whether the
// Origin's host differs from the request's Host.
func crossOrigin(r *http.Request, origin string) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "cross-site", "same-site":
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return true // "null" (a sandboxed frame, a file) and the like
	}
	return !strings.EqualFold(u.Host, r.Host)
}
