package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// noEnv is an environment with nothing set.
func noEnv(string) (string, bool) { return "", false }

// env returns a lookup over m.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// mustParse parses src as "test.yaml" and fails the test on any error.
func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := parseWith("test.yaml", []byte(src), noEnv)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return c
}

// parseErrors parses src and returns its errors formatted one per line.
func parseErrors(t *testing.T, src string, lookup func(string) (string, bool)) []string {
	t.Helper()
	_, err := parseWith("test.yaml", []byte(src), lookup)
	if err == nil {
		return nil
	}
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, want *Errors: %v", err, err)
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

func TestExampleConfigLoads(t *testing.T) {
	t.Parallel()

	data, err := os.ReadFile("../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// No variable set, as on a fresh machine: it must still load.
	c, err := parseWith("config.example.yaml", data, noEnv)
	if err != nil {
		t.Fatalf("config.example.yaml does not load:\n%v", err)
	}
	// The channels' sections are kept for the channels to decode (the
	// built-in channels' tests open this file through the registry).
	email := c.Channels["email"]
	host, _ := email.Value("smtp.host")
	port, _ := email.Value("smtp.port")
	tls, _ := email.Value("smtp.tls")
	if host != "127.0.0.1" || port != "1025" || tls != "none" {
		t.Errorf("channels.email.smtp = %q:%q tls %q, want 127.0.0.1:1025 without TLS", host, port, tls)
	}
	if len(c.Notifiers) < 3 {
		t.Errorf("%d notifiers, want at least 3", len(c.Notifiers))
	}
	n, ok := c.Notifier("comment.created")
	if !ok {
		t.Fatal("no comment.created notifier")
	}
	if n.Name != "comment.created" || n.Schema == nil {
		t.Errorf("comment.created not compiled: %+v", n)
	}
	if title, _ := n.Channels["in_app"].Section.Value("title"); title == "" {
		t.Errorf("comment.created has no in_app title: %+v", n.Channels)
	}
	if fr, _ := c.Notifiers["task.assigned"].Channels["email"].Section.Value("locales.fr.subject"); !strings.Contains(fr, "vous") {
		t.Errorf("task.assigned has no fr email variant: subject %q", fr)
	}

	// And with the variables `notifyd dev` sets.
	c, err = parseWith("config.example.yaml", data, env(map[string]string{
		"DATABASE_URL":           "postgres://notifyd@127.0.0.1:5432/notifyd",
		"NOTIFYD_ADMIN_TOKEN":    "admin-0123456789abcdef0123456789abcdef",
		"NOTIFYD_TOKEN_SECRET":   "secret-0123456789abcdef0123456789abcdef",
		"NOTIFYD_WEBHOOK_SECRET": "whsec_c2VjcmV0",
	}))
	if err != nil {
		t.Fatalf("config.example.yaml with variables set: %v", err)
	}
	if secret, _ := c.Channels["webhook"].Value("secret"); c.HTTP.AdminToken != "admin-0123456789abcdef0123456789abcdef" || secret != "whsec_c2VjcmV0" {
		t.Errorf("variables not expanded: %+v, channels.webhook.secret %q", c.HTTP, secret)
	}
}

func TestLoadAndCheck(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("http: {listen: ':9090'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("http:\n  listen: nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	c, err := Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != good || c.HTTP.Listen != ":9090" {
		t.Errorf("Path = %q, Listen = %q", c.Path, c.HTTP.Listen)
	}
	if err := Check(good); err != nil {
		t.Errorf("Check(good) = %v", err)
	}

	err = Check(bad)
	want := bad + `:2: http.listen: invalid listen address "nope" (want host:port, such as 127.0.0.1:8080 or :8080)`
	if err == nil || err.Error() != want {
		t.Errorf("Check(bad) = %v\nwant %s", err, want)
	}

	err = Check(filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Check(missing) = %v, want a not-exist error", err)
	}
}

func TestDefault(t *testing.T) {
	t.Parallel()

	c := Default()
	checks := []struct {
		name      string
		got, want any
	}{
		{"database.schema", c.Database.Schema, "public"},
		{"http.listen", c.HTTP.Listen, "127.0.0.1:8080"},
		{"http.max_body", c.HTTP.MaxBody, int64(1 << 20)},
		{"queues", c.Queues, Queues{Fanout: 4, Send: 50, Digest: 128, Maintenance: 2, FetchCooldown: Duration(5 * time.Millisecond), FetchPollInterval: Duration(50 * time.Millisecond), FanoutChunk: 2000, SendBatch: 50, SendPerHost: 8}},
		{"reasons", strings.Join(c.Reasons, ","), "assigned,author,mentioned,subscribed,role-default"},
		{"channels", len(c.Channels), 0},
		{"retry.max_age", c.Retry.MaxAge.D(), 72 * time.Hour},
		{"retry.lease", c.Retry.Lease.D(), 5 * time.Minute},
		{"retry.sweep", c.Retry.Sweep, "CRON_TZ=UTC * * * * *"},
		{"retry.sweep parsed", c.Retry.SweepCron != nil, true},
		{"digest.schedule", c.Digest.Schedule, "0 8 * * *"},
		{"digest.sweep", c.Digest.Sweep, "CRON_TZ=UTC */5 * * * *"},
		{"digest.location", c.Digest.Location, time.UTC},
		{"digest.max_items", c.Digest.MaxItems, 50},
		{"digest.subject", c.Digest.Subject, "Your {{.Count}} new notifications"},
		{"digest.text", c.Digest.Text, "{{range .Items}}- {{.Title}}\n{{end}}{{if .More}}and {{.More}} more\n{{end}}"},
		{"digest.html", c.Digest.HTMLTmpl == nil, true},
		{"retention.inbox", c.Retention.Inbox.D(), 2160 * time.Hour},
		{"retention.deliveries", c.Retention.Deliveries.D(), 720 * time.Hour},
		{"retention.changes", c.Retention.Changes.D(), 168 * time.Hour},
		{"retention.schedule", c.Retention.Schedule, "CRON_TZ=UTC 17 3 * * *"},
		{"notifiers", c.Notifiers != nil && len(c.Notifiers) == 0, true},
	}
	for _, tc := range checks {
		if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

// TestNotifierDefaults checks the defaults config fills in itself. The
// channels' defaults (timeouts, modes) are theirs: see the built-in
// channels' tests.
func TestNotifierDefaults(t *testing.T) {
	t.Parallel()

	c := mustParse(t, `
channels:
  email: {from: a@b.test, smtp: {host: h, port: 25}}
  webhook: {}
  slack:
notifiers:
  bare:
  n:
    channels:
      in_app: {title: t}
      email: {subject: s, text: x, default: digest}
      webhook: {}
`)
	n := c.Notifiers["n"]
	_, slack := n.Channels["slack"]
	_, hasDefault := n.Channels["email"].Section.Value("default")
	subject, _ := n.Channels["email"].Section.Value("subject")
	checks := []struct {
		name      string
		got, want any
	}{
		{"channels", strings.Join(sortedKeys(c.Channels), ","), "email,slack,webhook"},
		{"email section", c.Channels["email"].Empty(), false},
		{"email section path", c.Channels["email"].Path(), "channels.email"},
		{"webhook section", c.Channels["webhook"].Empty(), true},
		{"slack section", c.Channels["slack"].Empty(), true},
		{"bare.name", c.Notifiers["bare"].Name, "bare"},
		{"bare.max_recipients", c.Notifiers["bare"].MaxRecipients, 10000},
		{"bare.schema", c.Notifiers["bare"].Schema == nil, true},
		{"bare.channels", len(c.Notifiers["bare"].Channels), 0},
		{"n.channels", strings.Join(sortedKeys(n.Channels), ","), "email,in_app,webhook"},
		// "" is the channel's own default, which the registry knows.
		{"n.in_app.default", n.Channels["in_app"].Default, ""},
		{"n.email.default", n.Channels["email"].Default, "digest"},
		{"n.webhook.default", n.Channels["webhook"].Default, ""},
		{"n.email section path", n.Channels["email"].Section.Path(), "notifiers.n.channels.email"},
		{"n.email section has no default", hasDefault, false},
		{"n.email subject", subject, "s"},
		{"n.slack", slack, false},
	}
	for _, tc := range checks {
		if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		src  string
		want string // the only error, without "test.yaml:"
	}{
		{"unknown top-level key", "databse: {}\n",
			`1: databse: unknown key (want database, http, queues, reasons, channels, retry, digest, retention, notifiers, providers, console, locales or default_locale)`},
		{"syntax error", "http:\n  listen: [\n",
			`2: invalid YAML: did not find expected node content`},
		{"duplicate key", "http:\n  listen: ':1'\n  listen: ':2'\n",
			`3: http.listen: duplicate key (first at line 2)`},
		{"wrong type int", "queues:\n  send: lots\n",
			`2: queues.send: want an integer, got "lots"`},
		{"wrong type list", "reasons: author\n",
			`1: reasons: want a list, got "author"`},
		{"wrong type mapping", "http: on\n",
			`1: http: want a mapping, got "on"`},
		{"bad duration", "retry:\n  max_age: 3 days\n",
			`2: retry.max_age: invalid duration "3 days" (want a Go duration such as 30s, 5m or 72h)`},
		{"non-positive duration", "retention:\n  inbox: 0s\n",
			`2: retention.inbox: must be a positive duration, got 0s`},
		{"bad cron", "retry:\n  sweep: every minute\n",
			`2: retry.sweep: invalid cron spec "every minute": expected exactly 5 fields, found 2: [every minute] (want 5 fields: minute hour day-of-month month day-of-week, optionally after CRON_TZ=<zone>)`},
		{"bad cron zone", "retention:\n  schedule: CRON_TZ=Mars/Base 0 3 * * *\n",
			`2: retention.schedule: invalid cron spec "CRON_TZ=Mars/Base 0 3 * * *": provided bad location Mars/Base: unknown time zone Mars/Base (want 5 fields: minute hour day-of-month month day-of-week, optionally after CRON_TZ=<zone>)`},
		{"digest schedule with zone", "digest:\n  schedule: CRON_TZ=UTC 0 8 * * *\n",
			`2: digest.schedule: must not name a time zone: it runs in each recipient's zone (digest.timezone by default)`},
		{"unknown timezone", "digest:\n  timezone: Mars/Base\n",
			`2: digest.timezone: unknown time zone "Mars/Base" (want an IANA name such as UTC or Europe/Paris)`},
		{"queue workers", "queues:\n  digest: 0\n",
			`2: queues.digest: must be at least 1, got 0`},
		{"fetch interval", "queues:\n  fetch_cooldown: 1s\n  fetch_poll_interval: 100ms\n",
			`3: queues.fetch_poll_interval: must not be shorter than queues.fetch_cooldown (1s), got 100ms`},
		{"empty reasons", "reasons: []\n",
			`1: reasons: must list at least one reason`},
		{"duplicate reason", "reasons:\n  - author\n  - author\n",
			`3: reasons[1]: duplicate reason "author" (also reasons[0])`},
		{"max_recipients", "notifiers:\n  n:\n    max_recipients: 0\n",
			`3: notifiers.n.max_recipients: must be at least 1, got 0`},
		{"empty notifier name", "notifiers:\n  \"\": {}\n",
			`2: notifiers.: a notifier name must not be empty`},
		{"slash in notifier name", "notifiers:\n  a/b: {}\n",
			`2: notifiers.a/b: invalid notifier name "a/b" (no /, spaces or control characters: it appears in URLs)`},
		{"digest template fails", "digest:\n  text: '{{.Nope}}'\n",
			`2: digest.text: template does not render with the example params: line 1:2: at <.Nope>: can't evaluate field Nope in type templates.DigestData`},
		{"html template", "digest:\n  html: '<a href=\"{{.Items}\">'\n",
			`2: digest.html: invalid template: line 1: bad character U+007D '}'`},
		{"schema does not compile", "notifiers:\n  n:\n    params:\n      type: object\n      properties:\n        x: {minLength: -1}\n",
			`6: notifiers.n.params.properties.x.minLength: invalid JSON Schema: minimum: got -1, want 0`},
		{"schema external ref", "notifiers:\n  n:\n    params: {$ref: 'https://schemas.test/x.json'}\n",
			`3: notifiers.n.params: invalid JSON Schema: `},
		{"pattern PostgreSQL cannot match exactly", "notifiers:\n  n:\n    params:\n      type: object\n      properties:\n        x: {pattern: '\\bword'}\n",
			`6: notifiers.n.params.properties.x.pattern: pattern "\\bword": word boundaries (\b, \B) have no exact PostgreSQL equivalent (notify_send checks patterns in PostgreSQL; write it another way)`},
		{"example does not match schema", "notifiers:\n  n:\n    params:\n      type: object\n      required: [a]\n    example: {b: 1}\n",
			`6: notifiers.n.example: does not match params: /a: missing required property`},
		{"example not JSON", "notifiers:\n  n:\n    example: {a: .nan}\n",
			`3: notifiers.n.example.a: cannot use ".nan" as a JSON value`},
		{"bad env syntax", "http:\n  admin_token: ${NOT CLOSED\n",
			`2: http.admin_token: unterminated ${ (write $$ for a literal $)`},
		{"bad env name", "http:\n  admin_token: ${A-B}\n",
			`2: http.admin_token: invalid variable name "A-B" in ${...} (want letters, digits and _; write $$ for a literal $)`},
		{"two documents", "http: {}\n---\nqueues: {}\n",
			`2: more than one YAML document (--- separator): a config is one document`},
		{"channel section not a mapping", "channels:\n  email: on\n",
			`2: channels.email: want a mapping, got "on"`},
		{"notifier channel section not a mapping", "notifiers:\n  n:\n    channels:\n      email: [subject]\n",
			`4: notifiers.n.channels.email: want a mapping, got a list`},
		{"notifier channel default not a string", "notifiers:\n  n:\n    channels:\n      email:\n        default: [off]\n",
			`5: notifiers.n.channels.email.default: want a string, got a list`},
		{"bad channel name", "channels:\n  E-mail: {}\n",
			`2: channels.E-mail: invalid channel name "E-mail" (want lower-case letters, digits and _)`},
		{"bad notifier channel name", "notifiers:\n  n:\n    channels:\n      Slack: {}\n",
			`4: notifiers.n.channels.Slack: invalid channel name "Slack" (want lower-case letters, digits and _)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := parseErrors(t, tc.src, noEnv)
			if len(got) != 1 {
				t.Fatalf("got %d errors, want 1:\n%s", len(got), strings.Join(got, "\n"))
			}
			want := "test.yaml:" + tc.want
			if strings.HasSuffix(tc.want, ": ") {
				if !strings.HasPrefix(got[0], want) {
					t.Errorf("got  %s\nwant %s...", got[0], want)
				}
				return
			}
			if got[0] != want {
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
	// The channels' sections are the channels' to check (an unknown channel,
	// a mode, a template): parsed without a Checker, only the core errors
	// are reported. The built-in channels' tests parse the same file with
	// the registry's Check.
	got := parseErrors(t, src, noEnv)
	want := []string{
		`test.yaml:2: queues.send: must be at least 1, got 0`,
		`test.yaml:3: reasons[1]: duplicate reason "author" (also reasons[0])`,
		`test.yaml:7: digest.schedule: invalid cron spec "61 8 * * *": end of range (61) above maximum (59): 61 (want 5 fields: minute hour day-of-month month day-of-week)`,
		`test.yaml:16: notifiers.other.max_recipients: must be at least 1, got -1`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	_, err := parseWith("test.yaml", []byte(src), noEnv)
	if n := strings.Count(err.Error(), "\n"); n != len(want)-1 {
		t.Errorf("Error() has %d lines, want %d", n+1, len(want))
	}
	var one *Error
	if !errors.As(err, &one) || one.Line != 2 || one.Path != "queues.send" {
		t.Errorf("errors.As(*Error) = %+v, want the first error", one)
	}
}

func TestEnvExpansion(t *testing.T) {
	t.Parallel()

	vars := env(map[string]string{
		"TOKEN":   "s3cr3t #not-a-comment: {x}",
		"PORT":    "2525",
		"LISTEN":  "0.0.0.0:9000",
		"HOST":    "mail.acme.test",
		"NUMERIC": "12345",
		"FLAG":    "true",
	})
	tests := []struct {
		name string
		src  string
		get  func(*Config) any
		want any
	}{
		{"set", "database: {url: '${TOKEN}'}", func(c *Config) any { return c.Database.URL }, "s3cr3t #not-a-comment: {x}"},
		{"plain scalar keeps special characters", "database:\n  url: ${TOKEN}\n", func(c *Config) any { return c.Database.URL }, "s3cr3t #not-a-comment: {x}"},
		{"unset is empty", "http: {admin_token: '${MISSING}'}", func(c *Config) any { return c.HTTP.AdminToken }, ""},
		{"unset keeps the default", "http: {listen: ${MISSING}, max_body: 10}", func(c *Config) any { return c.HTTP.Listen }, "127.0.0.1:8080"},
		{"inside text", "http: {listen: '${LISTEN}'}", func(c *Config) any { return c.HTTP.Listen }, "0.0.0.0:9000"},
		{"several", "database: {url: 'postgres://${HOST}:${PORT}/db'}", func(c *Config) any { return c.Database.URL }, "postgres://mail.acme.test:2525/db"},
		{"typed as int", "channels: {email: {from: a@b.test, smtp: {host: '${HOST}', port: ${PORT}}}}", func(c *Config) any { return decodeAs[testEmail](c, c.Channels["email"]).SMTP.Port }, 2525},
		{"typed as bool", "channels: {webhook: {allow_private: ${FLAG}}}", func(c *Config) any { return decodeAs[testWebhook](c, c.Channels["webhook"]).AllowPrivate }, true},
		{"number into string", "database: {url: ${NUMERIC}}", func(c *Config) any { return c.Database.URL }, "12345"},
		{"dollar dollar", "database: {url: 'a$$b$${TOKEN}'}", func(c *Config) any { return c.Database.URL }, "a$b${TOKEN}"},
		{"lone dollar kept", "database: {url: 'price $5 {{$x}}'}", func(c *Config) any { return c.Database.URL }, "price $5 {{$x}}"},
		{"template variables kept", "digest: {subject: '{{$.Count}} new'}", func(c *Config) any { return c.Digest.Subject }, "{{$.Count}} new"},
		{"keys expanded", "notifiers: {'n${PORT}': {}}", func(c *Config) any { _, ok := c.Notifiers["n2525"]; return ok }, true},
		{"flow mapping with a secret", "channels:\n  webhook: {secret: ${TOKEN}, timeout: 3s}\n", func(c *Config) any { v, _ := c.Channels["webhook"].Value("secret"); return v }, "s3cr3t #not-a-comment: {x}"},
		{"flow mapping unset", "channels:\n  webhook: {secret: ${MISSING}, timeout: 3s}\n", func(c *Config) any { return decodeAs[testWebhook](c, c.Channels["webhook"]).Timeout.D() }, 3 * time.Second},
		{"flow mapping unset keeps the default", "channels:\n  webhook: {secret: ${MISSING}, timeout: 3s}\n", func(c *Config) any { return decodeAs[testWebhook](c, c.Channels["webhook"]).Secret }, "default"},
		{"into a notifier's section", "notifiers: {n: {channels: {email: {subject: '${HOST}', default: '${FLAG}'}}}}", func(c *Config) any {
			v, _ := c.Notifiers["n"].Channels["email"].Section.Value("subject")
			return v + " " + c.Notifiers["n"].Channels["email"].Default
		}, "mail.acme.test true"},
		{"marker-like text is kept", "database: {url: 'xNOTIFYDENV0x'}", func(c *Config) any { return c.Database.URL }, "xNOTIFYDENV0x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseWith("test.yaml", []byte(tc.src), vars)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.get(c); got != tc.want {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

// testEmail and testWebhook stand for a channel's config types: a channel
// decodes its section with Problems.Decode.
type testEmail struct {
	From string `yaml:"from"`
	SMTP struct {
		Host string `yaml:"host"`
		Port int    `yaml:"port"`
	} `yaml:"smtp"`
}

type testWebhook struct {
	Secret       string   `yaml:"secret"`
	Timeout      Duration `yaml:"timeout"`
	AllowPrivate bool     `yaml:"allow_private"`
}

func (w *testWebhook) SetDefaults() { w.Secret = "default" }

// decodeAs decodes s into a T as a channel would; on a problem it returns
// the zero T, which no test wants.
func decodeAs[T any](c *Config, s *Section) T {
	var v T
	if !c.NewProblems().Decode(s, &v) {
		var zero T
		return zero
	}
	return v
}

func TestEnvExpansionErrorsKeepLines(t *testing.T) {
	t.Parallel()

	// A multi-line value does not shift the lines of later errors.
	vars := env(map[string]string{"MULTI": "a\nb\nc\nd"})
	// (database.url carries the value: http.admin_token would refuse it as short.)
	got := parseErrors(t, "database:\n  url: ${MULTI}\nhttp:\n  listen: nope\n", vars)
	want := `test.yaml:4: http.listen: invalid listen address "nope" (want host:port, such as 127.0.0.1:8080 or :8080)`
	if len(got) != 1 || got[0] != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestMergeKeysAndAliases(t *testing.T) {
	t.Parallel()

	c := mustParse(t, `
x-email: &email
  default: digest
  subject: "Hi {{.name}}"
  text: body
notifiers:
  a:
    channels:
      email: *email
  b:
    channels:
      email:
        <<: *email
        default: off
`)
	a := c.Notifiers["a"].Channels["email"]
	if a.Default != "digest" {
		t.Errorf("a email default = %q, want digest", a.Default)
	}
	if subject, _ := a.Section.Value("subject"); subject != "Hi {{.name}}" {
		t.Errorf("a email subject = %q, want the aliased one", subject)
	}
	b := c.Notifiers["b"].Channels["email"]
	subject, _ := b.Section.Value("subject")
	text, _ := b.Section.Value("text")
	if b.Default != "off" || subject != "Hi {{.name}}" || text != "body" {
		t.Errorf("b email = %q %q %q, want off and the merged subject and text", b.Default, subject, text)
	}
}

// NOTIFYD_LISTEN replaces http.listen, whatever the file says; unset or
// empty, the file's (or the default) stands.
func TestListenEnvReplacesHTTPListen(t *testing.T) {
	t.Parallel()
	src := "http: {listen: 127.0.0.1:8080}\n"
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "127.0.0.1:8080"},
		{map[string]string{ListenEnv: ""}, "127.0.0.1:8080"},
		{map[string]string{ListenEnv: "127.0.0.1:9090"}, "127.0.0.1:9090"},
	} {
		c, err := parseWith("test.yaml", []byte(src), func(k string) (string, bool) {
			v, ok := tc.env[k]
			return v, ok
		})
		if err != nil {
			t.Fatal(err)
		}
		if c.HTTP.Listen != tc.want {
			t.Errorf("env %v: http.listen = %q, want %q", tc.env, c.HTTP.Listen, tc.want)
		}
	}
}
