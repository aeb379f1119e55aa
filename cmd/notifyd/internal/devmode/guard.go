package devmode

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/notifyd/notifyd/internal/wire"
)

// CheckListen refuses a listen address that is not on loopback: `notifyd
// dev` serves a recipient token (the demo page), every captured email and a
// fixed webhook secret, to whoever reaches it. "localhost" and loopback IPs
// pass; an empty host (":8080", every interface) does not.
func CheckListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("http.listen %q: %w", addr, err)
	}
	if !loopbackHost(host) {
		return fmt.Errorf("http.listen %q: notifyd dev listens on loopback only (127.0.0.1, [::1] or localhost): "+
			"it serves captured email and tokens without authentication; use `notifyd run` to serve a network", addr)
	}
	return nil
}

// loopbackHost reports whether host (no port) names this machine's loopback:
// "localhost", a name under .localhost (RFC 6761), or a loopback IP.
func loopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}

// Guard wraps the dev daemon's whole handler:
//
//   - every route answers only requests whose Host is loopback
//     (localhost, 127.0.0.1, [::1], with any port): a web page that makes
//     its own name resolve to 127.0.0.1 (DNS rebinding) sends its own name as
//     Host, and gets 421 instead of the captured email or the demo token;
//   - /dev/ never carries CORS headers, whatever http.allowed_origins says:
//     its preflights are refused and Access-Control-* headers removed, so no
//     other origin can read the captured email or the demo page's token.
func Guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		if !loopbackHost(host) {
			wire.WriteError(w, r, &wire.Error{Status: http.StatusMisdirectedRequest, Code: "misdirected_request",
				Message: "notifyd dev answers only loopback Host headers (localhost, 127.0.0.1, [::1])"})
			return
		}
		if r.URL.Path == "/dev" || strings.HasPrefix(r.URL.Path, "/dev/") {
			if r.Method == http.MethodOptions {
				wire.WriteError(w, r, &wire.Error{Status: http.StatusForbidden, Code: "cross_origin_refused",
					Message: "/dev/ is for this machine's browser only: no cross-origin access"})
				return
			}
			w = &noCORSWriter{ResponseWriter: w}
		}
		h.ServeHTTP(w, r)
	})
}

// noCORSWriter drops the Access-Control-* headers the API's CORS layer set
// before the response goes out.
type noCORSWriter struct {
	http.ResponseWriter
	started bool
}

func (w *noCORSWriter) start() {
	if w.started {
		return
	}
	w.started = true
	for k := range w.Header() {
		if strings.HasPrefix(k, "Access-Control-") {
			w.Header().Del(k)
		}
	}
}

func (w *noCORSWriter) WriteHeader(status int) {
	w.start()
	w.ResponseWriter.WriteHeader(status)
}

func (w *noCORSWriter) Write(p []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(p)
}

func (w *noCORSWriter) Flush() {
	w.start()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *noCORSWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
