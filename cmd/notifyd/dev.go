package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/devmode"
	"github.com/notifyd/notifyd/internal/pgcluster"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/web"
)

// DevCommand is `notifyd dev`: the embedded default. It starts a private
// PostgreSQL under ./.notifyd/ (kept between runs) when no database is
// configured, migrates, captures email in an in-process SMTP server shown on
// /dev/, and runs the daemon.
type DevCommand struct{ main *Main }

// Run starts everything and blocks until a signal; it stops what it started.
func (c *DevCommand) Run(ctx context.Context, args []string) error {
	var path, dir, level, smtp string
	fs := c.main.newFlagSet("dev", &path)
	fs.StringVar(&dir, "dir", ".notifyd", "where the private PostgreSQL keeps its data")
	fs.StringVar(&smtp, "smtp", "capture", "capture: email goes to dev's own SMTP server, shown on /dev/; config: to channels.email's server")
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lvl, err := logLevel(level)
	if err != nil {
		return err
	}
	if smtp != "capture" && smtp != "config" {
		return fmt.Errorf("-smtp %q: want capture or config", smtp)
	}
	logger := newLogger(c.main, lvl)
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	if err := devmode.CheckListen(cfg.HTTP.Listen); err != nil {
		return err
	}

	if cfg.Database.URL == "" {
		abs, err := filepath.Abs(filepath.Join(dir, "postgres"))
		if err != nil {
			return err
		}
		fmt.Fprintf(c.main.Stdout, "starting a private PostgreSQL in %s ...\n", abs)
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: abs, Logger: logger})
		if err != nil {
			return err
		}
		defer cluster.Stop()
		if err := cluster.EnsureDatabase(ctx, "notifyd"); err != nil {
			return err
		}
		cfg.Database.URL = cluster.URL("notifyd")
	}
	secrets, err := devmode.LoadSecrets(dir)
	if err != nil {
		return err
	}
	if cfg.HTTP.AdminToken == "" {
		cfg.HTTP.AdminToken = secrets.AdminToken
	}
	if cfg.HTTP.TokenSecret == "" {
		cfg.HTTP.TokenSecret = secrets.TokenSecret
	}
	mailbox, err := smtpcapture.New("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("start the dev SMTP server: %w", err)
	}
	defer mailbox.Close()
	mailTo := "captured here, shown on the captured-email page (-smtp config sends it to channels.email's server)"
	if smtp == "config" {
		mailTo = devmode.ConfiguredRelay(cfg)
		mailbox = nil
	}
	if err := devmode.Configure(cfg, mailbox); err != nil {
		return err
	}

	pool, err := server.OpenPool(ctx, cfg)
	if err != nil {
		return err
	}
	// One summary line instead of a line per migration.
	err = server.Migrate(ctx, cfg, pool, newLogger(c.main, max(lvl, slog.LevelWarn)))
	pool.Close()
	if err != nil {
		return err
	}
	fmt.Fprintln(c.main.Stdout, "database migrated")

	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
	}
	// Unsubscribe links in captured mail point at this server.
	if err := devmode.ConfigureUnsubscribe(cfg, "http://"+ln.Addr().String()); err != nil {
		ln.Close()
		return err
	}
	page := &devmode.Page{Mailbox: mailbox}
	var tok string // minted below; the demo page reads it per request
	send := &devmode.Sender{Config: cfg, Recipient: "u2"}
	// The API is served here, not by the server, so that every request
	// passes devmode.Guard first (loopback Host only, no CORS on /dev/).
	d, err := server.New(ctx, server.Options{Config: cfg, Logger: logger, NoListen: true,
		Routes: map[string]http.Handler{"GET /dev/{$}": page,
			"GET /dev/demo":  web.Demo(web.DemoOptions{Token: func() string { return tok }, Recipient: "u2", SendURL: "/dev/send"}),
			"POST /dev/send": send,
		}})
	if err != nil {
		ln.Close()
		return err
	}
	defer d.Close()
	srv := &http.Server{Handler: devmode.Guard(d.Handler()), ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout.D(),
		ReadTimeout: cfg.HTTP.ReadTimeout.D(), WriteTimeout: cfg.HTTP.WriteTimeout.D(), IdleTimeout: cfg.HTTP.IdleTimeout.D(), MaxHeaderBytes: cfg.HTTP.MaxHeaderBytes}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	defer func() {
		stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(stop)
	}()
	send.Client = d.Client()
	send.Inbox = d.Registry().Inbox()
	page.DB = d.Pool()
	seeded, err := devmode.SeedRecipients(ctx, d.Client())
	if err != nil {
		return err
	}

	tok, err = notifyd.RecipientToken(cfg.HTTP.TokenSecret, "u2", 24*time.Hour)
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
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
    -d '{"notifier":"comment.created","key":"c-1","actor":"u1","recipients":[{"id":"u2","reason":"author"}],"params":{"post_title":"Hello","author_name":"Ada","url":"/posts/9"}}'
Read u2's inbox:
  curl -s %[1]s/v1/inbox -H 'Authorization: Bearer %[3]s'

Ctrl-C stops notifyd and the private PostgreSQL.
`, base, cfg.HTTP.AdminToken, tok, cfg.HTTP.TokenSecret, cfg.Database.URL, mailTo, seeded)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() {
		// A listener that fails ends the daemon, as `notifyd run`'s would.
		if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server", "err", err)
			stopRun()
		}
	}()
	return d.Run(runCtx)
}
