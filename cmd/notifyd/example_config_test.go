package main

import (
	"strings"
	"testing"
)

// TestCheckExampleConfigAsRun checks config.example.yaml without -dev, as its
// header says: with DATABASE_URL and NOTIFYD_WEBHOOK_SECRET set it passes every
// rule of `notifyd run`; with them unset the errors name exactly those two.
func TestCheckExampleConfigAsRun(t *testing.T) {
	for _, v := range []string{"DATABASE_READ_URL", "NOTIFYD_ADMIN_TOKEN", "NOTIFYD_TOKEN_SECRET", "NOTIFYD_BOUNCE_TOKEN", "NOTIFYD_VAPID_PRIVATE_KEY"} {
		t.Setenv(v, "")
	}
	t.Setenv("DATABASE_URL", "")
	t.Setenv("NOTIFYD_WEBHOOK_SECRET", "")
	_, _, err := run(t, "check", "-config", "../../config.example.yaml")
	if err == nil {
		t.Fatal("check of the example without DATABASE_URL passed; `notifyd run` refuses it")
	}
	msg := err.Error()
	if !strings.Contains(msg, "set DATABASE_URL") || !strings.Contains(msg, "set NOTIFYD_WEBHOOK_SECRET") || strings.Count(msg, "must be set") != 2 {
		t.Fatalf("check without the variables = %v; want database.url and channels.webhook.secret, the two the header names", err)
	}

	t.Setenv("DATABASE_URL", "postgres:///app")
	t.Setenv("NOTIFYD_WEBHOOK_SECRET", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	out, _, err := run(t, "check", "-config", "../../config.example.yaml")
	if err != nil || !strings.Contains(out, ": ok (") {
		t.Fatalf("check of the example with DATABASE_URL and NOTIFYD_WEBHOOK_SECRET set: %q, %v", out, err)
	}
}
