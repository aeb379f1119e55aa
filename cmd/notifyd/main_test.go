package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/webhook"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := (&Main{Stdout: &out, Stderr: &errb}).Run(context.Background(), args)
	return out.String(), errb.String(), err
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheck(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "check", "-dev", "-config", "../../config.example.yaml")
	if err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("check -dev of the example config: %q, %v", out, err)
	}
	bad := writeConfig(t, "http:\n  listen: 127.0.0.1:1\nnotifiers:\n  x:\n    channels:\n      email: {default: weekly, subject: s, text: t}\n")
	_, _, err = run(t, "check", "-config", bad)
	if err == nil || !strings.Contains(err.Error(), "config.yaml:6: notifiers.x.channels.email.default") {
		t.Fatalf("check of a bad config = %v; want the file, line and key path", err)
	}
}

// With DKIM configured, check says which DNS record publishes the key.
func TestCheckPrintsTheDKIMRecord(t *testing.T) {
	t.Parallel()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "dkim.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, `database: {url: "postgres://notifyd@db.invalid/app"}
channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: 127.0.0.1, port: 2525, tls: none}
    dkim: {domain: acme.test, selector: s2026, private_key_file: `+keyFile+`}
`)
	out, _, err := run(t, "check", "-config", cfg)
	want := "publish this DNS TXT record at s2026._domainkey.acme.test: v=DKIM1; k=ed25519; p=" +
		base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	if err != nil || !strings.Contains(out, want) {
		t.Fatalf("check = %q, %v; want a line containing %q", out, err, want)
	}
}

func TestTokenPrintsOnlyTheToken(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "http: {token_secret: s3cret-0123456789abcdef0123456789abcdef}\n")
	out, _, err := run(t, "token", "-config", cfg, "-recipient", "u2", "-ttl", "5m")
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSuffix(out, "\n")
	if strings.ContainsAny(tok, " \n") {
		t.Fatalf("stdout = %q: want the token alone", out)
	}
	if id, err := notifyd.ParseRecipientToken("s3cret-0123456789abcdef0123456789abcdef", tok); err != nil || id != "u2" {
		t.Fatalf("token parses to %q, %v", id, err)
	}
	if _, _, err := run(t, "token", "-config", cfg); err == nil {
		t.Fatal("token without -recipient succeeded")
	}
	// Over http.max_token_ttl (24h by default) the daemon would refuse it.
	if out, _, err := run(t, "token", "-config", cfg, "-recipient", "u2", "-ttl", "25h"); err == nil || !strings.Contains(err.Error(), "http.max_token_ttl") || out != "" {
		t.Fatalf("token -ttl 25h = %q, %v; want a refusal naming http.max_token_ttl", out, err)
	}
	if _, _, err := run(t, "token", "-config", cfg, "-recipient", "u2", "-ttl", "24h"); err != nil {
		t.Fatalf("token -ttl 24h: %v", err)
	}
}

// notifyd webhook-secret prints the secret a destination verifies its
// webhooks with: derived per notifier and per recipient, never the channel
// secret itself.
func TestWebhookSecretCommand(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	cfg := writeConfig(t, "channels: {webhook: {secret: "+secret+"}}\nnotifiers:\n  build.failed:\n    channels:\n      webhook: {url: \"https://ci.example.test/hooks\"}\n")
	for _, tc := range []struct {
		flag, name string
		derive     func(string, string) (string, error)
	}{{"-notifier", "build.failed", webhook.NotifierSecret}, {"-recipient", "u2", webhook.RecipientSecret}} {
		out, _, err := run(t, "webhook-secret", "-config", cfg, tc.flag, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := tc.derive(secret, tc.name)
		if got := strings.TrimSuffix(out, "\n"); got != want || got == secret {
			t.Fatalf("webhook-secret %s %s = %q, want %q", tc.flag, tc.name, got, want)
		}
	}
	if _, _, err := run(t, "webhook-secret", "-config", cfg, "-notifier", "nope"); err == nil {
		t.Fatal("webhook-secret of an unknown notifier succeeded")
	}
	if _, _, err := run(t, "webhook-secret", "-config", cfg); err == nil {
		t.Fatal("webhook-secret without -notifier or -recipient succeeded")
	}
}

func TestVersionAndUnknownCommand(t *testing.T) {
	t.Parallel()
	if out, _, err := run(t, "version"); err != nil || !strings.HasPrefix(out, "notifyd ") {
		t.Fatalf("version = %q, %v", out, err)
	}
	if _, _, err := run(t, "frobnicate"); err == nil || !strings.Contains(err.Error(), `unknown command "frobnicate"`) {
		t.Fatalf("unknown command = %v", err)
	}
}

func TestMigrateSendDeliveries(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	cfg := writeConfig(t, `
database: {url: "`+url+`"}
notifiers:
  hello:
    params: {type: object, required: [name], properties: {name: {type: string}}}
    channels:
      in_app: {title: "Hello {{.name}}"}
`)
	if out, _, err := run(t, "migrate", "-config", cfg); err != nil || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate = %q, %v", out, err)
	}
	out, _, err := run(t, "send", "-config", cfg, "-notifier", "hello", "-key", "k1", "-to", "u1,u2:author", "-params", `{"name":"Ada"}`)
	if err != nil || !strings.Contains(out, "duplicate=false") {
		t.Fatalf("send = %q, %v", out, err)
	}
	id := strings.Fields(out)[0]
	if _, _, err := run(t, "send", "-config", cfg, "-notifier", "hello", "-key", "k2", "-to", "u1", "-params", `{"name":7}`); err == nil || !strings.Contains(err.Error(), "/name") {
		t.Fatalf("send with bad params = %v; want the JSON pointer", err)
	}
	out, _, err = run(t, "deliveries", "-config", cfg, "-notification", id)
	if err != nil || !strings.Contains(out, "status=pending") || !strings.Contains(out, "RECIPIENT") {
		t.Fatalf("deliveries = %q, %v", out, err)
	}
	if _, _, err := run(t, "deliveries", "-config", cfg, "-notifier", "hello", "-key", "nope"); err == nil {
		t.Fatal("deliveries of an unknown notification succeeded")
	}

	// retry re-drives expired deliveries (say, after an SMTP outage) with new send jobs.
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(context.Background(), `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, last_error)
		VALUES ('01900000-0000-7000-8000-0000000000e1', $1, 'hello', 'k1', 'u1', 'email', 'immediate', 'expired', 'smtp down'),
		       ('01900000-0000-7000-8000-0000000000e2', $1, 'hello', 'k1', 'u2', 'email', 'immediate', 'sent', NULL)`, id); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "retry", "-config", cfg, "-status", "expired,failed", "-since", "1h")
	if err != nil || out != "re-drove 1 deliveries\n" {
		t.Fatalf("retry = %q, %v", out, err)
	}
	var status string
	var jobs int
	if err := db.QueryRow(context.Background(), `SELECT status, (SELECT count(*) FROM river_job WHERE kind = 'notify.send' AND position(uuid_send('01900000-0000-7000-8000-0000000000e1') IN decode(args->>'ids', 'base64')) > 0) FROM notify_deliveries WHERE id = '01900000-0000-7000-8000-0000000000e1'`).Scan(&status, &jobs); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || jobs != 1 {
		t.Fatalf("after retry: status %s, send jobs %d", status, jobs)
	}
	if _, _, err := run(t, "retry", "-config", cfg, "-status", "sent"); err == nil || !strings.Contains(err.Error(), "cannot be re-driven") {
		t.Fatalf("retry -status sent = %v", err)
	}
}

func TestPreview(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `notifiers:
  comment.created:
    example: {post_title: Hello, author_name: Ada}
    channels:
      in_app: {title: "{{.author_name}} commented on {{.post_title}}", url: "/posts/{{.post_title}}"}
      email:
        subject: "New comment on {{.post_title}}"
        text: "Hi {{recipient.Name}}: {{.author_name}} wrote"
        html: "<p>{{.author_name}}</p>"
        locales:
          fr: {subject: "Nouveau commentaire sur {{.post_title}}", text: "Bonjour {{recipient.Name}}"}
channels:
  email: {from: "Acme <n@acme.test>", smtp: {host: 127.0.0.1, port: 1025}}
`)
	out, _, err := run(t, "preview", "-config", cfg, "-notifier", "comment.created", "-channel", "email")
	want := "subject:\nNew comment on Hello\n\ntext:\nHi Ada Lovelace: Ada wrote\n\nhtml:\n<p>Ada</p>\n\n"
	if err != nil || out != want {
		t.Fatalf("preview email = %q, %v\nwant %q", out, err, want)
	}
	out, _, err = run(t, "preview", "-config", cfg, "-notifier", "comment.created", "-channel", "email", "-locale", "fr-CA",
		"-params", `{"post_title":"<b>X</b>","author_name":"Bo"}`)
	if err != nil || !strings.HasPrefix(out, "subject:\nNouveau commentaire sur <b>X</b>\n\ntext:\nBonjour Ada Lovelace\n") {
		t.Fatalf("preview email in fr with params = %q, %v", out, err)
	}
	out, _, err = run(t, "preview", "-config", cfg, "-notifier", "comment.created", "-channel", "in_app")
	if err != nil || out != "title:\nAda commented on Hello\n\nbody:\n\n\nurl:\n/posts/Hello\n\n" {
		t.Fatalf("preview in_app = %q, %v", out, err)
	}
	for _, tc := range []struct{ args, want string }{
		{"-notifier nope -channel email", `unknown notifier "nope"`},
		{"-notifier comment.created -channel slack", `has no "slack" channel (it uses [email in_app])`},
		{"-notifier comment.created -channel email -params [1]", "-params: want a JSON object"},
		{"-notifier comment.created", "-notifier and -channel are required"},
	} {
		_, _, err := run(t, append([]string{"preview", "-config", cfg}, strings.Fields(tc.args)...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("preview %s = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// preview -tenant renders in the tenant's brand, read from the database; an
// unknown tenant is an error naming it.
func TestPreviewTenant(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDBURL(t)
	cfg := writeConfig(t, `
database: {url: "`+url+`"}
notifiers:
  invoice.paid:
    example: {n: "7"}
    channels:
      in_app: {title: "{{.Tenant.Name}}: invoice {{.n}} paid", url: "{{.Tenant.Branding.LogoURL}}"}
`)
	if _, err := pool.Exec(context.Background(), `INSERT INTO notify_tenants (id, name, branding)
		VALUES ('acme', 'Acme', '{"logo_url": "https://acme.test/logo.png"}')`); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "preview", "-config", cfg, "-notifier", "invoice.paid", "-channel", "in_app", "-tenant", "acme")
	if err != nil || out != "title:\nAcme: invoice 7 paid\n\nbody:\n\n\nurl:\nhttps://acme.test/logo.png\n\n" {
		t.Fatalf("preview -tenant acme = %q, %v", out, err)
	}
	out, _, err = run(t, "preview", "-config", cfg, "-notifier", "invoice.paid", "-channel", "in_app")
	if err != nil || !strings.HasPrefix(out, "title:\n: invoice 7 paid\n") {
		t.Fatalf("preview without a tenant = %q, %v", out, err)
	}
	if _, _, err := run(t, "preview", "-config", cfg, "-notifier", "invoice.paid", "-channel", "in_app", "-tenant", "nobody"); err == nil ||
		!strings.Contains(err.Error(), `no tenant "nobody"`) {
		t.Fatalf("preview -tenant nobody = %v", err)
	}
}

// TestOperatorTokenCommands: `notifyd token create` prints the token alone
// (stored as its SHA-256 only), `list` shows it without the token, `revoke`
// stops it.
func TestOperatorTokenCommands(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	cfg := writeConfig(t, `database: {url: "`+url+`"}`+"\n")
	if _, _, err := run(t, "migrate", "-config", cfg); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "token", "create", "-config", cfg, "-role", "root"); err == nil || !strings.Contains(err.Error(), "viewer, operator, admin") {
		t.Fatalf("create -role root = %v", err)
	}
	if _, _, err := run(t, "token", "create", "-config", cfg, "-role", "viewer", "-tenants", "nope"); err == nil || !strings.Contains(err.Error(), "no tenant nope") {
		t.Fatalf("create -tenants nope = %v", err)
	}
	out, _, err := run(t, "token", "create", "-config", cfg, "-role", "operator", "-name", "deploy-bot", "-ttl", "24h")
	tok := strings.TrimSpace(out)
	if err != nil || !strings.HasPrefix(tok, "nto_") || strings.Count(out, "\n") != 1 {
		t.Fatalf("create = %q, %v", out, err)
	}
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var id, createdBy string
	if err := db.QueryRow(context.Background(), `SELECT id::text, created_by FROM notify_operator_tokens WHERE hash = sha256($1::bytea) AND role = 'operator' AND expires_at > now() + interval '23 hours'`,
		[]byte(tok)).Scan(&id, &createdBy); err != nil || !strings.HasPrefix(createdBy, "cli") {
		t.Fatalf("stored token: %v (created by %q)", err, createdBy)
	}
	out, _, err = run(t, "token", "list", "-config", cfg)
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "deploy-bot") || strings.Contains(out, tok) {
		t.Fatalf("list = %q, %v", out, err)
	}
	out, _, err = run(t, "token", "revoke", "-config", cfg, id)
	if err != nil || !strings.HasPrefix(out, "revoked "+id) {
		t.Fatalf("revoke = %q, %v", out, err)
	}
	if _, _, err := run(t, "token", "revoke", "-config", cfg, "0190b8a4-0000-7000-8000-000000000000"); err == nil {
		t.Fatal("revoking an unknown token succeeded")
	}
	// Each change is audited as the CLI's, the failed ones not at all.
	var audited int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM notify_audit WHERE actor_kind = 'cli' AND object = $1
		AND action IN ('operator_token.create', 'operator_token.revoke')`, id).Scan(&audited); err != nil || audited != 2 {
		t.Fatalf("audit rows of the token: %d (%v), want 2", audited, err)
	}
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM notify_audit`).Scan(&audited); err != nil || audited != 2 {
		t.Fatalf("audit rows: %d (%v), want 2", audited, err)
	}
}
