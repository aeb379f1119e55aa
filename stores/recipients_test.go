package stores_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

func ptr(s string) *string { return &s }

func TestPutGetRecipient(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()

	if _, err := stores.GetRecipient(ctx, tx, "r-put"); !errors.Is(err, stores.ErrNotFound) {
		t.Fatalf("get missing: %v, want ErrNotFound", err)
	}
	in := stores.RecipientProfile{ID: "r-put", Email: ptr("a@example.com"), Name: ptr("A"), Locale: ptr("fr"),
		Timezone: ptr("Europe/Paris"), WebhookURL: ptr("https://h.example.com/1"), Data: json.RawMessage(`{"k": [1, 2]}`)}
	out, err := stores.PutRecipient(ctx, tx, in)
	if err != nil {
		t.Fatal(err)
	}
	if *out.Email != "a@example.com" || *out.Locale != "fr" || string(out.Data) != `{"k": [1, 2]}` || out.WebhookGoneAt != nil {
		t.Fatalf("put: %+v data %s", out, out.Data)
	}
	got, err := stores.GetRecipient(ctx, tx, "r-put")
	if err != nil {
		t.Fatal(err)
	}
	if *got.Name != "A" || *got.Timezone != "Europe/Paris" || !got.CreatedAt.Equal(out.CreatedAt) {
		t.Fatalf("get: %+v", got)
	}

	// A gone webhook stays gone while the URL is unchanged.
	if _, err := tx.Exec(ctx, `UPDATE notify_recipients SET webhook_gone_at = now() WHERE id = 'r-put'`); err != nil {
		t.Fatal(err)
	}
	in.Name = ptr("B")
	if out, err = stores.PutRecipient(ctx, tx, in); err != nil || out.WebhookGoneAt == nil || *out.Name != "B" {
		t.Fatalf("same url: %+v %v", out, err)
	}
	in.WebhookURL = ptr("https://h.example.com/2")
	if out, err = stores.PutRecipient(ctx, tx, in); err != nil || out.WebhookGoneAt != nil {
		t.Fatalf("new url: %+v %v", out, err)
	}
	// Cleared fields and default data.
	if out, err = stores.PutRecipient(ctx, tx, stores.RecipientProfile{ID: "r-put"}); err != nil ||
		out.Email != nil || out.WebhookURL != nil || string(out.Data) != `{}` {
		t.Fatalf("replace with empty: %+v %v", out, err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM notify_recipients WHERE id = 'r-put'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows (%v), want 1", n, err)
	}
}
