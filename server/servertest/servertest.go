// Package servertest builds what notifyd's integration tests share: a config
// from YAML, a River client running every worker against a test database, and
// polling helpers. It never fakes the database: pools come from pgtest.
package servertest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server"
)

// AdminToken and TokenSecret are BaseConfig's http.admin_token and
// http.token_secret: 32 bytes or more, as the config requires.
const (
	AdminToken  = "test-admin-token-0123456789abcdef0123"
	TokenSecret = "test-token-secret-0123456789abcdef0123"
)

// BaseConfig is a small config with the notifiers the integration tests use.
// Tests append their own notifiers or channels by editing the parsed Config.
const BaseConfig = `
reasons: [assigned, author, mentioned, subscribed, role-default]
queues: {fanout: 2, send: 4, digest: 2, maintenance: 1, fanout_chunk: 100}
http: {admin_token: ` + AdminToken + `, token_secret: ` + TokenSecret + `}
notifiers:
  comment.created:
    category: comments
    max_recipients: 5000
    params:
      type: object
      required: [post_title, author_name]
      properties:
        post_title: {type: string}
        author_name: {type: string}
        url: {type: string}
    channels:
      in_app: {title: "{{.author_name}} commented on {{.post_title}}", url: "{{.url}}"}
  team.joined:
    category: teams
    notify_actor: true
    max_recipients: 3
    channels:
      in_app: {title: "{{.team}}: somebody joined"}
`

// Config parses yaml (BaseConfig when empty) and checks its channel
// sections against the built-in channels, failing the test on error.
func Config(t testing.TB, yaml string) *config.Config {
	t.Helper()
	if yaml == "" {
		yaml = BaseConfig
	}
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err == nil {
		var set *channels.Set
		if set, err = builtin.MustRegistry().Open(cfg, nil, nil); err == nil {
			err = set.Close()
		}
	}
	if err != nil {
		t.Fatalf("test config: %v", err)
	}
	return cfg
}

// Client publishes cfg's notifier catalog to pool's database, as a daemon
// does at start (SendTx writes through notify_send, which checks the
// catalog), and returns a Go API client with cfg.
func Client(t testing.TB, pool *pgxpool.Pool, cfg *config.Config) *notifyd.Client {
	t.Helper()
	if err := server.PublishCatalog(context.Background(), pool, cfg, nil); err != nil {
		t.Fatal(err)
	}
	client, err := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// Channels opens the built-in channels, then extra, on cfg, as a daemon
// does, and closes them when the test ends.
func Channels(t testing.TB, cfg *config.Config, extra ...channels.Plugin) *channels.Set {
	t.Helper()
	reg, err := builtin.Registry(extra...)
	if err != nil {
		t.Fatalf("channel registry: %v", err)
	}
	set, err := reg.Open(cfg, Logger(), nil)
	if err != nil {
		t.Fatalf("open channels: %v", err)
	}
	t.Cleanup(func() { _ = set.Close() })
	return set
}

// Wire gives deps the channels of set, as the server does: the registry,
// the inbox, the per-recipient and bulk channels and the digest channel.
func Wire(deps *jobs.Deps, set *channels.Set) *jobs.Deps {
	deps.Registry, deps.Inbox, deps.Channels, deps.Bulk = set.Registry, set.Inbox, set.Channels, set.Bulk
	deps.Digests = set.Digests[set.Registry.Digest()]
	return deps
}

// Logger returns a logger that prints to stderr when NOTIFYD_TEST_LOG is set,
// and discards otherwise.
func Logger() *slog.Logger {
	if os.Getenv("NOTIFYD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// fastRetry retries failed jobs after 50 ms, so tests of crash recovery do not
// wait for River's production backoff.
type fastRetry struct{}

func (fastRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(50 * time.Millisecond) }

// StartWorkers runs a River client with every notifyd worker on deps.Pool and
// stops it when the test ends. A nil deps.Logger is filled with Logger(), and
// deps without a Registry get the built-in channels opened on deps.Config.
func StartWorkers(t testing.TB, deps *jobs.Deps) *river.Client[pgx.Tx] {
	t.Helper()
	if deps.Logger == nil {
		deps.Logger = Logger()
	}
	if deps.Registry == nil {
		Wire(deps, Channels(t, deps.Config))
	}
	rc := jobs.RiverConfig(deps, jobs.NewWorkers(deps))
	rc.RetryPolicy = fastRetry{}
	rc.TestOnly = true
	driver := jobs.NewRiverDriver(deps.Pool, rc, deps)
	client, err := river.NewClient(driver, rc)
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatalf("start river: %v", err)
	}
	jobs.RiverStarted(driver)
	// The daemon's fan-out claimer runs beside its River client (small
	// notifications have no fan-out job of their own).
	_, stopClaimer, err := jobs.StartFanoutClaimer(context.Background(), deps, client)
	if err != nil {
		t.Fatalf("start fan-out claimer: %v", err)
	}
	t.Cleanup(func() {
		stopClaimer()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := client.Stop(ctx); err != nil {
			_ = client.StopAndCancel(ctx)
		}
	})
	return client
}

// Eventually polls cond every 20 ms until it returns true or timeout passes,
// then fails the test with msg. cond runs on the test's goroutine, so it may
// fail the test itself when it sees something that must never happen.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	if !Wait(timeout, cond) {
		t.Fatalf("timed out after %s: %s", timeout, msg)
	}
}

// Wait polls cond every 20 ms until it returns true (Wait reports true) or
// timeout passes (false). It is Eventually for a caller that describes a
// timeout itself, with what it finds at that moment. It is the tests' one
// polling loop: a test waits on state through it, never with a sleep.
func Wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // the polling interval
	}
}

// Count runs a count(*) query and fails the test on error.
func Count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
