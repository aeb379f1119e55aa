package httpapi

import (
	"net/http"
	"slices"
	"strings"
)

// cors lets the browser origins in http.allowed_origins call the API: it
// answers preflight requests (OPTIONS with Access-Control-Request-Method) with
// 204 and adds Access-Control-Allow-Origin to the responses of allowed
// origins. Credentials are bearer tokens in a header (or, for EventSource, the
// access_token parameter), never cookies, so Allow-Credentials is not sent.
// Requests from other origins are served as before; the browser withholds the
// response from the page.
func (s *Server) cors(next http.Handler) http.Handler {
	allowed := s.cfg.HTTP.AllowedOrigins
	if len(allowed) == 0 {
		return next
	}
	any := slices.Contains(allowed, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || !(any || slices.Contains(allowed, origin)) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		if any {
			h.Set("Access-Control-Allow-Origin", "*")
		} else {
			h.Set("Access-Control-Allow-Origin", origin)
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", strings.Join([]string{"WWW-Authenticate", "Allow"}, ", "))
		next.ServeHTTP(w, r)
	})
}
