package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// checkMigrations is what /readyz checks besides a ping.
var checkMigrations = stores.CheckMigrations

// healthz answers 200 while the process serves HTTP.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	wire.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz answers 200 when the database answers and every migration (notifyd's
// and River's) is applied; 503 otherwise.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		return &wire.Error{Status: http.StatusServiceUnavailable, Code: wire.CodeNotReady, Message: "database unreachable", Err: err}
	}
	if err := checkMigrations(ctx, s.pool, s.schema); err != nil {
		return &wire.Error{Status: http.StatusServiceUnavailable, Code: wire.CodeNotReady, Message: err.Error(), Err: err}
	}
	wire.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}
