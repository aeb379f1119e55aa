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
		{"web push without its private key", db + "channels:\n  web_push:\n    vapid_public_key: BIYlLHkARxOZ3O1YBzq6o8GKjqUJSlC9JUVmohGEBKw5AtYeneWUNHkphh9oYEbjU2iWyzPWmoW-TdoVbphVYA0\n    vapid_private_key: ${NOTIFYD_CHECK_UNSET}\n    subject: mailto:ops@acme.test\n",
			[]string{"channels.web_push.vapid_private_key: must be set", "(set NOTIFYD_CHECK_UNSET)"}},
		{"unsubscribe links without a token secret", db + "channels:\n  email: {from: 'Acme <n@acme.test>', smtp: {host: 127.0.0.1, port: 2525}, unsubscribe_url: 'https://n.acme.test'}\n",
			[]string{"channels.email.unsubscribe_url: needs http.token_secret"}},
		{"no database", "database: {url: ${NOTIFYD_CHECK_UNSET}}\n",
			[]string{"config.yaml:1: database.url: must be set", "(set NOTIFYD_CHECK_UNSET)"}},
		{"a short admin token (a rule both always applied)", db + "http: {admin_token: short}\n",
			[]string{"http.admin_token: must be at least 32 bytes"}},
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
