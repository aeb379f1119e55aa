// Package daemon assembles a running notifyd from a config: the database pool,
// the channels, the River client with every worker, and the HTTP API. The
// `notifyd run` and `notifyd dev` commands, the end-to-end tests and the
// benchmarks all start notifyd through it, so they exercise the same wiring.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/catalog"
	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/httpapi/stream"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/stores"
)

// Options tune a Daemon. The zero value is valid.
type Options struct {
	Logger *slog.Logger
	// Clock returns the current time (tests inject one). Nil means time.Now.
	Clock func() time.Time
	// Listener serves the HTTP API; nil listens on cfg.HTTP.Listen.
	Listener net.Listener
	// Routes are extra HTTP handlers mounted on the API mux by pattern
	// ("GET /dev/", ...), for `notifyd dev`.
	Routes map[string]http.Handler
	// DrainTimeout bounds how long shutdown waits for running jobs before
	// cancelling them. Zero means 30 s.
	DrainTimeout time.Duration
	// NoHTTP runs only the workers.
	NoHTTP bool
}

// Daemon is an assembled notifyd.
type Daemon struct {
	Config *config.Config
	Pool   *pgxpool.Pool
	River  *river.Client[pgx.Tx]
	Client *notifyd.Client
	Deps   *jobs.Deps
	API    *httpapi.Server
	// Email is the email channel (nil when channels.email is not configured);
	// the digest job sends through it.
	Email *email.Sender
	// Hub fans inbox changes out to the realtime streams of this replica.
	Hub *stream.Hub

	opts     Options
	logger   *slog.Logger
	riverUI  *riverui.Handler
	closers  []func() error
	listener net.Listener
}

// DefaultGCPercent is the Go garbage collector's target (GOGC) a daemon runs
// with unless the GOGC environment variable sets one. notifyd's live heap is
// small (tens of MB) and its allocation rate high (a fan-out chunk decodes
// and encodes a thousand rows), so at Go's default of 100 the collector runs
// every few chunks; 400 trades some memory for about a tenth more fan-out
// throughput on the bench (docs/performance.md).
const DefaultGCPercent = 400

// New connects to the database, refuses to start when migrations are pending,
// and builds every piece. Close releases what New opened (Run does not).
func New(ctx context.Context, cfg *config.Config, opts Options) (*Daemon, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
	pool, err := OpenPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	d := &Daemon{Config: cfg, Pool: pool, opts: opts, logger: logger}
	d.closers = append(d.closers, func() error { pool.Close(); return nil })
	if err := stores.CheckMigrations(ctx, pool, cfg.Database.SearchSchema()); err != nil {
		d.Close()
		if errors.Is(err, stores.ErrPendingMigrations) {
			return nil, fmt.Errorf("%w; run `notifyd migrate -config %s` first", err, cfg.Path)
		}
		return nil, err
	}
	if err := catalog.Publish(ctx, pool, cfg, logger); err != nil {
		d.Close()
		return nil, err
	}
	d.Deps = &jobs.Deps{Pool: pool, Config: cfg, Logger: logger, Clock: opts.Clock}
	if !opts.NoHTTP {
		d.Hub = stream.NewHub(pool, logger)
	}
	reg, m, err := newMetrics(func() int {
		if d.Hub == nil {
			return 0
		}
		return d.Hub.Clients()
	})
	if err != nil {
		d.Close()
		return nil, err
	}
	d.Deps.Metrics = m
	if err := d.buildChannels(); err != nil {
		d.Close()
		return nil, err
	}
	d.River, err = jobs.NewRiverClient(d.Deps)
	if err != nil {
		d.Close()
		return nil, err
	}
	d.Client, _ = notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg, Logger: logger})
	if !opts.NoHTTP {
		d.API = httpapi.New(httpapi.Options{Pool: pool, Config: cfg, Client: d.Client, Logger: logger,
			Clock: opts.Clock, Extra: d.routes()})
		d.API.Handle("GET /v1/inbox/stream", stream.Handler(d.Hub, d.API.Recipient, stream.HandlerOptions{}))
		if err := d.mountOps(reg); err != nil {
			d.Close()
			return nil, err
		}
		d.listener = opts.Listener
		if d.listener == nil {
			d.listener, err = net.Listen("tcp", cfg.HTTP.Listen)
			if err != nil {
				d.Close()
				return nil, fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
			}
		}
	}
	return d, nil
}

// Addr is the HTTP API's listening address ("" with NoHTTP).
func (d *Daemon) Addr() string {
	if d.listener == nil {
		return ""
	}
	return d.listener.Addr().String()
}

// Run starts the workers and the HTTP API and blocks until ctx ends, then
// drains: the HTTP server stops accepting and finishes requests, River stops
// fetching and waits up to DrainTimeout for running jobs, then cancels them
// (their work is checkpointed or retried).
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.River.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	if err := d.startRiverUI(ctx); err != nil {
		return err
	}
	errc := make(chan error, 1)
	var srv *http.Server
	hubDone := make(chan struct{})
	if d.Hub != nil {
		// The hub shares ctx: when shutdown starts it closes the open streams,
		// so the HTTP server's graceful shutdown does not wait on them.
		go func() {
			defer close(hubDone)
			if err := d.Hub.Run(ctx); err != nil {
				errc <- fmt.Errorf("inbox stream hub: %w", err)
			}
		}()
	} else {
		close(hubDone)
	}
	if d.API != nil {
		// No WriteTimeout: it would cut the SSE streams, which set their own
		// per-write deadlines.
		srv = &http.Server{Handler: d.API.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(d.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		d.logger.InfoContext(ctx, "notifyd running", "http", d.Addr())
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	d.logger.Info("notifyd draining")
	drain := d.opts.DrainTimeout
	if drain <= 0 {
		drain = 30 * time.Second
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if srv != nil {
		_ = srv.Shutdown(stopCtx)
	}
	if err := d.River.Stop(stopCtx); err != nil {
		d.logger.Warn("workers did not finish in time; cancelling them", "err", err)
		hardCtx, hardCancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer hardCancel()
		_ = d.River.StopAndCancel(hardCtx)
	}
	<-hubDone
	d.logger.Info("notifyd stopped")
	return runErr
}

// Close releases the pool and channel connections.
func (d *Daemon) Close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		_ = d.closers[i]()
	}
	d.closers = nil
}

func (d *Daemon) routes() map[string]http.Handler {
	r := map[string]http.Handler{}
	for k, v := range d.opts.Routes {
		r[k] = v
	}
	return r
}
