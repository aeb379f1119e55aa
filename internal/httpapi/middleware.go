package httpapi

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels/tracking"
	"github.com/notifyd/notifyd/internal/wire"
)

// statusWriter records the status and size of a response. It forwards Flush
// (server-sent events need it) and unwraps for http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logRequests logs one line per request: method, path, route, status, size,
// duration. Only the path is logged, never the query string or headers: the
// stream's access_token travels in the query.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, cause := wire.WithCause(r.Context())
		r = r.WithContext(ctx)
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("path", redactPath(r.URL.Path)),
			slog.Int("status", status),
			slog.Int64("bytes", sw.bytes),
			slog.Duration("duration", time.Since(start)),
		}
		if r.Pattern != "" {
			attrs = append(attrs, slog.String("route", r.Pattern))
		}
		level := slog.LevelInfo
		if cause.Err != nil {
			attrs = append(attrs, slog.String("err", cause.Err.Error()))
		}
		if status >= 500 {
			level = slog.LevelError
		}
		s.logger.LogAttrs(r.Context(), level, "http request", attrs...)
	})
}

// redactPath is path as the request log shows it: an unsubscribe link's
// token, its only authority, is cut to its first 8 characters, enough to
// tell two requests apart and useless to replay.
func redactPath(path string) string {
	for _, prefix := range []string{"/v1/unsubscribe/", tracking.OpenPath, tracking.ClickPath} {
		if tok, ok := strings.CutPrefix(path, prefix); ok && len(tok) > 8 {
			return prefix + tok[:8] + "…"
		}
	}
	return path
}

// recoverPanics turns a handler panic into a logged 500 (when nothing was
// written yet) instead of a dropped connection. http.ErrAbortHandler keeps
// its meaning.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw, ok := w.(*statusWriter)
		if !ok {
			sw = &statusWriter{ResponseWriter: w}
		}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			err := fmt.Errorf("panic: %v", v)
			if sw.status == 0 {
				wire.WriteError(sw, r, err)
			} else {
				wire.SetCause(r, err)
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

// jsonMux serves mux, but answers its own 404 and 405 responses (plain text
// in net/http) with the API's JSON error shape. Redirects the mux issues
// (path cleaning, a subtree's trailing slash) pass through.
func (s *Server) jsonMux(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if reflect.TypeOf(h) == redirectHandlerType && strings.HasPrefix(r.URL.Path, "/v1/") {
			// The mux redirects to a {rest...} route's empty remainder
			// (DELETE /v1/notifications/x -> /x/, a cancel without its key)
			// or to a cleaned path; the API answers neither with a redirect.
			wire.WriteError(w, r, notFoundError("no route for %s %s", r.Method, r.URL.Path))
			return
		}
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No route: let the mux say what it would answer, then translate.
		rec := &recorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusNotFound:
			wire.WriteError(w, r, notFoundError("no route for %s %s", r.Method, r.URL.Path))
		case http.StatusMethodNotAllowed:
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			wire.WriteError(w, r, errorf(http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed,
				"%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.ReplaceAll(allow, ",", ", ")))
		default:
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			w.WriteHeader(status)
			_, _ = w.Write(rec.body.Bytes())
		}
	})
}

// redirectHandlerType is the type of the mux's redirects.
var redirectHandlerType = reflect.TypeOf(http.RedirectHandler("/", http.StatusTemporaryRedirect))

// recorder captures what the mux's fallback handlers write (a few bytes).
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}
