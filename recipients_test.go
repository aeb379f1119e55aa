package notifyd_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/server/servertest"
)

// A profile written with PutRecipientTx exists if and only if the
// application's transaction commits; a second write replaces it whole.
func TestPutRecipientTxIsAtomicAndReplaces(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	full := notifyd.Profile{Email: "ada@example.com", Name: "Ada", Locale: "pt-BR", Timezone: "Europe/Paris",
		WebhookURL: "https://hooks.example.com/ada", Data: map[string]any{"plan": "pro", "seats": 3.0}}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.PutRecipientTx(ctx, tx, "u2", full); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.GetRecipient(ctx, "u2"); !errors.Is(err, notifyd.ErrRecipientNotFound) {
		t.Fatalf("after rollback: %v, want ErrRecipientNotFound", err)
	}

	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return client.PutRecipientTx(ctx, tx, "u2", full) }); err != nil {
		t.Fatal(err)
	}
	got, err := client.GetRecipient(ctx, "u2")
	if err != nil {
		t.Fatal(err)
	}
	if got.Email != full.Email || got.Name != full.Name || got.Locale != full.Locale || got.Timezone != full.Timezone ||
		got.WebhookURL != full.WebhookURL || got.Data["plan"] != "pro" || got.Data["seats"] != 3.0 ||
		got.CreatedAt.IsZero() || got.WebhookGoneAt != nil {
		t.Fatalf("read back %+v, want %+v", got, full)
	}

	// PUT semantics: what is not given is cleared.
	if err := client.PutRecipient(ctx, "u2", notifyd.Profile{Email: "ada@example.org"}); err != nil {
		t.Fatal(err)
	}
	got, err = client.GetRecipient(ctx, "u2")
	if err != nil {
		t.Fatal(err)
	}
	if got.Email != "ada@example.org" || got.Name != "" || got.Timezone != "" || got.WebhookURL != "" || len(got.Data) != 0 {
		t.Fatalf("after a replace: %+v", got)
	}
	// Stored as PUT /v1/recipients/{id} stores it: a cleared field is NULL.
	if n := servertest.Count(t, pool, `SELECT count(*) FROM notify_recipients WHERE id = 'u2' AND email = 'ada@example.org'
AND name IS NULL AND locale IS NULL AND timezone IS NULL AND webhook_url IS NULL AND data = '{}'`); n != 1 {
		t.Fatalf("%d stored profiles as written", n)
	}
}

// Every rule of PUT /v1/recipients/{id} refuses the profile with the field's
// name, and nothing is written.
func TestPutRecipientValidates(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	for _, c := range []struct {
		id    string
		p     notifyd.Profile
		field string
	}{
		{"", notifyd.Profile{}, "id"},
		{strings.Repeat("x", 256), notifyd.Profile{}, "id"},
		{"u\x00", notifyd.Profile{}, "id"},
		{"u", notifyd.Profile{Email: "Ada <ada@example.com>"}, "email"},
		{"u", notifyd.Profile{Email: "not an address"}, "email"},
		{"u", notifyd.Profile{Name: strings.Repeat("n", 256)}, "name"},
		{"u", notifyd.Profile{Name: "bad \xff"}, "name"},
		{"u", notifyd.Profile{Locale: "english please"}, "locale"},
		{"u", notifyd.Profile{Timezone: "Mars/Base"}, "timezone"},
		{"u", notifyd.Profile{Timezone: "Local"}, "timezone"},
		{"u", notifyd.Profile{WebhookURL: "ftp://example.com/x"}, "webhook_url"},
		{"u", notifyd.Profile{WebhookURL: "/relative"}, "webhook_url"},
		{"u", notifyd.Profile{Data: map[string]any{"f": func() {}}}, "data"},
		{"u", notifyd.Profile{Data: map[string]any{"nul": "a\x00b"}}, "data"},
	} {
		err := client.PutRecipient(ctx, c.id, c.p)
		var inputErr *notifyd.InputError
		if !errors.As(err, &inputErr) || inputErr.Field != c.field {
			t.Errorf("%+v: %v, want an *InputError for %s", c.p, err, c.field)
		}
	}
	if n := servertest.Count(t, pool, `SELECT count(*) FROM notify_recipients`); n != 0 {
		t.Fatalf("%d profiles written", n)
	}
}

// EraseRecipient erases what the recipient had (here a profile, a
// subscription and a pending notification naming them) and reports it; an id
// nothing is known of is ErrRecipientNotFound.
func TestEraseRecipient(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	if err := client.PutRecipient(ctx, "u2", notifyd.Profile{Email: "ada@example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return client.SubscribeTx(ctx, tx, "post-9", "u2", "") }); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Send(ctx, hello); err != nil {
		t.Fatal(err)
	}
	e, err := client.EraseRecipient(ctx, "u2")
	if err != nil {
		t.Fatal(err)
	}
	if !e.Profile || e.Subscriptions != 1 || e.Notifications != 1 {
		t.Fatalf("erasure %+v, want the profile, one subscription, one notification", e)
	}
	if n := servertest.Count(t, pool, `SELECT count(*) FROM notify_notifications WHERE 'u2' = ANY(recipients)`); n != 0 {
		t.Fatalf("%d notifications still name u2", n)
	}
	if _, err := client.EraseRecipient(ctx, "u2"); !errors.Is(err, notifyd.ErrRecipientNotFound) {
		t.Fatalf("second erasure: %v, want ErrRecipientNotFound", err)
	}
}
