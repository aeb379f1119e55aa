package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/notifyd/notifyd/internal/version"
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
	resp := readyResponse{Status: "ready", Version: version.Version}
	if w := s.breakGlassWarning(); w != "" {
		resp.Warnings = append(resp.Warnings, w)
	}
	if s.reads != nil {
		st := s.reads.ReadStatus()
		rr := &readReplica{Reads: st.Reads, LagMS: st.Lag.Milliseconds(), Error: st.Error}
		if !st.CheckedAt.IsZero() {
			at := st.CheckedAt.UTC()
			rr.CheckedAt = &at
		}
		resp.ReadReplica = rr
	}
	wire.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// readyResponse is /readyz's answer; Version is the release this replica runs,
// so a rolling upgrade can be watched replica by replica. A read replica that is down or behind
// does not make the daemon unready: its reads go to the primary.
type readyResponse struct {
	Status      string       `json:"status"`
	Version     string       `json:"version"`
	ReadReplica *readReplica `json:"read_replica,omitempty"`
	// Warnings are what an operator should act on though the replica
	// serves: the break-glass admin token in use.
	Warnings []string `json:"warnings,omitempty"`
}

type readReplica struct {
	Reads     string     `json:"reads"`
	LagMS     int64      `json:"lag_ms"`
	CheckedAt *time.Time `json:"checked_at,omitempty"`
	Error     string     `json:"error,omitempty"`
}
