package devmode

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/pgcluster"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/web"
)

// DemoRecipient is the recipient the demo page and the printed token are for.
const DemoRecipient = "u2"

// Listen checks that addr is on loopback (CheckListen) and listens on it.
// `notifyd dev` listens before it starts anything else, so a busy port is
// reported at once, not after PostgreSQL has started and migrated.
func Listen(addr string) (net.Listener, error) {
	if err := CheckListen(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %s: %w (another program holds the port: pass -listen 127.0.0.1:PORT or set NOTIFYD_LISTEN)", addr, err)
	}
	return ln, nil
}

// PostgresDir is where the private PostgreSQL of a dev directory keeps its
// data.
func PostgresDir(dir string) (string, error) { return filepath.Abs(filepath.Join(dir, "postgres")) }

// StartPostgres starts (creating it on first use) the private PostgreSQL
// kept in PostgresDir(dir) and makes sure its database "notifyd" exists. It
// returns that database's URL and a function that stops the server.
func StartPostgres(ctx context.Context, dir string, logger *slog.Logger) (url string, stop func(), err error) {
	abs, err := PostgresDir(dir)
	if err != nil {
		return "", nil, err
	}
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: abs, Logger: logger})
	if err != nil {
		return "", nil, err
	}
	stop = func() { _ = cluster.Stop() }
	if err := cluster.EnsureDatabase(ctx, "notifyd"); err != nil {
		stop()
		return "", nil, err
	}
	return cluster.URL("notifyd"), stop, nil
}

// Env is what dev mode adds to a daemon: its kept secrets, the capture
// mailbox (nil when email goes to the configured server), and the routes of
// the captured-email page, the inbox demo and the demo sender.
type Env struct {
	Secrets Secrets
	// Mailbox captures every email; nil with capture off.
	Mailbox *smtpcapture.Server
	// Hooks captures the notifier-level webhooks and Slack messages; nil
	// until CaptureHooks.
	Hooks *Hooks
	// MailTo says where email goes, for the banner.
	MailTo string

	page   *Page
	sender *Sender
	mu     sync.Mutex
	token  string
}

// Prepare readies cfg for a dev run served at base (its loopback URL): it
// loads or makes the kept secrets in dir and fills the admin token and token
// secret the config leaves empty, starts the capture mailbox and points the
// email channel at it (with capture), gives a webhook channel without a
// secret a fixed one, and points one-click unsubscribe links at base. Close
// releases the mailbox.
func Prepare(cfg *config.Config, dir string, capture bool, base string) (*Env, error) {
	secrets, err := LoadSecrets(dir)
	if err != nil {
		return nil, err
	}
	if cfg.HTTP.AdminToken == "" {
		cfg.HTTP.AdminToken = secrets.AdminToken
	}
	if cfg.HTTP.TokenSecret == "" {
		cfg.HTTP.TokenSecret = secrets.TokenSecret
	}
	e := &Env{Secrets: secrets,
		MailTo: "captured here, shown on the captured-email page (-smtp config sends it to channels.email's server)"}
	if capture {
		if e.Mailbox, err = smtpcapture.New("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("start the dev SMTP server: %w", err)
		}
	} else {
		e.MailTo = ConfiguredRelay(cfg)
	}
	if err := Configure(cfg, e.Mailbox); err != nil {
		e.Close()
		return nil, err
	}
	if err := ConfigureUnsubscribe(cfg, base); err != nil {
		e.Close()
		return nil, err
	}
	e.page = &Page{Mailbox: e.Mailbox}
	e.sender = &Sender{Config: cfg, Recipient: DemoRecipient}
	return e, nil
}

// Routes are the dev routes to mount on the daemon (server.Options.Routes):
// the captured-email page, the inbox demo and the demo sender. They work
// once Attach has given them the daemon.
func (e *Env) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /dev/{$}": e.page,
		"GET /dev/demo": web.Demo(web.DemoOptions{Token: e.DemoToken, Recipient: DemoRecipient,
			SendURL: "/dev/send"}),
		"POST /dev/send": e.sender,
	}
}

// Attach gives the dev routes the daemon's client, pool and inbox channel,
// and mints the demo recipient's token with secret.
func (e *Env) Attach(client *notifyd.Client, pool *pgxpool.Pool, inbox, secret string) (string, error) {
	e.sender.Client, e.sender.Inbox = client, inbox
	e.page.DB = pool
	tok, err := notifyd.RecipientToken(secret, DemoRecipient, DemoTokenTTL)
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	e.token = tok
	e.mu.Unlock()
	return tok, nil
}

// DemoTokenTTL is the lifetime of the demo recipient's printed token.
const DemoTokenTTL = 24 * time.Hour

// DemoToken is the demo recipient's token ("" before Attach).
func (e *Env) DemoToken() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.token
}

// CaptureHooks starts the webhook and Slack capture and points cfg's
// notifier-level webhooks and Slack messages (CaptureHooks) and the SMS,
// WhatsApp and Telegram provider APIs (CaptureProviders) at it, shown on
// the dev page.
func (e *Env) CaptureHooks(cfg *config.Config) error {
	h, err := StartHooks()
	if err != nil {
		return err
	}
	if err := CaptureHooks(cfg, h); err != nil {
		_ = h.Close()
		return err
	}
	if err := CaptureProviders(cfg, h); err != nil {
		_ = h.Close()
		return err
	}
	e.Hooks, e.page.Hooks = h, h
	return nil
}

// Close stops the capture mailbox and the webhook capture.
func (e *Env) Close() {
	if e.Mailbox != nil {
		e.Mailbox.Close()
	}
	_ = e.Hooks.Close()
}
