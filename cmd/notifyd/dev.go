package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/testing/pgcluster"
	"github.com/notifyd/notifyd/internal/testing/smtptest"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/web"
)

// DevCommand is `notifyd dev`: the embedded default. It starts a private
// PostgreSQL under ./.notifyd/ (kept between runs) when no database is
// configured, migrates, captures email in an in-process SMTP server shown on
// /dev/, and runs the daemon.
type DevCommand struct{ main *Main }

// Run starts everything and blocks until a signal; it stops what it started.
func (c *DevCommand) Run(ctx context.Context, args []string) error {
	var path, dir, level string
	fs := c.main.newFlagSet("dev", &path)
	fs.StringVar(&dir, "dir", ".notifyd", "where the private PostgreSQL keeps its data")
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lvl, err := logLevel(level)
	if err != nil {
		return err
	}
	logger := newLogger(c.main, lvl)
	cfg, err := config.Load(path)
	if err != nil {
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
	secrets, err := devSecrets(dir)
	if err != nil {
		return err
	}
	if cfg.HTTP.AdminToken == "" {
		cfg.HTTP.AdminToken = secrets.AdminToken
	}
	if cfg.HTTP.TokenSecret == "" {
		cfg.HTTP.TokenSecret = secrets.TokenSecret
	}
	if cfg.Channels.Webhook != nil && cfg.Channels.Webhook.Secret == "" {
		cfg.Channels.Webhook.Secret = "dev-webhook-secret"
	}

	mailbox, err := smtptest.New("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("start the dev SMTP server: %w", err)
	}
	defer mailbox.Close()
	if cfg.Channels.Email == nil {
		cfg.Channels.Email = &config.Email{From: "notifyd dev <dev@notifyd.test>", Timeout: config.Duration(30 * time.Second)}
	}
	cfg.Channels.Email.SMTP = config.SMTP{Host: mailbox.Host(), Port: mailbox.Port(), TLS: "none"}

	pool, err := server.OpenPool(ctx, cfg)
	if err != nil {
		return err
	}
	err = stores.Migrate(ctx, pool, cfg.Database.SearchSchema(), logger)
	pool.Close()
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
	}
	page := &devPage{mailbox: mailbox}
	var tok string // minted below; the demo page reads it per request
	send := &devSender{cfg: cfg, recipient: "u2"}
	d, err := server.New(ctx, cfg, server.Options{Logger: logger, Listener: ln,
		Routes: map[string]http.Handler{"GET /dev/{$}": page,
			"GET /dev/demo":  web.Demo(web.DemoOptions{Token: func() string { return tok }, Recipient: "u2", SendURL: "/dev/send"}),
			"POST /dev/send": send,
		}})
	if err != nil {
		ln.Close()
		return err
	}
	defer d.Close()
	send.client = d.Client
	page.db = d.Pool

	tok, err = notifyd.RecipientToken(cfg.HTTP.TokenSecret, "u2", 24*time.Hour)
	if err != nil {
		return err
	}
	base := "http://" + d.Addr()
	fmt.Fprintf(c.main.Stdout, `
notifyd dev is running.
  API:             %[1]s/v1/
  captured email:  %[1]s/dev/
  inbox demo:      %[1]s/dev/demo
  admin token:     %[2]s
  token for u2:    %[3]s
  token secret:    %[4]s   (NOTIFYD_TOKEN_SECRET for your app and `+"`notifyd token`"+`)
  database:        %[5]s

Send a notification:
  curl -s -X POST %[1]s/v1/notifications -H 'Authorization: Bearer %[2]s' \
    -d '{"notifier":"comment.created","key":"c-1","actor":"u1","recipients":[{"id":"u2","reason":"author"}],"params":{"post_title":"Hello","author_name":"Ada","url":"/posts/9"}}'
Read u2's inbox:
  curl -s %[1]s/v1/inbox -H 'Authorization: Bearer %[3]s'

Ctrl-C stops notifyd and the private PostgreSQL.
`, base, cfg.HTTP.AdminToken, tok, cfg.HTTP.TokenSecret, cfg.Database.URL)
	return d.Run(ctx)
}

// devSecretsFile keeps the dev admin token and token secret in the dev
// directory, so they stay the same between runs (an app you point at the dev
// daemon keeps working). It is created 0600 on first run.
const devSecretsFile = "dev-secrets.json"

type devSecretValues struct {
	AdminToken  string `json:"admin_token"`
	TokenSecret string `json:"token_secret"`
}

func devSecrets(dir string) (devSecretValues, error) {
	p := filepath.Join(dir, devSecretsFile)
	var s devSecretValues
	if b, err := os.ReadFile(p); err == nil {
		if err := json.Unmarshal(b, &s); err == nil && s.AdminToken != "" && s.TokenSecret != "" {
			return s, nil
		}
	}
	s = devSecretValues{AdminToken: "dev-admin-" + randomHex(8), TokenSecret: "dev-secret-" + randomHex(16)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return s, err
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return s, fmt.Errorf("save dev secrets: %w", err)
	}
	return s, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// devPage lists captured emails, newest first, and the delivery log.
type devPage struct {
	mailbox *smtptest.Server
	db      stores.DB // set once the daemon's pool exists
}

var devTemplate = template.Must(template.New("dev").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>notifyd dev: captured email</title>
<style>body{font:14px system-ui,sans-serif;margin:2em;max-width:60em}article{border:1px solid #ccc;border-radius:6px;margin:1em 0;padding:1em}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em}iframe{width:100%;height:14em;border:1px solid #eee}small{color:#666}table{border-collapse:collapse}td,th{border-bottom:1px solid #eee;padding:.2em .5em;text-align:left}</style></head>
<body><p><a href="/dev/demo">inbox demo</a> · <a href="#email">captured email</a> · <a href="#ledger">delivery log</a></p>
<h1 id="email">Captured email ({{len .Messages}})</h1>
<p><small>Every message notifyd sent through the dev SMTP server. Reload to refresh.</small></p>
{{range .Messages}}<article><h2>{{.Subject}}</h2>
<p><small>To {{range .To}}{{.}} {{end}}· Message-ID {{.MessageID}}</small></p>
{{if .HTML}}<iframe sandbox srcdoc="{{.HTML}}"></iframe>{{end}}
{{if .Text}}<pre>{{.Text}}</pre>{{end}}</article>{{else}}<p>No email yet.</p>{{end}}
<h1 id="ledger">Delivery log</h1>
<p><small>The 200 most recently changed rows of notify_deliveries (in_app items are in the inbox, not here).</small></p>
{{if .LedgerErr}}<p>Could not read the ledger: {{.LedgerErr}}</p>{{end}}
<table><tr><th>updated</th><th>notifier/key</th><th>recipient</th><th>channel</th><th>mode</th><th>status</th><th>attempts</th><th>last error</th></tr>
{{range .Ledger}}<tr><td>{{.UpdatedAt.Format "15:04:05.000"}}</td><td>{{.Notifier}}/{{.Key}}</td><td>{{if .Recipient}}{{.Recipient}}{{else}}(bulk){{end}}</td><td>{{.Channel}}</td><td>{{.Mode}}</td><td>{{.Status}}</td><td>{{.Attempts}}</td><td>{{if .LastError}}{{.LastError}}{{end}}</td></tr>
{{else}}<tr><td colspan="8">No deliveries yet.</td></tr>{{end}}</table>
</body></html>`))

func (p *devPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	msgs := p.mailbox.Messages()
	for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
		msgs[i], msgs[j] = msgs[j], msgs[i]
	}
	data := struct {
		Messages  []smtptest.Message
		Ledger    []stores.LedgerRow
		LedgerErr error
	}{Messages: msgs}
	if p.db != nil {
		data.Ledger, data.LedgerErr = stores.RecentDeliveries(r.Context(), p.db, 200)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := devTemplate.Execute(w, data); err != nil {
		slog.Default().Warn("render dev page", "err", err)
	}
}

// devSender is POST /dev/send, the demo page's "send a test notification":
// it sends a sample notification to the demo recipient through the Go client.
// Only `notifyd dev` mounts it.
type devSender struct {
	client    *notifyd.Client
	cfg       *config.Config
	recipient string
}

func (s *devSender) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Only JSON: a cross-site form cannot send it without a CORS preflight,
	// which notifyd does not grant.
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusUnsupportedMediaType, Code: httpapi.CodeBadRequest,
			Message: "send Content-Type: application/json"})
		return
	}
	// comment.created when configured, else the first notifier with an inbox item.
	name := ""
	if n := s.cfg.Notifiers["comment.created"]; n != nil && n.Channels.InApp != nil {
		name = "comment.created"
	} else {
		names := make([]string, 0, len(s.cfg.Notifiers))
		for k, n := range s.cfg.Notifiers {
			if n.Channels.InApp != nil {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		if len(names) > 0 {
			name = names[0]
		}
	}
	if name == "" {
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusUnprocessableEntity, Code: "unknown_notifier",
			Message: "no notifier in the config has an in_app channel"})
		return
	}
	params := map[string]any{}
	for k, v := range s.cfg.Notifiers[name].Example {
		params[k] = v
	}
	res, err := s.client.Send(r.Context(), notifyd.Notification{Notifier: name, Key: "dev-" + randomHex(6), Actor: "u1",
		Recipients: []notifyd.Recipient{{ID: s.recipient}}, Params: params})
	if err != nil {
		httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusUnprocessableEntity, Code: "send_failed", Message: err.Error(), Err: err})
		return
	}
	httpapi.WriteJSON(w, http.StatusAccepted, map[string]any{"id": res.ID, "notifier": name, "recipient": s.recipient})
}
