package builtin_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/channels/slack"
	"github.com/notifyd/notifyd/channels/webhook"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// registered is how the registry lists the built-in channels in its errors.
const registered = "in_app, email, webhook, slack, sms, web_push, fcm, apns, discord, teams, telegram, whatsapp"

// parse parses src as "test.yaml" through the whole pipeline: config, then
// every built-in channel's check of its sections.
func parse(src string) (*config.Config, error) {
	return config.ParseWith("test.yaml", []byte(src), builtin.MustRegistry().Check)
}

func mustParse(t *testing.T, src string) *config.Config {
	t.Helper()
	c, err := parse(src)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return c
}

// parseErrors parses src and returns its errors formatted one per line.
func parseErrors(t *testing.T, src string) []string {
	t.Helper()
	_, err := parse(src)
	if err == nil {
		return nil
	}
	var errs *config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, want *config.Errors: %v", err, err)
	}
	var out []string
	for _, e := range errs.Errors {
		if e.File != "test.yaml" {
			t.Errorf("error %q: File = %q, want test.yaml", e, e.File)
		}
		out = append(out, e.Error())
	}
	return out
}

func TestErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		src  string
		want string // the only error, without "test.yaml:"
	}{
		{"unknown nested key", "channels:\n  email:\n    from: a@b.test\n    smtp: {host: h, port: 25, tsl: none}\n",
			`4: channels.email.smtp.tsl: unknown key (want host, port, username, password or tls)`},
		{"wrong type bool", "channels:\n  webhook:\n    allow_private: maybe\n",
			`3: channels.webhook.allow_private: want true or false, got "maybe"`},
		{"unquoted template", "notifiers:\n  n:\n    channels:\n      in_app:\n        title: {{.x}}\n",
			`5: notifiers.n.channels.in_app.title: want a string, got a mapping (quote a template that starts with {{)`},
		{"bad tls", "channels:\n  email:\n    from: a@b.test\n    smtp:\n      host: h\n      port: 25\n      tls: ssl\n",
			`7: channels.email.smtp.tls: unknown tls mode "ssl" (want none, starttls or tls)`},
		{"bad from", "channels:\n  email:\n    from: not an address\n    smtp: {host: h, port: 25}\n",
			`3: channels.email.from: invalid address "not an address": mail: no angle-addr`},
		{"smtp host missing", "channels:\n  email:\n    from: a@b.test\n    smtp:\n      port: 25\n",
			`4: channels.email.smtp.host: must be set`},
		{"bad whsec", "channels:\n  webhook:\n    secret: whsec_!!!\n",
			`3: channels.webhook.secret: a whsec_ secret must be followed by base64`},
		{"unknown mode", "notifiers:\n  comment.created:\n    channels:\n      email:\n        subject: s\n        text: t\n        default: weekly\n",
			`7: notifiers.comment.created.channels.email.default: unknown mode "weekly" (want immediate, digest or off)`},
		{"digest mode for in_app", "notifiers:\n  n:\n    channels:\n      in_app: {title: t, default: digest}\n",
			`4: notifiers.n.channels.in_app.default: unknown mode "digest" (want immediate or off)`},
		{"slack without url", "notifiers:\n  n:\n    channels:\n      slack:\n        text: hi\n",
			`4: notifiers.n.channels.slack.webhook_url: must be set (a Slack incoming-webhook URL)`},
		{"slack url not http", "notifiers:\n  n:\n    channels:\n      slack:\n        webhook_url: ftp://x.test/\n        text: hi\n",
			`5: notifiers.n.channels.slack.webhook_url: invalid URL "ftp://x.test/" (want an absolute http or https URL)`},
		{"webhook url not http", "channels:\n  webhook: {secret: s}\nnotifiers:\n  n:\n    channels:\n      webhook: {url: /relative}\n",
			`6: notifiers.n.channels.webhook.url: invalid URL "/relative" (want an absolute http or https URL)`},
		{"in_app without title", "notifiers:\n  n:\n    channels:\n      in_app: {body: b}\n",
			`4: notifiers.n.channels.in_app.title: must be set (every inbox item has a title)`},
		{"email without subject", "notifiers:\n  n:\n    channels:\n      email:\n        text: t\n",
			`4: notifiers.n.channels.email.subject: must be set`},
		{"template does not parse", "notifiers:\n  n:\n    channels:\n      in_app:\n        title: \"{{.x\"\n",
			`5: notifiers.n.channels.in_app.title: invalid template: line 1: unclosed action`},
		{"template calls unknown function", "notifiers:\n  n:\n    channels:\n      in_app:\n        title: t\n        body: \"{{shout .x}}\"\n",
			`6: notifiers.n.channels.in_app.body: invalid template: line 1: function "shout" not defined`},
		{"template fails on generated example", "notifiers:\n  n:\n    params:\n      type: object\n      properties: {title: {type: string}}\n    channels:\n      in_app:\n        title: \"{{.title.first}}\"\n",
			`8: notifiers.n.channels.in_app.title: template does not render with the example params: line 1:8: at <.title.first>: can't evaluate field first in type interface {}`},
		{"template fails on given example", "notifiers:\n  n:\n    example: {count: 3}\n    channels:\n      email:\n        subject: '{{index .count 0}}'\n        text: t\n",
			`6: notifiers.n.channels.email.subject: template does not render with the example params: line 1:2: at <index .count 0>: error calling index: can't index item of type float64`},
		{"locale variant fails", "notifiers:\n  n:\n    example: {n: 1}\n    channels:\n      email:\n        subject: s\n        text: t\n        locales:\n          fr:\n            subject: '{{len .n}}'\n            text: t\n",
			`10: notifiers.n.channels.email.locales.fr.subject: template does not render with the example params: line 1:2: at <len .n>: error calling len: len of type float64`},
		{"locale variant with default", "notifiers:\n  n:\n    channels:\n      email:\n        subject: s\n        text: t\n        locales:\n          fr: {subject: s, text: t, default: off}\n",
			`8: notifiers.n.channels.email.locales.fr.default: a locale variant has no mode of its own (set default on the email channel)`},
		{"bad locale", "notifiers:\n  n:\n    channels:\n      email:\n        subject: s\n        text: t\n        locales:\n          french!: {subject: s, text: t}\n",
			`8: notifiers.n.channels.email.locales.french!: invalid locale "french!" (want a language tag such as fr or pt-BR)`},

		{"in_app has no settings", "channels:\n  in_app: {page_size: 20}\n",
			`2: channels.in_app: the in_app channel has no settings (its templates are per notifier)`},

		// Channels the registry does not know.
		{"unknown channel", "channels:\n  fax: {from: x}\n",
			`2: channels.fax: unknown channel "fax" (registered: ` + registered + `)`},
		{"unknown notifier channel", "notifiers:\n  n:\n    channels:\n      in_app: {title: t}\n      fax: {text: x}\n",
			`5: notifiers.n.channels.fax: unknown channel "fax" (registered: ` + registered + `)`},
		{"notifier webhook url without channels.webhook", "notifiers:\n  n:\n    channels:\n      webhook: {url: 'https://hooks.acme.test/x'}\n",
			`4: notifiers.n.channels.webhook.url: a notifier-level webhook needs channels.webhook (its secret signs the payload)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := parseErrors(t, tc.src)
			if len(got) != 1 {
				t.Fatalf("got %d errors, want 1:\n%s", len(got), strings.Join(got, "\n"))
			}
			if want := "test.yaml:" + tc.want; got[0] != want {
				t.Errorf("got  %s\nwant %s", got[0], want)
			}
		})
	}
}

func TestErrorsAllReportedInLineOrder(t *testing.T) {
	t.Parallel()

	src := `queues:
  send: 0
reasons: [author, author]
channels:
  emial: {}
digest:
  schedule: "61 8 * * *"
notifiers:
  comment.created:
    channels:
      email:
        default: weekly
        subject: "{{.post_title"
        text: t
  other:
    max_recipients: -1
`
	got := parseErrors(t, src)
	want := []string{
		`test.yaml:2: queues.send: must be at least 1, got 0`,
		`test.yaml:3: reasons[1]: duplicate reason "author" (also reasons[0])`,
		`test.yaml:5: channels.emial: unknown channel "emial" (registered: ` + registered + `)`,
		`test.yaml:7: digest.schedule: invalid cron spec "61 8 * * *": end of range (61) above maximum (59): 61 (want 5 fields: minute hour day-of-month month day-of-week)`,
		`test.yaml:12: notifiers.comment.created.channels.email.default: unknown mode "weekly" (want immediate, digest or off)`,
		`test.yaml:13: notifiers.comment.created.channels.email.subject: invalid template: line 1: unclosed action`,
		`test.yaml:16: notifiers.other.max_recipients: must be at least 1, got -1`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	_, err := parse(src)
	if n := strings.Count(err.Error(), "\n"); n != len(want)-1 {
		t.Errorf("Error() has %d lines, want %d", n+1, len(want))
	}
	var one *config.Error
	if !errors.As(err, &one) || one.Line != 2 || one.Path != "queues.send" {
		t.Errorf("errors.As(*Error) = %+v, want the first error", one)
	}
}

// TestOpenReportsWhatCheckReports: Registry.Open on a config parsed without
// the registry's check reports the channels' problems as *config.Errors with
// their lines, as `notifyd check` does.
func TestOpenReportsWhatCheckReports(t *testing.T) {
	t.Parallel()

	c, err := config.Parse("test.yaml", []byte("channels:\n  emial: {}\nnotifiers:\n  n:\n    channels:\n      in_app: {body: b}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := builtin.MustRegistry().Open(c, nil, nil)
	if err == nil {
		set.Close()
		t.Fatal("Open succeeded")
	}
	var errs *config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Open = %T %v, want *config.Errors", err, err)
	}
	want := "test.yaml:2: channels.emial: unknown channel \"emial\" (registered: " + registered + ")\n" +
		"test.yaml:6: notifiers.n.channels.in_app.title: must be set (every inbox item has a title)"
	if errs.Error() != want {
		t.Errorf("got:\n%s\nwant:\n%s", errs.Error(), want)
	}
}

func TestChannelAndNotifierDefaults(t *testing.T) {
	t.Parallel()

	src := `
channels:
  email: {from: a@b.test, smtp: {host: h, port: 25}}
  webhook: {secret: s}
  slack: {}
notifiers:
  bare:
  n:
    channels:
      in_app: {title: t}
      email: {subject: s, text: x}
      webhook: {}
`
	c := mustParse(t, src)
	reg := builtin.MustRegistry()
	n := c.Notifiers["n"]

	// Decode the channels' sections as the channels do: the defaults are
	// filled in before the file's keys.
	p := c.NewProblems()
	var ec email.Config
	var wc webhook.Config
	var sc slack.Config
	p.Decode(c.Channels["email"], &ec)
	p.Decode(c.Channels["webhook"], &wc)
	p.Decode(c.Channels["slack"], &sc)
	var absent slack.Config
	p.Decode(nil, &absent)
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}

	checks := []struct {
		name      string
		got, want any
	}{
		{"email.timeout", ec.Timeout.D(), 30 * time.Second},
		{"email.smtp.tls", ec.SMTP.TLS, "none"},
		{"email.smtp.port", ec.SMTP.Port, 25},
		{"webhook.timeout", wc.Timeout.D(), 10 * time.Second},
		{"slack.timeout", sc.Timeout.D(), 10 * time.Second},
		{"slack.timeout without a section", absent.Timeout.D(), 10 * time.Second},
		{"bare.name", c.Notifiers["bare"].Name, "bare"},
		{"bare.max_recipients", c.Notifiers["bare"].MaxRecipients, 10000},
		{"bare.schema", c.Notifiers["bare"].Schema == nil, true},
		{"n.in_app.default", reg.DefaultMode(n, "in_app"), notifytype.ModeImmediate},
		{"n.email.default", reg.DefaultMode(n, "email"), notifytype.ModeImmediate},
		{"n.webhook.default", reg.DefaultMode(n, "webhook"), notifytype.ModeOff},
		{"n.slack", channels.Uses(n, "slack"), false},
		{"n.slack.default", reg.DefaultMode(n, "slack"), notifytype.ModeOff},
		{"bare.in_app.default", reg.DefaultMode(c.Notifiers["bare"], "in_app"), notifytype.ModeOff},
	}
	for _, tc := range checks {
		if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}

	// And the channels open on it, each where its plugin says.
	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if _, ok := set.Channels["email"].(*email.Sender); !ok {
		t.Errorf("email not opened: %v", set.Channels)
	}
	if _, ok := set.Digests["email"]; !ok {
		t.Errorf("email does not digest: %v", set.Digests)
	}
	if _, ok := set.Channels["webhook"].(*webhook.Sender); !ok {
		t.Errorf("webhook not opened per recipient: %v", set.Channels)
	}
	if _, ok := set.Bulk["webhook"]; !ok {
		t.Errorf("webhook not opened as bulk: %v", set.Bulk)
	}
	if _, ok := set.Bulk["slack"].(*slack.Sender); !ok {
		t.Errorf("slack not opened: %v", set.Bulk)
	}
	if set.Inbox == nil || set.Channels["in_app"] == nil {
		t.Errorf("in_app not opened: inbox %v, channels %v", set.Inbox, set.Channels)
	}
	if err := set.Channels["email"].Addressable("n", channels.Recipient{ID: "u", Email: "u@b.test"}); err != nil {
		t.Errorf("email.Addressable(n) = %v", err)
	}
	if err := set.Channels["email"].Addressable("bare", channels.Recipient{ID: "u", Email: "u@b.test"}); err == nil {
		t.Error("email.Addressable(bare) = nil: bare has no email templates")
	}
}

// TestUnconfiguredChannels: without their channels.<name> sections email and
// webhook are not opened (their deliveries are `unavailable`), while the
// inbox and slack need none.
func TestUnconfiguredChannels(t *testing.T) {
	t.Parallel()

	c := mustParse(t, "notifiers:\n  n:\n    channels:\n      in_app: {title: t}\n      email: {subject: s, text: x}\n      webhook: {default: immediate}\n")
	set, err := builtin.MustRegistry().Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for _, name := range []string{"email", "webhook"} {
		if ch, ok := set.Channels[name]; ok {
			t.Errorf("%s opened without channels.%s: %T", name, name, ch)
		}
	}
	if _, ok := set.Bulk["webhook"]; ok {
		t.Error("bulk webhook opened without channels.webhook")
	}
	if len(set.Digests) != 0 {
		t.Errorf("digests = %v, want none without channels.email", set.Digests)
	}
	if set.Inbox == nil {
		t.Error("no inbox")
	}
	if _, ok := set.Bulk["slack"]; !ok {
		t.Error("slack not opened without a channels.slack section")
	}
}

// TestWebhookSecretIsNeededToRun: a secret left to the environment may be
// missing when the file is only checked, not when the channel opens to run.
func TestWebhookSecretIsNeededToRun(t *testing.T) {
	t.Parallel()

	c := mustParse(t, "channels:\n  webhook:\n    timeout: 3s\n")
	set, err := builtin.MustRegistry().Open(c, nil, nil)
	want := "test.yaml:2: channels.webhook.secret: must be set: an unsigned webhook cannot be trusted by its receiver"
	if err == nil || err.Error() != want {
		if set != nil {
			set.Close()
		}
		t.Errorf("Open = %v, want %s", err, want)
	}
}

// TestExampleConfigChecks checks config.example.yaml the way `notifyd
// check` does: on a fresh machine, with no variable set, and with the
// variables `notifyd dev` sets, with which its channels also open.
func TestExampleConfigChecks(t *testing.T) {
	data, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"DATABASE_URL":           "postgres://notifyd@127.0.0.1:5432/notifyd",
		"NOTIFYD_ADMIN_TOKEN":    "admin-0123456789abcdef0123456789abcdef",
		"NOTIFYD_TOKEN_SECRET":   "secret-0123456789abcdef0123456789abcdef",
		"NOTIFYD_WEBHOOK_SECRET": "whsec_c2VjcmV0",
	}
	for k := range vars {
		t.Setenv(k, "") // an empty variable reads as an unset one
	}
	reg := builtin.MustRegistry()
	c, err := config.ParseWith("config.example.yaml", data, reg.Check)
	if err != nil {
		t.Fatalf("config.example.yaml does not check without variables:\n%v", err)
	}
	if set, err := reg.Open(c, nil, nil); err == nil || !strings.Contains(err.Error(), "channels.webhook.secret: must be set") {
		if set != nil {
			set.Close()
		}
		t.Errorf("Open without NOTIFYD_WEBHOOK_SECRET = %v, want the webhook secret refused", err)
	}

	for k, v := range vars {
		t.Setenv(k, v)
	}
	c, err = config.ParseWith("config.example.yaml", data, reg.Check)
	if err != nil {
		t.Fatalf("config.example.yaml does not check:\n%v", err)
	}
	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for _, name := range []string{"in_app", "email", "webhook"} {
		if set.Channels[name] == nil {
			t.Errorf("%s is not configured", name)
		}
	}
	if b := set.Bulk["slack"]; b == nil || !b.Configured("invoice.paid") || b.Configured("comment.created") {
		t.Errorf("slack: %v, want it configured for invoice.paid only", b)
	}
	if b := set.Bulk["webhook"]; b == nil || !b.Configured("invoice.paid") {
		t.Errorf("webhook: %v, want a notifier-level webhook for invoice.paid", b)
	}
	if it, err := set.Inbox.RenderInbox("comment.created", c.Notifiers["comment.created"].ExampleParams()); err != nil ||
		it.Title != "Ada commented on Hello world" {
		t.Errorf("comment.created inbox item = %+v, %v", it, err)
	}
	if m := reg.DefaultMode(c.Notifiers["task.assigned"], "email"); m != notifytype.ModeDigest {
		t.Errorf("task.assigned email default = %s, want digest", m)
	}
	var tmpl email.Templates
	p := c.NewProblems()
	p.Decode(c.Notifiers["task.assigned"].Channels["email"].Section, &tmpl)
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if fr := tmpl.For("fr-CA"); fr == &tmpl || !strings.Contains(fr.Subject, "vous") {
		t.Errorf("task.assigned has no usable fr email variant: %+v", fr)
	}
}

// TestExampleConfigCommentedChannels uncomments the sms and web_push blocks
// of config.example.yaml (the channels and comment.created's templates) and
// checks that they check and open as documented.
func TestExampleConfigCommentedChannels(t *testing.T) {
	data, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	uncommented := 0
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " ")
		indent := len(lines[i]) - len(trimmed)
		if trimmed != "# sms:" && trimmed != "# web_push:" {
			continue
		}
		prefix := strings.Repeat(" ", indent) + "# "
		for j := i; j < len(lines) && strings.HasPrefix(lines[j], prefix) && (j == i || strings.HasPrefix(lines[j], prefix+"  ")); j++ {
			lines[j] = strings.Repeat(" ", indent) + strings.TrimPrefix(lines[j], prefix)
			uncommented++
		}
	}
	if uncommented < 10 {
		t.Fatalf("uncommented %d lines: the sms and web_push blocks moved?", uncommented)
	}
	for k, v := range map[string]string{
		"DATABASE_URL":              "postgres://notifyd@127.0.0.1:5432/notifyd",
		"NOTIFYD_ADMIN_TOKEN":       "admin-0123456789abcdef0123456789abcdef",
		"NOTIFYD_TOKEN_SECRET":      "secret-0123456789abcdef0123456789abcdef",
		"NOTIFYD_WEBHOOK_SECRET":    "whsec_c2VjcmV0",
		"TWILIO_ACCOUNT_SID":        "AC0123456789abcdef0123456789abcdef",
		"TWILIO_AUTH_TOKEN":         "token",
		"NOTIFYD_VAPID_PRIVATE_KEY": "Ai9auUn6gvMwCk4Rl2kfxYI3O0005kuROvQAZ51BRQw",
	} {
		t.Setenv(k, v)
	}
	reg := builtin.MustRegistry()
	c, err := config.ParseWith("config.example.yaml", []byte(strings.Join(lines, "\n")), reg.Check)
	if err != nil {
		t.Fatalf("the uncommented sms and web_push blocks do not check:\n%v", err)
	}
	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for _, name := range []string{"sms", "web_push"} {
		ch := set.Channels[name]
		if ch == nil {
			t.Fatalf("%s is not configured", name)
		}
		if err := ch.Addressable("comment.created", channels.Recipient{ID: "u", Phone: "+14155550123"}); err != nil {
			t.Errorf("%s: comment.created: %v", name, err)
		}
	}
}
