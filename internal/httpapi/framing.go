package httpapi

import (
	"net/http"
	"slices"
)

// AdminPage wraps h, an admin endpoint or page (River UI), so that its every
// response, refusals included, forbids framing and caching: X-Frame-Options:
// DENY and Content-Security-Policy: frame-ancestors 'none' keep another site
// from framing it to trick an admin into clicking (clickjacking), and
// Cache-Control: no-store keeps profiles, ledgers and job arguments out of
// browser and proxy caches. The headers are set when the response starts, so
// a handler that sets its own Cache-Control (River UI's assets) cannot lift
// them; a Content-Security-Policy of the handler's own is kept and ours added
// beside it (a browser enforces both).
func AdminPage(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nw := &noFramingWriter{ResponseWriter: w}
		// Set now too, so that a 500 written outside h (a recovered
		// panic) carries them as well.
		nw.setHeaders()
		h.ServeHTTP(nw, r)
	})
}

type noFramingWriter struct {
	http.ResponseWriter
	started bool
}

func (w *noFramingWriter) start() {
	if w.started {
		return
	}
	w.started = true
	w.setHeaders()
}

func (w *noFramingWriter) setHeaders() {
	h := w.Header()
	h.Set("X-Frame-Options", "DENY")
	if !slices.Contains(h.Values("Content-Security-Policy"), "frame-ancestors 'none'") {
		h.Add("Content-Security-Policy", "frame-ancestors 'none'")
	}
	h.Set("Cache-Control", "no-store")
}

func (w *noFramingWriter) WriteHeader(status int) {
	w.start()
	w.ResponseWriter.WriteHeader(status)
}

func (w *noFramingWriter) Write(p []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(p)
}

func (w *noFramingWriter) Flush() {
	w.start()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *noFramingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
