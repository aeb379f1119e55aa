// Package devmode is what `notifyd dev` adds to a daemon: a page of the
// email it captured and the delivery log, a demo sender, and secrets kept
// between runs. Only the notifyd binary's dev command links it (with the
// test SMTP server it captures email in).
package devmode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/channels/webhook"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// SecretsFile keeps the dev admin token and token secret in the dev
// directory, so they stay the same between runs (an app you point at the dev
// daemon keeps working). It is created 0600 on first run.
const SecretsFile = "dev-secrets.json"

// Secrets are the dev admin token and recipient-token secret.
type Secrets struct {
	AdminToken  string `json:"admin_token"`
	TokenSecret string `json:"token_secret"`
}

// LoadSecrets reads the dev secrets kept in dir, or makes and keeps new
// ones.
func LoadSecrets(dir string) (Secrets, error) {
	p := filepath.Join(dir, SecretsFile)
	var s Secrets
	if b, err := os.ReadFile(p); err == nil {
		if err := json.Unmarshal(b, &s); err == nil && len(s.AdminToken) >= config.MinSecretLength &&
			len(s.TokenSecret) >= config.MinSecretLength && s.AdminToken != s.TokenSecret {
			return s, nil
		}
	}
	// Kept secrets shorter than the config allows (older versions made
	// 26-byte admin tokens) are replaced.
	s = Secrets{AdminToken: "dev-admin-" + RandomHex(16), TokenSecret: "dev-secret-" + RandomHex(16)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return s, err
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return s, fmt.Errorf("save dev secrets: %w", err)
	}
	return s, nil
}

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// demoRecipients are the profiles dev gives the demo's recipients, so that
// the first notification the README's curl sends shows an email too.
var demoRecipients = []struct{ id, name string }{{"u1", "Ada Lovelace"}, {"u2", "Grace Hopper"}, {"u3", "Linus Torvalds"}}

// SeedRecipients gives each demo recipient (u1, u2, u3) a profile with an
// email address at example.test, unless it has one already (a profile you
// changed stays as it is), and says what it did.
func SeedRecipients(ctx context.Context, c *notifyd.Client) (string, error) {
	var added []string
	for _, r := range demoRecipients {
		_, err := c.GetRecipient(ctx, r.id)
		if err == nil {
			continue
		}
		if !errors.Is(err, notifyd.ErrRecipientNotFound) {
			return "", err
		}
		if err := c.PutRecipient(ctx, r.id, notifyd.Profile{Email: r.id + "@example.test", Name: r.name}); err != nil {
			return "", fmt.Errorf("seed demo recipient %s: %w", r.id, err)
		}
		added = append(added, r.id)
	}
	if len(added) == 0 {
		return "u1, u2 and u3 keep the profiles they have", nil
	}
	return strings.Join(added, ", ") + " given profiles with addresses at example.test", nil
}

// Configure points the email channel at the capturing SMTP server whatever
// the config says (with a sender address when it has none), and gives a
// configured webhook channel without a secret a fixed dev secret. A nil
// mailbox leaves channels.email as configured.
func Configure(cfg *config.Config, mailbox *smtpcapture.Server) error {
	if cfg.Channels == nil {
		cfg.Channels = config.Channels{}
	}
	if wh, ok := cfg.Channels[webhook.Name]; ok {
		if _, set := wh.Value("secret"); !set {
			sec, err := wh.With("", map[string]any{"secret": "dev-webhook-secret"})
			if err != nil {
				return err
			}
			cfg.Channels[webhook.Name] = sec
		}
	}
	if mailbox == nil {
		return nil
	}
	// providers (email APIs, other relays) are dropped: every message goes
	// to the mailbox.
	smtp := map[string]any{"smtp.host": mailbox.Host(), "smtp.port": mailbox.Port(), "smtp.tls": "none", "providers": nil}
	if _, ok := cfg.Channels[email.Name].Value("from"); !ok {
		smtp["from"] = "notifyd dev <dev@notifyd.test>"
	}
	sec, err := cfg.Channels[email.Name].With("channels."+email.Name, smtp)
	if err != nil {
		return err
	}
	cfg.Channels[email.Name] = sec
	return nil
}

// ConfigureUnsubscribe points the email channel's one-click unsubscribe
// links at the dev server itself (base is its loopback URL, such as
// http://127.0.0.1:8080), whatever the config says, so the links in captured
// mail work on this machine. Without a channels.email section it does
// nothing.
func ConfigureUnsubscribe(cfg *config.Config, base string) error {
	sec, ok := cfg.Channels[email.Name]
	if !ok || sec.Empty() {
		return nil
	}
	sec, err := sec.With("channels."+email.Name, map[string]any{"unsubscribe_url": base})
	if err != nil {
		return err
	}
	cfg.Channels[email.Name] = sec
	return nil
}

// unsubscribeLink returns the http(s) URI of a captured message's
// List-Unsubscribe header ("" when it has none), for the dev page.
func unsubscribeLink(m smtpcapture.Message) string {
	for _, part := range strings.Split(m.HeaderValue("List-Unsubscribe"), ",") {
		u := strings.Trim(strings.TrimSpace(part), "<>")
		if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
			return u
		}
	}
	return ""
}

// ConfiguredRelay says where email goes when dev does not capture it: the
// email channel's SMTP server as the config names it, or its servers in the
// order they are tried when smtp is a list.
func ConfiguredRelay(cfg *config.Config) string {
	sec := cfg.Channels[email.Name]
	relay := func(prefix string) (string, bool) {
		host, ok := sec.Value(prefix + ".host")
		port, _ := sec.Value(prefix + ".port")
		return net.JoinHostPort(host, port), ok
	}
	var relays []string
	if r, ok := relay("smtp"); ok {
		relays = append(relays, r)
	}
	for i := 0; ; i++ {
		r, ok := relay("smtp." + strconv.Itoa(i))
		if !ok {
			break
		}
		relays = append(relays, r)
	}
	what := "channels." + email.Name + "'s server"
	if len(relays) > 1 {
		what += "s, tried in order"
	}
	if len(relays) == 0 {
		return what
	}
	return what + ", " + strings.Join(relays, ", ")
}

// Page is GET /dev/: the captured emails, newest first (none when Mailbox
// is nil: email goes to the configured server), and the delivery log.
type Page struct {
	Mailbox *smtpcapture.Server
	// Hooks are the captured webhooks and Slack messages; nil when they go
	// where the config says (-hooks config).
	Hooks *Hooks
	DB    stores.DB // set once the daemon's pool exists
}

var devTemplate = template.Must(template.New("dev").Funcs(template.FuncMap{"unsubscribe": unsubscribeLink}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>notifyd dev: captured email</title>
<style>body{font:14px system-ui,sans-serif;margin:2em;max-width:60em}article{border:1px solid #ccc;border-radius:6px;margin:1em 0;padding:1em}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em}iframe{width:100%;height:14em;border:1px solid #eee}small{color:#666}table{border-collapse:collapse}td,th{border-bottom:1px solid #eee;padding:.2em .5em;text-align:left}</style></head>
<body><p><a href="/dev/demo">inbox demo</a> · <a href="/admin/">console</a> · <a href="#mail">captured email</a> · <a href="#hooks">captured webhooks and chat</a> · <a href="#ledger">delivery log</a></p>
<h1 id="mail">Captured email ({{len .Messages}})</h1>
<p><small>Every message notifyd sent through the dev SMTP server. Reload to refresh.</small></p>
{{range .Messages}}<article><h2>{{.Subject}}</h2>
<p><small>To {{range .To}}{{.}} {{end}}· Message-ID {{.MessageID}}</small></p>
{{with unsubscribe .}}<p><small>One-click unsubscribe (List-Unsubscribe): <a class="unsubscribe" href="{{.}}" target="_blank" rel="noreferrer">{{.}}</a> — the link shows the confirmation page; its button sends the POST a mailbox provider would.</small></p>{{end}}
{{if .HTML}}<iframe sandbox srcdoc="{{.HTML}}"></iframe>{{end}}
{{if .Text}}<pre>{{.Text}}</pre>{{end}}</article>{{else}}<p>No email yet.</p>{{end}}
<h1 id="hooks">Captured webhooks and chat messages{{if .HooksOn}} ({{len .Hooks}}){{end}}</h1>
{{if .HooksOn}}<p><small>Every notifier-level webhook and Slack, Discord and Teams incoming webhook of the config points here in dev mode (a recipient's own webhook_url goes where it says). Reload to refresh.</small></p>
{{range .Hooks}}<article class="hook"><h2>{{.Channel}} · {{.Notifier}}</h2><p><small>{{.At.Format "15:04:05.000"}}{{range .Headers}} · {{index . 0}}: {{index . 1}}{{end}}</small></p><pre>{{.Body}}</pre></article>{{else}}<p>No webhook or chat message yet.</p>{{end}}
{{else}}<p><small>Not captured: notifyd dev runs with -hooks config, so they go to the URLs in the config.</small></p>{{end}}
<h1 id="ledger">Delivery log</h1>
<p><small>The 200 most recently changed rows of notify_deliveries (in_app items are in the inbox, not here).</small></p>
{{if .LedgerErr}}<p>Could not read the ledger: {{.LedgerErr}}</p>{{end}}
<table><tr><th>updated</th><th>notifier/key</th><th>recipient</th><th>channel</th><th>mode</th><th>status</th><th>attempts</th><th>last error</th></tr>
{{range .Ledger}}<tr><td>{{.UpdatedAt.Format "15:04:05.000"}}</td><td>{{.Notifier}}/{{.Key}}</td><td>{{if .Recipient}}{{.Recipient}}{{else}}(bulk){{end}}</td><td>{{.Channel}}</td><td>{{.Mode}}</td><td>{{.Status}}{{with .NextAttemptAt}} (due {{.Format "15:04:05"}}){{end}}</td><td>{{.Attempts}}</td><td>{{if .LastError}}{{.LastError}}{{end}}</td></tr>
{{else}}<tr><td colspan="8">No deliveries yet.</td></tr>{{end}}</table>
</body></html>`))

// ServeHTTP renders the page.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var msgs []smtpcapture.Message
	if p.Mailbox != nil { // nil with -smtp config: email went to the configured server
		msgs = p.Mailbox.Messages()
	}
	for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
		msgs[i], msgs[j] = msgs[j], msgs[i]
	}
	data := struct {
		Messages  []smtpcapture.Message
		Hooks     []Hook
		HooksOn   bool
		Ledger    []stores.LedgerRow
		LedgerErr error
	}{Messages: msgs, Hooks: p.Hooks.Requests(), HooksOn: p.Hooks != nil}
	if p.DB != nil {
		data.Ledger, data.LedgerErr = stores.RecentDeliveries(r.Context(), p.DB, 200)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := devTemplate.Execute(w, data); err != nil {
		slog.Default().Warn("render dev page", "err", err)
	}
}

// Sender is POST /dev/send, the demo page's "send a test notification": it
// sends a sample notification to the demo recipient through the Go client.
// Only `notifyd dev` mounts it.
type Sender struct {
	Client    *notifyd.Client // set once the daemon exists
	Config    *config.Config
	Inbox     string // the inbox channel's name
	Recipient string
}

// ServeHTTP sends the sample notification.
func (s *Sender) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Only JSON: a cross-site form cannot send it without a CORS preflight,
	// which notifyd does not grant.
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		wire.WriteError(w, r, &wire.Error{Status: http.StatusUnsupportedMediaType, Code: wire.CodeBadRequest,
			Message: "send Content-Type: application/json"})
		return
	}
	// comment.created when configured, else the first notifier with an inbox item.
	name := ""
	if n := s.Config.Notifiers["comment.created"]; n != nil && channels.Uses(n, s.Inbox) {
		name = "comment.created"
	} else {
		names := make([]string, 0, len(s.Config.Notifiers))
		for k, n := range s.Config.Notifiers {
			if channels.Uses(n, s.Inbox) {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		if len(names) > 0 {
			name = names[0]
		}
	}
	if name == "" {
		wire.WriteError(w, r, &wire.Error{Status: http.StatusUnprocessableEntity, Code: "unknown_notifier",
			Message: "no notifier in the config has an inbox item (" + s.Inbox + ")"})
		return
	}
	params := map[string]any{}
	for k, v := range s.Config.Notifiers[name].Example {
		params[k] = v
	}
	res, err := s.Client.Send(r.Context(), notifyd.Notification{Notifier: name, Key: "dev-" + RandomHex(6), Actor: "u1",
		Recipients: []notifyd.Recipient{{ID: s.Recipient}}, Params: params})
	if err != nil {
		wire.WriteError(w, r, &wire.Error{Status: http.StatusUnprocessableEntity, Code: "send_failed", Message: err.Error(), Err: err})
		return
	}
	wire.WriteJSON(w, http.StatusAccepted, map[string]any{"id": res.ID, "notifier": name, "recipient": s.Recipient})
}
