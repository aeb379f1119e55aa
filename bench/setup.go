package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/server"
)

// Notifiers the scenarios send. Their queues, fetch settings, chunk and batch
// sizes are notifyd's defaults: the config below sets no queues: key.
const (
	notifierInApp  = "bench.inapp"  // in_app only
	notifierEmail  = "bench.email"  // email only, immediate
	notifierDigest = "bench.digest" // in_app + email in digest mode
	notifierBoth   = "bench.both"   // in_app + email, immediate
	// notifierDelayed: in_app + email delayed, unless read (workflows).
	notifierDelayed = "bench.delayed"
)

// benchParams are the params of every bench notification.
var benchParams = map[string]any{"actor": "ada", "item": "post-9"}

// The inbox item those params render to (for the raw INSERT baseline, which
// writes the same rows).
const (
	benchTitle = "ada commented on post-9"
	benchBody  = "A new comment"
	benchURL   = "https://app.test/items/post-9"
	benchJSON  = `{"actor": "ada", "item": "post-9"}`
)

// Credentials of the in-process daemons' HTTP API.
const (
	adminToken  = "bench-admin-token-0123456789abcdef0123"
	tokenSecret = "bench-token-secret-0123456789abcdef0123"
)

// configOptions say what a scenario's config needs.
type configOptions struct {
	DatabaseURL string
	SMTPPort    int    // 0: no email channel
	Listen      string // "" is 127.0.0.1:0
}

// configYAML returns a complete config: defaults for queues, retry, digest and
// retention, the bench notifiers, and the email channel when SMTPPort is set.
func configYAML(o configOptions) string {
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "database:\n  url: %s\n", strconv.Quote(o.DatabaseURL))
	// No rate limits: the benchmarks measure the daemon, not its limiter.
	fmt.Fprintf(&b, "http:\n  listen: %s\n  admin_token: %s\n  token_secret: %s\n  rate: {recipient: 0, admin: 0}\n",
		listen, adminToken, tokenSecret)
	if o.SMTPPort > 0 {
		fmt.Fprintf(&b, `channels:
  email:
    from: "Bench <bench@notifyd.test>"
    smtp: {host: 127.0.0.1, port: %d, tls: none}
    rate: 0
    timeout: 30s
`, o.SMTPPort)
	}
	b.WriteString("notifiers:\n")
	b.WriteString(benchNotifier(notifierInApp, inAppYAML))
	b.WriteString(benchNotifier(notifierEmail, `      email:
        default: immediate
        subject: "{{.actor}} commented on {{.item}}"
        text: |
          {{.actor}} commented on {{.item}}.

          https://app.test/items/{{.item}}
`))
	b.WriteString(benchNotifier(notifierBoth, inAppYAML+`      email:
        default: immediate
        subject: "{{.actor}} commented on {{.item}}"
        text: "{{.actor}} commented on {{.item}}."
`))
	b.WriteString(benchNotifier(notifierDigest, inAppYAML+`      email:
        default: digest
        subject: "{{.actor}} commented on {{.item}}"
        text: "{{.actor}} commented on {{.item}}."
`))
	b.WriteString(strings.Replace(benchNotifier(notifierAudience, inAppYAML), "    channels:\n", audienceYAML+"    channels:\n", 1))
	b.WriteString(benchNotifier(notifierDelayed, `      in_app:
        title: "{{.actor}} commented on {{.item}}"
      email:
        subject: "{{.actor}} commented on {{.item}}"
        text: "{{.actor}} commented on {{.item}}."
        delay: `+delayedBy.String()+`
        unless: read
`))
	return b.String()
}

// inAppYAML is the in_app section of the bench notifiers that have one: the
// item the raw INSERT baseline writes (benchTitle, benchBody, benchURL).
const inAppYAML = `      in_app:
        title: "{{.actor}} commented on {{.item}}"
        body: "A new comment"
        url: "https://app.test/items/{{.item}}"
`

// benchNotifier is the config of notifier name: category bench, room for the
// largest audience, the params benchParams has, and channels (the YAML of
// its channel sections, indented under channels:).
func benchNotifier(name, channels string) string {
	return "  " + name + `:
    category: bench
    max_recipients: 2000000
    params:
      type: object
      required: [actor, item]
      properties: {actor: {type: string}, item: {type: string}}
    channels:
` + channels
}

func loadConfig(o configOptions) (*config.Config, error) {
	cfg, err := config.Parse("bench.yaml", []byte(configYAML(o)))
	if err != nil {
		return nil, fmt.Errorf("bench config: %w", err)
	}
	return cfg, nil
}

// emailScenario is what the email scenarios share: an in-process SMTP sink,
// a fresh database with recipients 1..n (analyzed), and the daemon with its
// email channel pointed at the sink, started; close undoes it all.
type emailScenario struct {
	sink   *smtpcapture.Server
	db     *scenarioDB
	pool   *pgxpool.Pool
	cfg    *config.Config
	client *notifyd.Client
	close  func()
}

func startEmailScenario(ctx context.Context, h *harness, label string, n int, sinkOpts ...smtpcapture.Option) (*emailScenario, error) {
	sink, err := smtpcapture.New("127.0.0.1:0", append([]smtpcapture.Option{smtpcapture.WithDiscard()}, sinkOpts...)...)
	if err != nil {
		return nil, err
	}
	db, pool, closeDB, err := h.openDB(ctx, label, 4)
	if err != nil {
		sink.Close()
		return nil, err
	}
	fail := func(err error) (*emailScenario, error) {
		closeDB()
		sink.Close()
		return nil, err
	}
	if err := insertRecipients(ctx, pool, n); err != nil {
		return fail(err)
	}
	if err := analyze(ctx, pool); err != nil {
		return fail(err)
	}
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL, SMTPPort: sink.Port()})
	if err != nil {
		return fail(err)
	}
	d, err := startDaemon(ctx, cfg, server.Options{NoHTTP: true}, h.logger)
	if err != nil {
		return fail(err)
	}
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	return &emailScenario{sink: sink, db: db, pool: pool, cfg: cfg, client: client, close: func() {
		d.stop()
		closeDB()
		sink.Close()
	}}, nil
}

// warmUp brings the scenario's database to the state of a daemon that has
// been running, before anything is timed: one notification to n recipients
// sent through the daemon (the ledger, the inbox tables and river_job then
// hold n settled rows), waited for until the sink has every message and the
// ledger has settled them, then every table analyzed, as autovacuum would
// have by then, and the sink's count reset.
//
// Measured on tables that were empty and never analyzed, the daemon's
// prepared statements keep the generic plans made while the tables were
// tiny (sequential scans of notify_deliveries, notify_notifications and
// River's river_job, where an index probe is right at any size) for the
// whole run, and each statement slows down as the run fills the tables:
// commit → email at 200 sends/s measured p99 1.5–3.9 s that way, 0.2–0.3 s
// after this warm-up. The River no-op baseline gets the same warm-up.
//
// With single, warm up with n notifications of one recipient each (the
// commit → email scenario's traffic), else with one to all n.
func (sc *emailScenario) warmUp(ctx context.Context, n int, single bool) error {
	send := func() error {
		_, _, err := sendCommitted(ctx, sc.pool, sc.client, notifyd.Notification{Notifier: notifierEmail,
			Key: "warm-up", Recipients: inlineRecipients(n), Params: benchParams}, nil)
		return err
	}
	if single {
		send = func() error {
			for i := range n {
				if _, _, err := sendCommitted(ctx, sc.pool, sc.client, notifyd.Notification{Notifier: notifierEmail,
					Key: fmt.Sprintf("warm-up-%05d", i), Recipients: []notifyd.Recipient{{ID: recipientID(i + 1)}},
					Params: benchParams}, nil); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if err := warmUp(ctx, sc.pool, n, send, sc.sink.Count); err != nil {
		return err
	}
	sc.sink.Reset()
	return nil
}

// warmUp runs send, which makes the daemon deliver n messages, waits until
// arrived (a sink's count) has grown by n and the ledger has no delivery
// pending or sending, and analyzes every table: the warm-up of
// emailScenario.warmUp, for any channel's sink.
func warmUp(ctx context.Context, pool *pgxpool.Pool, n int, send func() error, arrived func() int) error {
	before := arrived()
	if err := send(); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if _, err := waitUntil(ctx, 5*time.Millisecond, emailTimeout, func() (bool, error) {
		if arrived() < before+n {
			return false, nil
		}
		var open int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM notify_deliveries WHERE status IN ('pending', 'sending')`).Scan(&open)
		return open == 0, err
	}); err != nil {
		return fmt.Errorf("warm-up: %d of %d delivered: %w", arrived()-before, n, err)
	}
	return analyzeAll(ctx, pool)
}

// runningDaemon is a server.Server running in this process.
type runningDaemon struct {
	*server.Server
	cancel context.CancelFunc
	done   chan error
}

// startDaemon assembles notifyd exactly as `notifyd run` does (server:
// pool, channels, jobs.NewRiverClient with every worker, HTTP API unless
// opts.NoHTTP) and starts it.
func startDaemon(ctx context.Context, cfg *config.Config, opts server.Options, logger *slog.Logger) (*runningDaemon, error) {
	if opts.Logger == nil {
		opts.Logger = logger
	}
	opts.DrainTimeout = 5 * time.Second
	opts.Config = cfg
	d, err := server.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	return runDaemon(d), nil
}

// runDaemon starts an assembled daemon.
func runDaemon(d *server.Server) *runningDaemon {
	rctx, cancel := context.WithCancel(context.Background())
	r := &runningDaemon{Server: d, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(rctx) }()
	return r
}

// stop drains the daemon and closes it.
func (r *runningDaemon) stop() {
	r.cancel()
	<-r.done
	r.Close()
}

// recipientID is the id of the i-th bench recipient (1-based); ids sort in
// the order of i.
func recipientID(i int) string { return fmt.Sprintf("user-%07d", i) }

// recipientSQL is recipientID in SQL, over a generate_series column g.
const recipientSQL = `'user-' || lpad(g::text, 7, '0')`

// insertRecipients creates profiles for recipients 1..n, set-based.
func insertRecipients(ctx context.Context, pool *pgxpool.Pool, n int) error {
	_, err := pool.Exec(ctx, `
INSERT INTO notify_recipients (id, email, name, locale, timezone)
SELECT `+recipientSQL+`, 'user' || g || '@bench.test', 'User ' || g, 'en', 'UTC'
FROM generate_series(1, $1) g`, n)
	if err != nil {
		return fmt.Errorf("insert %d recipients: %w", n, err)
	}
	return nil
}

// insertSubscribers subscribes recipients 1..n to topic, set-based.
func insertSubscribers(ctx context.Context, pool *pgxpool.Pool, topic string, n int) error {
	_, err := pool.Exec(ctx, `
INSERT INTO notify_subscriptions (topic, recipient, reason)
SELECT $2, `+recipientSQL+`, 'subscribed'
FROM generate_series(1, $1) g`, n, topic)
	if err != nil {
		return fmt.Errorf("subscribe %d recipients: %w", n, err)
	}
	return nil
}

// inlineRecipients lists recipients 1..n.
func inlineRecipients(n int) []notifyd.Recipient {
	rs := make([]notifyd.Recipient, n)
	for i := range rs {
		rs[i] = notifyd.Recipient{ID: recipientID(i + 1)}
	}
	return rs
}

// sendCommitted enqueues n with SendTx in a transaction of its own and
// returns the notification id and the time COMMIT returned.
func sendCommitted(ctx context.Context, pool *pgxpool.Pool, client *notifyd.Client, n notifyd.Notification, beforeCommit func()) (string, time.Time, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	res, err := client.SendTx(ctx, tx, n)
	if err != nil {
		return "", time.Time{}, err
	}
	if beforeCommit != nil {
		beforeCommit()
	}
	if err := tx.Commit(ctx); err != nil {
		return "", time.Time{}, err
	}
	return res.ID, time.Now(), nil
}

// notificationStatus reads a notification's status and error.
func notificationStatus(ctx context.Context, pool *pgxpool.Pool, id string) (string, string, error) {
	var status string
	var msg *string
	err := pool.QueryRow(ctx, `SELECT status, error FROM notify_notifications WHERE id = $1`, id).Scan(&status, &msg)
	if err != nil {
		return "", "", err
	}
	if msg == nil {
		return status, "", nil
	}
	return status, *msg, nil
}

// waitFannedOut polls the notification every 5 ms until it is fanned_out.
func waitFannedOut(ctx context.Context, pool *pgxpool.Pool, id string, timeout time.Duration) (time.Time, error) {
	return waitUntil(ctx, 5*time.Millisecond, timeout, func() (bool, error) {
		status, msg, err := notificationStatus(ctx, pool, id)
		if err != nil {
			return false, err
		}
		switch status {
		case string(notifyd.NotificationFannedOut):
			return true, nil
		case string(notifyd.NotificationRejected), string(notifyd.NotificationCancelled):
			return false, fmt.Errorf("notification %s is %s: %s", id, status, msg)
		}
		return false, nil
	})
}

// count runs a count query.
func count(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string, args ...any) (int, error) {
	var n int
	err := db.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}
