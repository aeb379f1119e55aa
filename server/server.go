// Package server is notifyd as a value a Go program constructs, runs and
// stops: the database pool, the registered channels, the River client with
// every worker, the inbox stream hub and the HTTP API. `notifyd run` and
// `notifyd dev` are built on it, and so is a program that embeds notifyd with
// channels of its own:
//
//	cfg, err := config.Load("notifyd.yaml")
//	srv, err := server.New(ctx, server.Options{Config: cfg, Logger: logger,
//		Channels: []channels.Plugin{console.Plugin}})
//	defer srv.Close()
//	err = srv.Run(ctx) // until ctx ends, then drains like `notifyd run`
//
// New has no process-wide side effects: it sets no GOGC, installs no signal
// handler and reads no environment variable (config.Load expands ${VAR}).
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/channels/webhook"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/stream"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/stores"
)

// Options configure a Server. Config is required; everything else has a
// working zero value.
type Options struct {
	// Config is the loaded config (config.Load). Required.
	Config *config.Config
	// Pool is the database. Nil opens one from Config.Database (see
	// OpenPool), which Close closes; a pool given here is left open. Its
	// search_path must reach the configured schema.
	Pool *pgxpool.Pool
	// Logger receives the daemon's logs. Nil discards them.
	Logger *slog.Logger
	// Channels are registered after the built-in channels (in_app, email,
	// webhook, slack), the same way: each decodes its channels.<name>
	// section and its notifiers' sections, and the fan-out, preferences and
	// the API list it like any other.
	Channels []channels.Plugin
	// Clock returns the current time (tests inject one). Nil means time.Now.
	Clock func() time.Time
	// Listener is where Run serves the HTTP API. Nil listens on
	// Config.HTTP.Listen, unless NoListen is set.
	Listener net.Listener
	// NoListen builds the HTTP API without serving it: mount Handler on a
	// mux of your own. Run still runs the inbox stream's hub.
	NoListen bool
	// NoHTTP runs only the workers: no API, no stream hub.
	NoHTTP bool
	// Routes are extra HTTP handlers mounted on the API's mux by pattern
	// ("GET /dev/", ...). They do their own authorisation.
	Routes map[string]http.Handler
	// Wrap, when set, wraps the whole HTTP handler (the API, Routes, the
	// stream, /metrics, /ui/, /riverui/) before it is served or returned by
	// Handler: a middleware every request passes first (`notifyd dev` puts
	// its loopback guard there). The server's timeouts and connection cap
	// still apply.
	Wrap func(http.Handler) http.Handler
	// DrainTimeout bounds how long Run's shutdown waits for running jobs
	// before cancelling them. Zero means 30 s.
	DrainTimeout time.Duration
}

// Server is an assembled notifyd. Build it with New, run it with Run, and
// release it with Close.
type Server struct {
	cfg      *config.Config
	pool     *pgxpool.Pool
	registry *channels.Registry
	set      *channels.Set
	river    *river.Client[pgx.Tx]
	client   *notifyd.Client
	deps     *jobs.Deps
	api      *httpapi.Server
	hub      *stream.Hub
	reads    *readRouter // nil without database.read_url
	riverUI  *riverui.Handler
	push     *pushSubscriptions
	devices  *devices

	// claimer fans out small notifications while Run runs (nil for a
	// Server from Open); its Wake starts an idle claim at once.
	claimer *jobs.FanoutClaimer

	opts     Options
	logger   *slog.Logger
	closers  []func() error
	listener net.Listener
}

// DefaultGCPercent is the Go garbage collector's target (GOGC) `notifyd run`
// sets unless the GOGC environment variable sets one. notifyd's live heap is
// small (tens of MB) and its allocation rate high (a fan-out chunk decodes
// and encodes a thousand rows), so at Go's default of 100 the collector runs
// every few chunks; 400 trades some memory for about a tenth more fan-out
// throughput (docs/performance.md). New does not set it: a program that
// embeds notifyd owns its process's settings.
const DefaultGCPercent = 400

// New registers the channels, opens them on the config (every problem in a
// channel's section is returned with its file and line), connects to the
// database, refuses to start when migrations are pending, publishes the
// config's notifiers for the SQL functions (docs/sql-enqueue.md), serves nothing
// and starts nothing: Run does. Close releases what New opened.
func New(ctx context.Context, opts Options) (_ *Server, err error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("server: Options.Config is required")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, opts: opts, logger: logger, pool: opts.Pool}
	// Whatever New opened is closed again when it fails half-way.
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.openChannels(); err != nil {
		return nil, err
	}
	if err := s.openPool(ctx); err != nil {
		return nil, err
	}
	s.push.db, s.devices.db = s.pool, s.pool
	if err := s.openReads(ctx); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.push.close, s.devices.close) // before the pool closes (closers run last first)
	if err := s.checkMigrations(ctx); err != nil {
		return nil, err
	}
	if err := PublishCatalog(ctx, s.pool, cfg, logger); err != nil {
		return nil, err
	}
	s.extendPartitions(ctx)
	s.deps = &jobs.Deps{Pool: s.pool, Config: cfg, Logger: logger, Clock: opts.Clock, Registry: s.registry,
		Inbox: s.set.Inbox, Channels: s.set.Channels, Bulk: s.set.Bulk}
	if d := s.registry.Digest(); d != "" {
		if ds, ok := s.set.Digests[d]; ok {
			s.deps.Digests = ds
		}
	}
	if !opts.NoHTTP {
		s.hub = stream.NewHub(s.pool, logger)
	}
	metricsReg, m, err := newMetrics(func() int {
		if s.hub == nil {
			return 0
		}
		return s.hub.Clients()
	})
	if err != nil {
		return nil, err
	}
	s.deps.Metrics = m
	if s.river, err = jobs.NewRiverClient(s.deps); err != nil {
		return nil, err
	}
	s.claimer = jobs.NewFanoutClaimer(s.deps, s.river)
	s.client, _ = notifyd.NewClient(s.pool, notifyd.ClientConfig{Config: cfg, Logger: logger})
	if opts.NoHTTP {
		return s, nil
	}
	apiOpts := httpapi.Options{Pool: s.pool, Config: cfg, Registry: s.registry, Client: s.client,
		Operations: apiOperations{s}, Logger: logger, Clock: opts.Clock, Extra: opts.Routes, Metrics: m,
		WebhookSecret: webhookSecrets(s.set), Push: pushService(s.set),
		Queues: []string{jobs.QueueFanout, jobs.QueueSend, jobs.QueueSendBulk, jobs.QueueDigest, jobs.QueueMaintenance}}
	if s.reads != nil {
		apiOpts.Reads = s.reads
	}
	s.api = httpapi.New(apiOpts)
	s.api.Handle("GET /v1/inbox/stream", stream.Handler(s.hub, s.api.RecipientClaims, stream.HandlerOptions{
		MaxPerRecipient: cfg.HTTP.MaxStreamsPerRecipient, Clock: opts.Clock, Metrics: m}))
	if err := s.mountOps(metricsReg); err != nil {
		return nil, err
	}
	if opts.NoListen {
		return s, nil
	}
	if s.listener = opts.Listener; s.listener == nil {
		if s.listener, err = net.Listen("tcp", cfg.HTTP.Listen); err != nil {
			return nil, fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
		}
		s.closers = append(s.closers, s.listener.Close)
	}
	return s, nil
}

// openChannels registers the built-in channels and Options.Channels and
// opens them on the config (every problem in a channel's section is
// returned with its file and line).
func (s *Server) openChannels() error {
	reg, err := builtin.Registry(s.opts.Channels...)
	if err != nil {
		return err
	}
	s.registry = reg
	s.push = &pushSubscriptions{logger: s.logger}
	s.devices = &devices{logger: s.logger}
	if s.set, err = reg.Open(s.cfg, s.logger, s.opts.Clock, channels.WithPushSubscriptions(s.push),
		channels.WithDevices(s.devices)); err != nil {
		return err
	}
	s.closers = append(s.closers, s.set.Close)
	return nil
}

// openReads opens the read replica's pool and its router when
// database.read_url is set and the server has an HTTP API (the only reader
// of the standby); Run checks the standby.
func (s *Server) openReads(ctx context.Context) error {
	if s.cfg.Database.ReadURL == "" || s.opts.NoHTTP {
		return nil
	}
	standby, err := openReadPool(ctx, s.cfg)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, func() error { standby.Close(); return nil })
	s.reads = newReadRouter(s.pool, standby, s.cfg.Database.MaxReadLag.D(), s.logger)
	return nil
}

// openPool opens the database pool from the config unless Options.Pool gave
// one (which Close leaves open).
func (s *Server) openPool(ctx context.Context) error {
	if s.pool != nil {
		return nil
	}
	pool, err := OpenPool(ctx, s.cfg)
	if err != nil {
		return err
	}
	s.pool = pool
	s.closers = append(s.closers, func() error { pool.Close(); return nil })
	return nil
}

// checkMigrations refuses a database whose migrations are behind this
// binary, saying what to run.
func (s *Server) checkMigrations(ctx context.Context) error {
	err := stores.CheckMigrations(ctx, s.pool, s.cfg.Database.SearchSchema())
	if errors.Is(err, stores.ErrPendingMigrations) {
		return fmt.Errorf("%w; run `notifyd migrate -config %s` first", err, s.cfg.Path)
	}
	return err
}

// extendPartitions creates the change log's day partitions and the inbox's
// and the ledger's month partitions ahead, in case retention has not run for
// a while. A lock timeout here is not fatal: rows without their partition go
// to the default one.
func (s *Server) extendPartitions(ctx context.Context) {
	if _, err := stores.ExtendChangeLog(ctx, s.pool); err != nil {
		s.logger.WarnContext(ctx, "could not create the inbox change log's partitions ahead", "err", err)
	}
	if _, err := stores.ExtendLedger(ctx, s.pool); err != nil {
		s.logger.WarnContext(ctx, "could not create the inbox's and the ledger's partitions ahead", "err", err)
	}
}

// webhookSecrets returns the opened webhook channel's per-recipient secret,
// nil when the channel is not configured.
func webhookSecrets(set *channels.Set) func(string) string {
	if c, ok := set.Channels[webhook.Name].(interface{ RecipientSecret(id string) string }); ok {
		return c.RecipientSecret
	}
	return nil
}

// LoadConfig loads the config file at path (config.Load) and checks the
// channels' sections against the built-in channels and extra, so that every
// problem in the file, the channels' included, is reported at once in line
// order ("file:line: key.path: message"): what `notifyd check` prints.
func LoadConfig(path string, extra ...channels.Plugin) (*config.Config, error) {
	reg, err := builtin.Registry(extra...)
	if err != nil {
		return nil, err
	}
	return config.LoadWith(path, reg.Check)
}

// LoadRunConfig is LoadConfig with every rule New applies to the config, so
// that a file it accepts is one `notifyd run` starts with (what `notifyd
// check` runs): the channels are opened as to run, so a secret a channel
// needs must be set, and database.url must name a database. A value the file
// takes from an unset environment variable is reported with the variable to
// set: "channels.webhook.secret: must be set: … (set NOTIFYD_WEBHOOK_SECRET)".
// LoadConfig, without these, is for the tools that render or read without
// running (`notifyd preview`, `notifyd dev`, which fills them in).
func LoadRunConfig(path string, extra ...channels.Plugin) (*config.Config, error) {
	reg, err := builtin.Registry(extra...)
	if err != nil {
		return nil, err
	}
	return config.LoadWith(path, func(c *config.Config, p *config.Problems) {
		reg.CheckToRun(c, p)
		if c.Database.URL == "" {
			p.Add(nil, "database.url", "must be set: a PostgreSQL connection string (or run `notifyd dev`, which starts a private PostgreSQL)")
		}
	})
}

// Addr is the HTTP API's listening address ("" when it does not listen).
func (s *Server) Addr() string {
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Handler is the HTTP API (with the stream, /metrics, /ui/ and /riverui/,
// wrapped by Options.Wrap), for a caller that serves it on its own mux
// (Options.NoListen). Nil with Options.NoHTTP.
func (s *Server) Handler() http.Handler {
	if s.api == nil {
		return nil
	}
	if s.opts.Wrap != nil {
		return s.opts.Wrap(s.api.Handler())
	}
	return s.api.Handler()
}

// Pool is the database pool the server uses.
func (s *Server) Pool() *pgxpool.Pool { return s.pool }

// Client is the Go API on the server's pool, configured with its config.
func (s *Server) Client() *notifyd.Client { return s.client }

// River is the River client that runs notifyd's workers.
func (s *Server) River() *river.Client[pgx.Tx] { return s.river }

// Registry is every registered channel.
func (s *Server) Registry() *channels.Registry { return s.registry }

// Run starts the workers and the HTTP API and blocks until ctx ends, then
// drains: the HTTP server stops accepting and finishes requests, River stops
// fetching and waits up to DrainTimeout for running jobs, then cancels them
// (their work is checkpointed or retried).
func (s *Server) Run(ctx context.Context) error {
	if s.deps == nil {
		return errors.New("server: a Server from Open runs no workers: build one with New to run the daemon")
	}
	if err := s.river.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	s.deps.RiverStarted() // the wake may trigger the producers now
	// The River client's liveness lock, held until the workers have
	// stopped: a crash releases it, and the leader's retry sweep rescues
	// this process's running jobs within a sweep.
	liveCtx, stopLiveness := context.WithCancel(context.WithoutCancel(ctx))
	livenessDone := make(chan struct{})
	go func() {
		defer close(livenessDone)
		s.deps.RunLiveness(liveCtx, s.river)
	}()
	defer func() {
		stopLiveness()
		<-livenessDone
	}()
	// The fan-out claimer takes small notifications (they have no River job
	// of their own), many per transaction, until the workers stop.
	defer s.claimer.Start(ctx)()
	if s.reads != nil {
		// Where the API's reads go, checked until the daemon stops.
		readsCtx, stopReads := context.WithCancel(ctx)
		readsDone := make(chan struct{})
		go func() {
			defer close(readsDone)
			s.reads.run(readsCtx)
		}()
		defer func() {
			stopReads()
			<-readsDone
		}()
	}
	if s.riverUI != nil {
		if err := s.riverUI.Start(ctx); err != nil {
			return fmt.Errorf("river ui: %w", err)
		}
	}
	errc := make(chan error, 1)
	hubDone := make(chan struct{})
	if s.hub != nil {
		// The hub shares ctx: when shutdown starts it closes the open streams,
		// so the HTTP server's graceful shutdown does not wait on them.
		go func() {
			defer close(hubDone)
			if err := s.hub.Run(ctx); err != nil {
				errc <- fmt.Errorf("inbox stream hub: %w", err)
			}
		}()
	} else {
		close(hubDone)
	}
	var srv *http.Server
	if s.listener != nil {
		var ln net.Listener
		srv, ln = newHTTPServer(s.Handler(), s.cfg.HTTP, s.listener)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		s.logger.InfoContext(ctx, "notifyd running", "http", s.Addr())
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	s.logger.Info("notifyd draining")
	drain := s.opts.DrainTimeout
	if drain <= 0 {
		drain = 30 * time.Second
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if srv != nil {
		_ = srv.Shutdown(stopCtx)
	}
	if err := s.river.Stop(stopCtx); err != nil {
		s.logger.Warn("workers did not finish in time; cancelling them", "err", err)
		hardCtx, hardCancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer hardCancel()
		_ = s.river.StopAndCancel(hardCtx)
	}
	<-hubDone
	s.logger.Info("notifyd stopped")
	return runErr
}

// newHTTPServer is the API's http.Server, and the listener it serves: every
// connection has a deadline for its headers, its whole request and its
// response, an idle keep-alive is closed, the header block is capped, and at
// most http.max_connections are served at once. Without these a client that
// sends headers slowly, declares a body and never sends it, or opens
// connections and leaves them idle holds a goroutine and a socket for as long
// as it likes. The write timeout does not cut the inbox streams: they set
// their own deadline before every write (http.ResponseController), which
// replaces the server's.
func newHTTPServer(h http.Handler, cfg config.HTTP, ln net.Listener) (*http.Server, net.Listener) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout.D(),
		ReadTimeout:       cfg.ReadTimeout.D(),
		WriteTimeout:      cfg.WriteTimeout.D(),
		IdleTimeout:       cfg.IdleTimeout.D(),
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
	}
	if cfg.MaxConnections > 0 {
		ln = newLimitListener(ln, cfg.MaxConnections)
	}
	return srv, ln
}

// Close releases the pool (when New opened it) and the channels'
// connections. Call it after Run returns.
func (s *Server) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i]()
	}
	s.closers = nil
}

// Migrate applies notifyd's and River's migrations to the database pool
// reaches, under an advisory lock; it is idempotent. cfg names the schema.
// Then it makes the notifier catalog the SQL functions read exactly cfg's
// notifiers (docs/sql-enqueue.md).
func Migrate(ctx context.Context, cfg *config.Config, pool *pgxpool.Pool, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := stores.Migrate(ctx, pool, cfg.Database.SearchSchema(), logger); err != nil {
		return err
	}
	return syncCatalog(ctx, pool, cfg, logger)
}

// Routes lists the pattern of every route the HTTP API serves ("GET
// /v1/inbox", "/riverui/"), the stream and the operations' routes included,
// in the order they were mounted. Nil with Options.NoHTTP.
func (s *Server) Routes() []string {
	if s.api == nil {
		return nil
	}
	return s.api.Routes()
}
