package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/channels/webhook"
	"github.com/notifyd/notifyd/server"
)

func newLogger(m *Main, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: level}))
}

func logLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("-log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// RunCommand is `notifyd run`: the daemon.
type RunCommand struct{ main *Main }

// Run starts the daemon and blocks until a signal drains it.
func (c *RunCommand) Run(ctx context.Context, args []string) error {
	var path, level string
	fs := c.main.newFlagSet("run", &path)
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lvl, err := logLevel(level)
	if err != nil {
		return err
	}
	cfg, err := server.LoadRunConfig(path)
	if err != nil {
		return err
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(server.DefaultGCPercent)
	}
	d, err := server.New(ctx, server.Options{Config: cfg, Logger: newLogger(c.main, lvl)})
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Run(ctx)
}

// MigrateCommand is `notifyd migrate`.
type MigrateCommand struct{ main *Main }

// Run applies notifyd's and River's migrations under an advisory lock.
func (c *MigrateCommand) Run(ctx context.Context, args []string) error {
	var path string
	fs := c.main.newFlagSet("migrate", &path)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	pool, err := server.OpenPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := server.Migrate(ctx, cfg, pool, newLogger(c.main, slog.LevelInfo)); err != nil {
		return err
	}
	fmt.Fprintln(c.main.Stdout, "migrations are up to date")
	return nil
}

// CheckCommand is `notifyd check`.
type CheckCommand struct{ main *Main }

// Run validates the config and prints every problem with its line: every
// rule `notifyd run` applies (server.LoadRunConfig), or, with -dev, the
// rules of `notifyd dev`, which provides the database and the secrets a dev
// run needs. With -db it also prepares every audience query against
// database.url as the daemon's role (server.CheckAudiences).
func (c *CheckCommand) Run(ctx context.Context, args []string) error {
	var path string
	var dev, db bool
	fs := c.main.newFlagSet("check", &path)
	fs.BoolVar(&dev, "dev", false, "check as `notifyd dev` runs the file: the database and the secrets it fills in may be left unset")
	fs.BoolVar(&db, "db", false, "also prepare every notifier's audience query against database.url (not run): a missing table, "+
		"wrong columns or types are reported with the notifier and line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	load := server.LoadRunConfig
	if dev {
		load = server.LoadConfig
	}
	cfg, err := load(path)
	if err != nil {
		return err
	}
	if db {
		pool, err := server.OpenPool(ctx, cfg)
		if err != nil {
			return err
		}
		err = server.CheckAudiences(ctx, pool, cfg)
		pool.Close()
		if err != nil {
			return err
		}
	}
	// What a catalog lacks falls back along the chain: a warning, not a failure.
	for _, w := range cfg.Warnings {
		fmt.Fprintf(c.main.Stdout, "%s: warning: %s\n", path, w)
	}
	fmt.Fprintf(c.main.Stdout, "%s: ok (%d notifiers)\n", path, len(cfg.Notifiers))
	// What the config asks of the operator outside notifyd (a channel's
	// channels.Advisor), such as the DNS record of a DKIM key.
	set, err := builtin.MustRegistry().OpenToCheck(cfg)
	if err != nil {
		return err
	}
	defer set.Close()
	for _, name := range set.Registry.Names() {
		if v, ok := set.Opened(name); ok {
			if a, ok := v.(channels.Advisor); ok {
				for _, line := range a.Advice() {
					fmt.Fprintln(c.main.Stdout, line)
				}
			}
		}
	}
	return nil
}

// SendCommand is `notifyd send`.
type SendCommand struct{ main *Main }

// Run enqueues one notification through the Go API.
func (c *SendCommand) Run(ctx context.Context, args []string) error {
	var path, notifier, key, to, topic, params, actor, sendAt string
	fs := c.main.newFlagSet("send", &path)
	fs.StringVar(&notifier, "notifier", "", "notifier name (required)")
	fs.StringVar(&key, "key", "", "notification key (required)")
	fs.StringVar(&to, "to", "", "comma-separated recipient ids; id:reason gives a reason")
	fs.StringVar(&topic, "topic", "", "comma-separated topics")
	fs.StringVar(&actor, "actor", "", "actor recipient id")
	fs.StringVar(&params, "params", "{}", "params as a JSON object")
	fs.StringVar(&sendAt, "send-at", "", "RFC 3339 time to fan out at")
	if err := fs.Parse(args); err != nil {
		return err
	}
	n := notifyd.Notification{Notifier: notifier, Key: key, Actor: actor}
	for _, r := range splitList(to) {
		id, reason, _ := strings.Cut(r, ":")
		n.Recipients = append(n.Recipients, notifyd.Recipient{ID: id, Reason: reason})
	}
	n.Topics = splitList(topic)
	if err := json.Unmarshal([]byte(params), &n.Params); err != nil {
		return fmt.Errorf("-params: not a JSON object: %w", err)
	}
	if sendAt != "" {
		t, err := time.Parse(time.RFC3339, sendAt)
		if err != nil {
			return fmt.Errorf("-send-at: %w", err)
		}
		n.SendAt = t
	}
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	pool, err := server.OpenPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	res, err := client.Send(ctx, n)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.main.Stdout, "%s duplicate=%t\n", res.ID, res.Duplicate)
	return nil
}

// TokenCommand is `notifyd token`.
type TokenCommand struct{ main *Main }

// Run prints a recipient token alone on stdout.
func (c *TokenCommand) Run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "create", "list", "revoke":
			return (&OperatorTokenCommand{main: c.main}).Run(ctx, args[0], args[1:])
		}
	}
	var path, recipient string
	var ttl time.Duration
	fs := c.main.newFlagSet("token", &path)
	fs.StringVar(&recipient, "recipient", "", "recipient id (required)")
	fs.DurationVar(&ttl, "ttl", time.Hour, "token lifetime (at most http.max_token_ttl)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if recipient == "" {
		return errors.New("-recipient is required")
	}
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	if cfg.HTTP.TokenSecret == "" {
		return fmt.Errorf("%s: http.token_secret is empty (set NOTIFYD_TOKEN_SECRET)", path)
	}
	// The daemon refuses a token that lives longer than its cap: minting one
	// would only hand out a token that never works.
	if max := cfg.HTTP.MaxTokenTTL.D(); ttl > max {
		return fmt.Errorf("-ttl %s is longer than http.max_token_ttl %s: the daemon would refuse the token (raise http.max_token_ttl or ask for less)", ttl, max)
	}
	tok, err := notifyd.RecipientToken(cfg.HTTP.TokenSecret, recipient, ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.main.Stdout, tok)
	return nil
}

// WebhookSecretCommand is `notifyd webhook-secret`.
type WebhookSecretCommand struct{ main *Main }

// Run prints the secret one destination's webhooks are signed with, derived
// from channels.webhook.secret: a notifier-level webhook's (-notifier) or a
// recipient's (-recipient; the API shows it too). It is what that receiver
// verifies with, and it verifies nobody else's webhooks.
func (c *WebhookSecretCommand) Run(_ context.Context, args []string) error {
	var path, notifier, recipient string
	fs := c.main.newFlagSet("webhook-secret", &path)
	fs.StringVar(&notifier, "notifier", "", "a notifier with a notifier-level webhook")
	fs.StringVar(&recipient, "recipient", "", "a recipient id (instead of -notifier)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (notifier == "") == (recipient == "") {
		return errors.New("give one of -notifier and -recipient")
	}
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	secret, _ := cfg.Channels[webhook.Name].Value("secret")
	if secret == "" {
		return fmt.Errorf("%s: channels.webhook.secret is empty (webhooks are not configured, or its variable is unset)", path)
	}
	var derived string
	if notifier != "" {
		if _, ok := cfg.Notifier(notifier); !ok {
			return fmt.Errorf("%s: no notifier %q", path, notifier)
		}
		derived, err = webhook.NotifierSecret(secret, notifier)
	} else {
		derived, err = webhook.RecipientSecret(secret, recipient)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(c.main.Stdout, derived)
	return nil
}

// DeliveriesCommand is `notifyd deliveries`.
type DeliveriesCommand struct{ main *Main }

// Run prints a notification's ledger as a table.
func (c *DeliveriesCommand) Run(ctx context.Context, args []string) error {
	var path, id, notifier, key, tenant string
	var limit int
	fs := c.main.newFlagSet("deliveries", &path)
	fs.StringVar(&id, "notification", "", "notification id")
	fs.StringVar(&notifier, "notifier", "", "notifier (with -key, instead of -notification)")
	fs.StringVar(&key, "key", "", "notification key")
	fs.StringVar(&tenant, "tenant", "", "the tenant the notification was sent for (with -key; keys are per tenant)")
	fs.IntVar(&limit, "limit", 1000, "at most this many deliveries")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	srv, err := server.Open(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer srv.Close()
	if id == "" {
		if notifier == "" || key == "" {
			return errors.New("give -notification ID, or -notifier and -key")
		}
		if id, err = srv.NotificationID(ctx, tenant, notifier, key); err != nil {
			return err
		}
	}
	n, err := srv.Ledger(ctx, id, limit)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.main.Stdout, "notification %s  %s/%s  status=%s", n.ID, n.Notifier, n.Key, n.Status)
	if n.Error != "" {
		fmt.Fprintf(c.main.Stdout, "  error=%q", n.Error)
	}
	fmt.Fprintln(c.main.Stdout)
	tw := tabwriter.NewWriter(c.main.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RECIPIENT\tCHANNEL\tREASON\tMODE\tSTATUS\tATTEMPTS\tUPDATED\tPROVIDER\tLAST ERROR")
	for _, d := range n.Deliveries {
		rcpt, provider := d.Recipient, d.Provider
		if rcpt == "" {
			rcpt = "(bulk)"
		}
		if provider == "" {
			provider = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", rcpt, d.Channel, d.Reason, d.Mode, d.Status, d.Attempts,
			d.UpdatedAt.Format(time.RFC3339), provider, d.LastError)
	}
	return tw.Flush()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// RetryCommand is `notifyd retry`: re-drive deliveries after a provider outage.
type RetryCommand struct{ main *Main }

// Run re-drives deliveries in the given statuses updated within -since.
func (c *RetryCommand) Run(ctx context.Context, args []string) error {
	var path, status string
	var since time.Duration
	var limit int
	fs := c.main.newFlagSet("retry", &path)
	fs.StringVar(&status, "status", "failed", "comma-separated statuses to re-drive: "+strings.Join(server.RedrivableStatuses, ", "))
	fs.DurationVar(&since, "since", time.Hour, "only deliveries updated within this long")
	fs.IntVar(&limit, "limit", 10000, "at most this many deliveries")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if since <= 0 || limit <= 0 {
		return errors.New("-since and -limit must be positive")
	}
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	srv, err := server.Open(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer srv.Close()
	ctx = server.AuditCLI(ctx, cliActor(), "deliveries.retry", "", map[string]any{"statuses": splitList(status),
		"since": since.String(), "limit": limit})
	n, err := srv.Redrive(ctx, splitList(status), time.Now().Add(-since), limit)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.main.Stdout, "re-drove %d deliveries\n", n)
	return nil
}
