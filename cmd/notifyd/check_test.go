package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
)

// TestCheckRefusesWhatRunRefuses runs `notifyd check` and the daemon's
// constructor (server.New, what `notifyd run` starts) on a table of configs:
// check accepts exactly the configs New accepts, and names every problem New
// names, with the environment variable to set when a value came from one that
// is unset.
func TestCheckRefusesWhatRunRefuses(t *testing.T) {
	_, dbURL := pgtest.NewDBURL(t)
	// Variables the configs name; the unset one is deliberately unset.
	t.Setenv("NOTIFYD_CHECK_DB", dbURL)
	t.Setenv("NOTIFYD_CHECK_SECRET", "whsec_"+"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
	os.Unsetenv("NOTIFYD_CHECK_UNSET")
	const db = "database: {url: ${NOTIFYD_CHECK_DB}}\n"
	for _, c := range []struct {
		name, yaml string
		// want lists what check's error must say (each also in New's,
		// except where New stops first); empty: both accept.
		want []string
	}{
		{"a working config", db + "channels:\n  webhook: {secret: ${NOTIFYD_CHECK_SECRET}}\n", nil},
		{"the webhook secret left to an unset variable", db + "channels:\n  webhook: {secret: ${NOTIFYD_CHECK_UNSET}}\n",
			[]string{"config.yaml:3: channels.webhook.secret: must be set", "(set NOTIFYD_CHECK_UNSET)"}},
		{"a webhook section without a secret", db + "channels:\n  webhook: {timeout: 5s}\n",
			[]string{"config.yaml:3: channels.webhook.secret: must be set"}},
		{"sms without its auth token", db + "channels:\n  sms: {account_sid: AC0123456789abcdef0123456789abcdef, from: '+15005550006', auth_token: '${NOTIFYD_CHECK_UNSET}'}\n",
			[]string{"channels.sms.auth_token: must be set", "(set NOTIFYD_CHECK_UNSET)"}},
		{"an email API provider's key left to an unset variable", db + "channels:\n  email:\n    from: 'Acme <n@acme.test>'\n    providers:\n      - {kind: smtp, host: 127.0.0.1, port: 2525}\n      - {kind: sendgrid, api_key: '${NOTIFYD_CHECK_UNSET}'}\n",
			[]string{"config.yaml:7: channels.email.providers[1].api_key: must be set", "(set NOTIFYD_CHECK_UNSET)"}},
		{"an SMS provider's key left to an unset variable", db + "channels:\n  sms:\n    providers:\n      - {kind: twilio, account_sid: AC0123456789abcdef0123456789abcdef, auth_token: t, from: Acme}\n      - {kind: vonage, application_id: aaaaaaaa-bbbb-4ccc-8ddd-0123456789ab, private_key: '${NOTIFYD_CHECK_UNSET}', from: Acme}\n",
			[]string{"config.yaml:6: channels.sms.providers[1].private_key: must be set", "(set NOTIFYD_CHECK_UNSET)"}},
		{"whatsapp without its access token", db + "channels:\n  whatsapp: {provider: cloud_api, phone_number_id: '1065403522', access_token: '${NOTIFYD_CHECK_UNSET}'}\n",
			[]string{"config.yaml:3: channels.whatsapp.access_token: must be set", "(set NOTIFYD_CHECK_UNSET)"}},
		{"web push without its private key", db + "channels:\n  web_push:\n    vapid_public_key: BIYlLHkARxOZ3O1YBzq6o8GKjqUJSlC9JUVmohGEBKw5AtYeneWUNHkphh9oYEbjU2iWyzPWmoW-TdoVbphVYA0\n    vapid_private_key: ${NOTIFYD_CHECK_UNSET}\n    subject: mailto:ops@acme.test\n",
			[]string{"channels.web_push.vapid_private_key: must be set", "(set NOTIFYD_CHECK_UNSET)"}},
		{"unsubscribe links without a token secret", db + "channels:\n  email: {from: 'Acme <n@acme.test>', smtp: {host: 127.0.0.1, port: 2525}, unsubscribe_url: 'https://n.acme.test'}\n",
			[]string{"channels.email.unsubscribe_url: needs http.token_secret"}},
		{"no database", "database: {url: ${NOTIFYD_CHECK_UNSET}}\n",
			[]string{"config.yaml:1: database.url: must be set", "(set NOTIFYD_CHECK_UNSET)"}},
		{"a short admin token (a rule both always applied)", db + "http: {admin_token: short}\n",
			[]string{"http.admin_token: must be at least 32 bytes"}},
		{"single sign-on that cannot work", db + "console:\n  oidc:\n    client_id: notifyd\n    redirect_url: http://notifyd.acme.test/admin/sso/callback\n    roles_claim: groups\n    role_map: {eng: root}\n",
			[]string{"config.yaml:3: console.oidc.issuer: must be", "config.yaml:5: console.oidc.redirect_url: must be https",
				"config.yaml:7: console.oidc.role_map.eng: must be viewer, operator or admin"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, c.yaml)
			_, _, checkErr := run(t, "check", "-config", path)
			newErr := startDaemon(t, path)
			if (checkErr == nil) != (newErr == nil) {
				t.Fatalf("check says %v, but the daemon says %v", checkErr, newErr)
			}
			if len(c.want) == 0 {
				return
			}
			for _, w := range c.want {
				if !strings.Contains(checkErr.Error(), w) {
					t.Errorf("check's error does not say %q:\n%v", w, checkErr)
				}
			}
			// Every problem the daemon names (key path and message), check
			// names too.
			var perr *config.Errors
			if errorsAs(newErr, &perr) {
				for _, e := range perr.Errors {
					if !strings.Contains(checkErr.Error(), e.Path+": "+strings.TrimSuffix(strings.SplitN(e.Message, " (set ", 2)[0], ")")) {
						t.Errorf("the daemon refuses %s: %s, check does not say it:\n%v", e.Path, e.Message, checkErr)
					}
				}
			} else if !strings.Contains(newErr.Error(), "database.url") {
				t.Errorf("the daemon refused for another reason: %v", newErr)
			}
			// -dev checks as `notifyd dev` runs: what it fills in may be unset.
			if _, _, err := run(t, "check", "-dev", "-config", path); err != nil &&
				(strings.Contains(err.Error(), "must be set") || strings.Contains(err.Error(), "database.url")) {
				t.Errorf("check -dev refuses what dev provides: %v", err)
			}
		})
	}
}

// startDaemon builds the daemon as `notifyd run` would from the file as the
// tools read it (no run-only rule applied before New), and closes it again.
func startDaemon(t *testing.T, path string) error {
	t.Helper()
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	d, err := server.New(context.Background(), server.Options{Config: cfg, NoListen: true})
	if err != nil {
		return err
	}
	d.Close()
	return nil
}

// TestCheckTheExampleConfig: the example config is checked as `notifyd run`
// would run it, naming the variables a production run needs, and passes
// with them set, or as `notifyd dev` runs it.
func TestCheckTheExampleConfig(t *testing.T) {
	os.Unsetenv("DATABASE_URL")
	os.Unsetenv("NOTIFYD_WEBHOOK_SECRET")
	_, _, err := run(t, "check", "-config", "../../config.example.yaml")
	for _, want := range []string{"database.url: must be set", "(set DATABASE_URL)", "channels.webhook.secret: must be set", "(set NOTIFYD_WEBHOOK_SECRET)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("check of the example config without its variables = %v; want it to say %q", err, want)
		}
	}
	if out, _, err := run(t, "check", "-dev", "-config", "../../config.example.yaml"); err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("check -dev of the example config: %q, %v", out, err)
	}
	t.Setenv("DATABASE_URL", "postgres://notifyd@db.invalid/app")
	t.Setenv("NOTIFYD_WEBHOOK_SECRET", "a-webhook-secret-0123456789abcdef")
	if out, _, err := run(t, "check", "-config", "../../config.example.yaml"); err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("check of the example config with its variables: %q, %v", out, err)
	}
}

func errorsAs(err error, target **config.Errors) bool { return errors.As(err, target) }

// TestCheckTemplateFields: a template that names a field the params schema
// does not declare is a check error naming the notifier, the channel's key
// and the template's line, inside range and with too; a schema that declares
// nothing, the batch fields, functions and $ are fine.
func TestCheckTemplateFields(t *testing.T) {
	t.Parallel()
	const head = `database: {url: "postgres://notifyd@db.invalid/app"}
channels:
  email: {from: "Acme <n@acme.test>", smtp: {host: 127.0.0.1, port: 2525}}
notifiers:
  comment.created:
    params:
      type: object
      required: [post_title]
      properties:
        post_title: {type: string}
        author: {type: object, properties: {name: {type: string}}}
        tags: {type: array, items: {type: object, properties: {label: {type: string}}}}
        extra: {type: object, additionalProperties: {type: object, properties: {v: {type: string}}}}
    channels:
`
	for _, c := range []struct {
		name, channels string
		want           []string // in check's error; none: ok
	}{
		{"declared fields, functions, $ and printf", `      in_app: {title: "{{.post_title}} by {{with .author}}{{.name}}{{end}}{{range .tags}}{{.label}}{{$.post_title}}{{end}}{{printf \"%s\" .post_title}}{{range $k, $v := .extra}}{{$v.v}}{{.v}}{{end}}"}
      email: {subject: "{{.post_title}}", text: "Hi {{recipient.Name}}: {{len .tags}}"}
`, nil},
		{"a typo", `      in_app: {title: "New comment on {{.post_titel}}"}
`, []string{"config.yaml:15: notifiers.comment.created.channels.in_app.title: line 1: {{.post_titel}}: the params schema declares no field post_titel (did you mean post_title?"}},
		{"inside with, on the third line of an email", `      email:
        subject: "s"
        text: |
          Hello
          there
          {{with .author}}{{.nmae}}{{end}}
`, []string{"notifiers.comment.created.channels.email.text: line 3: {{.nmae}}: the params schema declares no field nmae (did you mean name?"}},
		{"inside range", `      in_app: {title: "{{range .tags}}{{.lable}}{{end}}"}
`, []string{"channels.in_app.title: line 1: {{.lable}}: the params schema declares no field lable"}},
		{"$ inside range", `      in_app: {title: "{{range .tags}}{{$.titel}}{{end}}"}
`, []string{"{{$.titel}}: the params schema declares no field titel"}},
		{"a nested field", `      in_app: {title: "{{.author.email}}"}
`, []string{"{{.author.email}}: the params schema declares no field email"}},
		{"an html template in a locale", `      email:
        subject: "s"
        text: "t"
        locales:
          fr: {subject: "s", text: "t", html: "<p>{{.post_tilte}}</p>"}
`, []string{"notifiers.comment.created.channels.email.locales.fr.html: line 1: {{.post_tilte}}"}},
		{"the batch fields outside a batch", `      in_app: {title: "{{.Count}} new"}
`, []string{"declares no field Count"}},
		// recipient is bound per send by the email channel only: an in-app
		// item is rendered once for everyone, and would greet them all as
		// the check's example person.
		{"recipient outside email", `      in_app: {title: "Hi {{recipient.Name}}"}
`, []string{"notifiers.comment.created.channels.in_app.title: invalid template", "{{recipient}} is only available in email and digest templates"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := run(t, "check", "-config", writeConfig(t, head+c.channels))
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("check = %v, want ok", err)
				}
				return
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("check = %v\nwant it to say %q", err, w)
				}
			}
		})
	}

	// A batched notifier's templates see .Count, .Actors and .Items (each a
	// notification's params); a schema that declares no property accepts
	// any field.
	ok := `database: {url: "postgres://notifyd@db.invalid/app"}
notifiers:
  post.liked:
    params: {type: object, required: [post_id, liker], properties: {post_id: {type: string}, liker: {type: string}}}
    batch: {key: "{{.post_id}}", window: 10m}
    channels:
      in_app: {title: "{{.liker}}{{if gt .Count 1.0}} and {{len (slice .Items 1)}} others{{end}}: {{range .Items}}{{.liker}}{{end}}{{range .Actors}}{{.}}{{end}}"}
  anything.goes:
    params: {type: object}
    channels:
      in_app: {title: "{{.whatever}} {{.other}}"}
`
	if _, _, err := run(t, "check", "-config", writeConfig(t, ok)); err != nil {
		t.Fatalf("check of batch fields and an open schema = %v", err)
	}
	bad := strings.Replace(ok, "{{range .Items}}{{.liker}}{{end}}", "{{range .Items}}{{.likr}}{{end}}", 1)
	if _, _, err := run(t, "check", "-config", writeConfig(t, bad)); err == nil ||
		!strings.Contains(err.Error(), "notifiers.post.liked.channels.in_app.title: line 1: {{.likr}}: the params schema declares no field likr (did you mean liker?") {
		t.Fatalf("check of a typo inside range .Items = %v", err)
	}
}

// TestCheckDBPreparesAudiences: `notifyd check -db` prepares every audience
// query against the database and names, with the notifier's key and line, a
// missing table, a missing id column, an id or reason of the wrong type, a
// param of a type the query cannot read and a placeholder without an arg;
// a query that would run passes, and nothing is run.
func TestCheckDBPreparesAudiences(t *testing.T) {
	pool, dbURL := pgtest.NewDBURL(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE watchers (ticket_id bigint, user_id text, since timestamptz, tags text[]);
		CREATE TABLE audit (at timestamptz DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFYD_CHECK_DB", dbURL)
	const head = "database: {url: ${NOTIFYD_CHECK_DB}}\nnotifiers:\n"
	good := head + `  ticket.updated:
    params: {type: object, properties: {ticket_id: {type: integer}}}
    audience:
      query: SELECT user_id AS id, 'watching' AS reason FROM watchers WHERE ticket_id = $1
      args: [ticket_id]
    channels: {in_app: {title: x}}
`
	path := writeConfig(t, good)
	if out, _, err := run(t, "check", "-db", "-config", path); err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("check -db of a good audience: %q, %v", out, err)
	}
	bad := head + `  missing.table:
    audience: {query: "SELECT user_id AS id FROM watcherz"}
    channels: {in_app: {title: x}}
  no.id:
    audience:
      query: SELECT user_id FROM watchers
    channels: {in_app: {title: x}}
  wrong.types:
    audience:
      query: SELECT since AS id, tags AS reason FROM watchers
    channels: {in_app: {title: x}}
  wrong.param:
    params: {type: object, properties: {ticket: {type: boolean}}}
    audience:
      query: SELECT user_id AS id FROM watchers WHERE ticket_id = $1
      args: [ticket]
    channels: {in_app: {title: x}}
  a.write:
    audience: {query: "INSERT INTO audit DEFAULT VALUES RETURNING 'x' AS id"}
    channels: {in_app: {title: x}}
`
	path = writeConfig(t, bad)
	_, _, err := run(t, "check", "-db", "-config", path)
	if err == nil {
		t.Fatal("check -db accepted broken audience queries")
	}
	for _, want := range []string{
		`config.yaml:4: notifiers.missing.table.audience.query: the database refuses the query: ERROR: relation "watcherz" does not exist (SQLSTATE 42P01)`,
		`config.yaml:8: notifiers.no.id.audience.query: the query returns no column id (its columns: user_id text)`,
		`config.yaml:12: notifiers.wrong.types.audience.query: column id is timestamp with time zone`,
		`config.yaml:12: notifiers.wrong.types.audience.query: column reason is text[]: want text`,
		`config.yaml:18: notifiers.wrong.param.audience.args[0]: param ticket is a JSON boolean, but the query reads $1 as bigint`,
		`config.yaml:21: notifiers.a.write.audience.query: the database refuses the query: ERROR: syntax error at or near "INTO" (SQLSTATE 42601)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check -db does not say\n%s\nin\n%v", want, err)
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM audit`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("check -db ran a query: %d rows in audit, %v", n, err)
	}
}
