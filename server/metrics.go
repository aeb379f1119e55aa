package server

import (
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"riverqueue.com/riverui"

	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/web"
)

// newMetrics builds the registry the daemon's /metrics serves: Go runtime and
// process collectors plus notifyd's own series (internal/metrics), and River's
// through its OpenTelemetry middleware (otelriver).
func newMetrics(streamClients func() int) (*prometheus.Registry, *metrics.Metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg, streamClients)
	return reg, m, err
}

// mountOps adds /metrics (open, for scrapers on a private network), the inbox
// web components at /ui/ (code, not data: open), and River UI at /riverui/
// (behind the admin token, Basic or Bearer).
func (s *Server) mountOps(reg *prometheus.Registry) error {
	s.api.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	s.api.Handle("GET /ui/{file}", web.Handler())
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints[pgx.Tx](s.river, nil),
		Logger:    s.logger,
		Prefix:    "/riverui",
	})
	if err != nil {
		return fmt.Errorf("river ui: %w", err)
	}
	s.riverUI = ui
	// The browser sends Basic credentials by itself, so River UI's API must
	// refuse cross-site requests (CSRF): a page an admin happens to visit must
	// not be able to cancel or retry jobs.
	csrf := http.NewCrossOriginProtection()
	// Never framed (clickjacking of the retry and cancel buttons), never cached.
	s.api.Handle("/riverui/", httpapi.AdminPage(s.api.RequireAdminBrowser(csrf.Handler(ui))))
	s.api.Handle("/riverui", http.RedirectHandler("/riverui/", http.StatusMovedPermanently))
	return nil
}
