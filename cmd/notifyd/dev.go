package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/notifyd/notifyd/cmd/notifyd/internal/devmode"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/server"
)

// DevCommand is `notifyd dev`: the embedded default. It starts a private
// PostgreSQL under ./.notifyd/ (kept between runs) when no database is
// configured, migrates, captures email in an in-process SMTP server shown on
// /dev/, and runs the daemon.
type DevCommand struct{ main *Main }

// devFlags are `notifyd dev`'s flags.
type devFlags struct {
	config, dir, level, smtp, hooks, listen string
}

func (c *DevCommand) parse(args []string) (devFlags, slog.Level, error) {
	var f devFlags
	fs := c.main.newFlagSet("dev", &f.config)
	fs.StringVar(&f.dir, "dir", ".notifyd", "where the private PostgreSQL keeps its data")
	fs.StringVar(&f.smtp, "smtp", "capture", "capture: email goes to dev's own SMTP server, shown on /dev/; config: to channels.email's server")
	fs.StringVar(&f.hooks, "hooks", "capture", "capture: notifier-level webhooks, Slack messages and the SMS, WhatsApp and Telegram providers go to dev's own receiver, shown on /dev/; config: to the URLs in the config")
	fs.StringVar(&f.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.listen, "listen", "", "the address to serve on, loopback only (default: $NOTIFYD_LISTEN, then http.listen)")
	if err := fs.Parse(args); err != nil {
		return f, 0, err
	}
	lvl, err := logLevel(f.level)
	if err != nil {
		return f, 0, err
	}
	if f.smtp != "capture" && f.smtp != "config" {
		return f, 0, fmt.Errorf("-smtp %q: want capture or config", f.smtp)
	}
	if f.hooks != "capture" && f.hooks != "config" {
		return f, 0, fmt.Errorf("-hooks %q: want capture or config", f.hooks)
	}
	return f, lvl, nil
}

// Run starts everything and blocks until a signal; it stops what it started.
func (c *DevCommand) Run(ctx context.Context, args []string) error {
	f, lvl, err := c.parse(args)
	if err != nil {
		return err
	}
	logger := newLogger(c.main, lvl)
	cfg, err := server.LoadConfig(f.config)
	if err != nil {
		return err
	}
	if f.listen != "" {
		cfg.HTTP.Listen = f.listen
	}
	// The port first: a busy one fails before PostgreSQL starts.
	ln, err := devmode.Listen(cfg.HTTP.Listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	if cfg.Database.URL == "" {
		abs, err := devmode.PostgresDir(f.dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.main.Stdout, "starting a private PostgreSQL in %s ...\n", abs)
		url, stop, err := devmode.StartPostgres(ctx, f.dir, logger)
		if err != nil {
			return err
		}
		defer stop()
		cfg.Database.URL = url
	}
	base := "http://" + ln.Addr().String()
	env, err := devmode.Prepare(cfg, f.dir, f.smtp == "capture", base)
	if err != nil {
		return err
	}
	defer env.Close()
	if f.hooks == "capture" {
		if err := env.CaptureHooks(cfg); err != nil {
			return err
		}
	}
	if err := c.migrate(ctx, cfg, lvl); err != nil {
		return err
	}
	d, err := server.New(ctx, server.Options{Config: cfg, Logger: logger, Listener: ln, Wrap: devmode.Guard,
		Routes: env.Routes()})
	if err != nil {
		return err
	}
	defer d.Close()
	tok, err := env.Attach(d.Client(), d.Pool(), d.Registry().Inbox(), cfg.HTTP.TokenSecret)
	if err != nil {
		return err
	}
	seeded, err := devmode.SeedRecipients(ctx, d.Client())
	if err != nil {
		return err
	}
	c.banner(base, cfg, tok, env.MailTo, seeded)
	return d.Run(ctx)
}

// migrate applies the migrations with one summary line instead of a line
// per migration.
func (c *DevCommand) migrate(ctx context.Context, cfg *config.Config, lvl slog.Level) error {
	pool, err := server.OpenPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := server.Migrate(ctx, cfg, pool, newLogger(c.main, max(lvl, slog.LevelWarn))); err != nil {
		return err
	}
	fmt.Fprintln(c.main.Stdout, "database migrated")
	return nil
}

// firstNotification is the body of the banner's first curl (and of the
// README's): a comment.created for u2 with every param the example config's
// templates show, so that the email it sends reads as a real one would.
const firstNotification = `{"notifier":"comment.created","key":"c-1","actor":"u1","recipients":[{"id":"u2","reason":"author"}],` +
	`"params":{"post_title":"Hello world","author_name":"Ada","excerpt":"Great write-up! The part about the ledger answered my question.",` +
	`"url":"https://app.acme.test/posts/9#comment-1"}}`

// banner prints where everything is and how to send the first notification.
func (c *DevCommand) banner(base string, cfg *config.Config, tok, mailTo, seeded string) {
	fmt.Fprintf(c.main.Stdout, `
notifyd dev is running.
  API:             %[1]s/v1/
  captured email:  %[1]s/dev/
  inbox demo:      %[1]s/dev/demo
  admin token:     %[2]s
  token for u2:    %[3]s
  token secret:    %[4]s   (NOTIFYD_TOKEN_SECRET for your app and `+"`notifyd token`"+`)
  database:        %[5]s
  email goes to:   %[6]s
  demo recipients: %[7]s

Send a notification:
  curl -s -X POST %[1]s/v1/notifications -H 'Authorization: Bearer %[2]s' \
    -d '`+firstNotification+`'
Read u2's inbox:
  curl -s %[1]s/v1/inbox -H 'Authorization: Bearer %[3]s'

Ctrl-C stops notifyd and the private PostgreSQL.
`, base, cfg.HTTP.AdminToken, tok, cfg.HTTP.TokenSecret, cfg.Database.URL, mailTo, seeded)
}
