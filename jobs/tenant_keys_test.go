package jobs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/server/servertest"
)

// Idempotency keys are per tenant: two tenants sending the same key to the
// same recipient get two notifications, both delivered (inbox and email); a
// second send in one tenant is that tenant's duplicate; a send with no
// tenant is a space of its own; cancelling the key in one tenant leaves the
// other's notification alone.
func TestIdempotencyKeysArePerTenant(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_tenants (id) VALUES ('acme'), ('globex')`); err != nil {
		t.Fatal(err)
	}
	b.profile(t, "u1", "u1@example.test")
	send := func(tenant, key string) notifyd.SendResult {
		t.Helper()
		res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "invoice.paid", Key: key, Tenant: tenant,
			Recipients: []notifyd.Recipient{{ID: "u1"}}, Params: map[string]any{"amount": "1 EUR"}})
		if err != nil {
			t.Fatalf("send %s/%s: %v", tenant, key, err)
		}
		return res
	}
	acme := send("acme", "inv-1")
	globex := send("globex", "inv-1")
	none := send("", "inv-1")
	if globex.Duplicate || none.Duplicate || globex.ID == acme.ID || none.ID == acme.ID || none.ID == globex.ID {
		t.Fatalf("acme %+v, globex %+v, no tenant %+v: want three new notifications", acme, globex, none)
	}
	if again := send("acme", "inv-1"); !again.Duplicate || again.ID != acme.ID {
		t.Fatalf("acme's second send = %+v, want a duplicate of %s", again, acme.ID)
	}
	// The SQL API says the same.
	var id string
	var dup bool
	if err := b.pool.QueryRow(ctx, `SELECT id::text, duplicate FROM notify_send('invoice.paid', 'inv-1', '["u1"]', '{}', tenant => 'globex')`).
		Scan(&id, &dup); err != nil || !dup || id != globex.ID {
		t.Fatalf("notify_send for globex = %s, %v, %v; want globex's %s as a duplicate", id, dup, err, globex.ID)
	}

	servertest.StartWorkers(t, b.deps)
	for _, res := range []notifyd.SendResult{acme, globex, none} {
		b.waitDelivery(t, res.ID, "u1", "sent")
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient = 'u1' AND key = 'inv-1'`); n != 3 {
		t.Fatalf("u1 has %d inbox items of inv-1, want one per tenant and one without", n)
	}

	// A fresh key, so that the cancel has something to withdraw.
	acme2, globex2 := send("acme", "inv-2"), send("globex", "inv-2")
	b.waitDelivery(t, acme2.ID, "u1", "sent")
	b.waitDelivery(t, globex2.ID, "u1", "sent")
	if _, err := b.client.CancelTenant(ctx, "acme", "invoice.paid", "inv-2"); err != nil {
		t.Fatal(err)
	}
	status := func(id string) string {
		var s string
		if err := b.pool.QueryRow(ctx, `SELECT status FROM notify_notifications WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := status(acme2.ID); got != "cancelled" {
		t.Fatalf("acme's inv-2 is %s, want cancelled", got)
	}
	if got := status(globex2.ID); got == "cancelled" {
		t.Fatal("cancelling acme's inv-2 cancelled globex's")
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE notification_id = $1`, globex2.ID); n != 1 {
		t.Fatalf("globex's inv-2 has %d inbox items after acme's cancel, want 1", n)
	}
	// Cancel without a tenant is the notification sent without one: there
	// is no inv-2 there.
	if _, err := b.client.Cancel(ctx, "invoice.paid", "inv-2"); !errors.Is(err, notifyd.ErrNotFound) {
		t.Fatalf("cancel of inv-2 with no tenant = %v, want ErrNotFound", err)
	}
	var withdrawn *int
	if err := b.pool.QueryRow(ctx, `SELECT notify_cancel('invoice.paid', 'inv-2', 'globex')`).Scan(&withdrawn); err != nil ||
		withdrawn == nil {
		t.Fatalf("notify_cancel for globex = %v, %v", withdrawn, err)
	}
	if got := status(globex2.ID); got != "cancelled" {
		t.Fatalf("globex's inv-2 is %s after its own cancel, want cancelled", got)
	}
}
