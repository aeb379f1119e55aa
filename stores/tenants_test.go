package stores_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// tenantFixture writes tenant id with n notifications of its own to
// recipient "shared" (the first pending, the others fanned out), each with
// an inbox item and an email delivery with a failed attempt, a scoped rule
// and a key.
func tenantFixture(t *testing.T, db stores.DB, id string, n int) {
	t.Helper()
	ctx := t.Context()
	if _, err := stores.PutTenant(ctx, db, &stores.Tenant{ID: id, Name: id}); err != nil {
		t.Fatal(err)
	}
	exec(t, db, `
WITH n AS (
    INSERT INTO notify_notifications (id, notifier, key, recipients, reasons, status, tenant)
    SELECT notify_uuidv7(), 'n', $1 || '-' || i, ARRAY['shared'], ARRAY['direct'],
           CASE WHEN i = 1 THEN 'pending' ELSE 'fanned_out' END, $1
    FROM generate_series(1, $2) i
    RETURNING id, key
), i AS (
    INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, title, tenant)
    SELECT notify_uuidv7(), n.id, 'shared', 'n', n.key, 'hi', $1 FROM n
), d AS (
    INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, tenant)
    SELECT notify_uuidv7(), n.id, 'n', n.key, 'shared', 'email', 'immediate', 'failed', $1 FROM n
    RETURNING id, notification_id
)
INSERT INTO notify_delivery_attempts (delivery_id, notification_id, attempt, at, error)
SELECT d.id, d.notification_id, 1, now(), 'SMTP 451' FROM d`, id, n)
	if err := stores.ReplaceTenantPreferences(ctx, db, "shared", id, []stores.TenantRule{
		{Tenant: id, PreferenceRule: stores.PreferenceRule{Scope: "*", Channel: "email", Mode: "off"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.CreateTenantKey(ctx, db, id, "ntk_"+id, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stores.PutPushSubscription(ctx, db, "shared", id, "https://push.test/"+id, "k", "a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stores.PutDevice(ctx, db, "shared", id, "ios", "tok-"+id, "com.acme.app"); err != nil {
		t.Fatal(err)
	}
}

// Deleting a tenant erases everything scoped to it, batch by batch, logs the
// inbox deletions for the streams, and leaves the other tenant's rows and
// the recipient's own alone.
func TestEraseTenantInBatches(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	tenantFixture(t, tx, "acme", 5)
	tenantFixture(t, tx, "globex", 2)
	exec(t, tx, `INSERT INTO notify_preferences (recipient, scope, channel, mode) VALUES ('shared', '*', '*', 'digest')`)

	e, err := stores.EraseTenant(ctx, tx, "acme", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := stores.TenantErasure{Tenant: true, Keys: 1, Preferences: 1, Inbox: 5, Deliveries: 5, Notifications: 5, Cancelled: 1}
	if *e != want {
		t.Fatalf("erasure %+v, want %+v", *e, want)
	}
	for sql, want := range map[string]int{
		`SELECT count(*) FROM notify_tenants WHERE id = 'acme'`:                  0,
		`SELECT count(*) FROM notify_tenant_keys WHERE tenant = 'acme'`:          0,
		`SELECT count(*) FROM notify_inbox WHERE tenant = 'acme'`:                0,
		`SELECT count(*) FROM notify_deliveries WHERE tenant = 'acme'`:           0,
		`SELECT count(*) FROM notify_notifications WHERE tenant = 'acme'`:        0,
		`SELECT count(*) FROM notify_tenant_preferences WHERE tenant = 'acme'`:   0,
		`SELECT count(*) FROM notify_delivery_attempts`:                          2,
		`SELECT count(*) FROM notify_inbox WHERE tenant = 'globex'`:              2,
		`SELECT count(*) FROM notify_deliveries WHERE tenant = 'globex'`:         2,
		`SELECT count(*) FROM notify_notifications WHERE tenant = 'globex'`:      2,
		`SELECT count(*) FROM notify_tenant_preferences WHERE tenant = 'globex'`: 1,
		`SELECT count(*) FROM notify_tenant_keys WHERE tenant = 'globex'`:        1,
		`SELECT count(*) FROM notify_push_subscriptions WHERE tenant = 'acme'`:   0,
		`SELECT count(*) FROM notify_devices WHERE tenant = 'acme'`:              0,
		`SELECT count(*) FROM notify_push_subscriptions WHERE tenant = 'globex'`: 1,
		`SELECT count(*) FROM notify_devices WHERE tenant = 'globex'`:            1,
		`SELECT count(*) FROM notify_preferences WHERE recipient = 'shared'`:     1,
		`SELECT coalesce(sum(cardinality(item_ids)), 0)::int FROM notify_inbox_changes
		 WHERE recipient = 'shared' AND kind = 'deleted'`: 5,
	} {
		if got := countRows(t, tx, sql); got != want {
			t.Errorf("%s = %d, want %d", sql, got, want)
		}
	}

	// Again: nothing left, nothing done.
	e, err = stores.EraseTenant(ctx, tx, "acme", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Empty() {
		t.Fatalf("second erasure %+v, want nothing", *e)
	}
}

// notify_send refuses a tenant that does not exist, naming the field, and
// writes the one it names onto the notification.
func TestSendNamesATenant(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	exec(t, tx, `INSERT INTO notify_notifiers (name, category, max_recipients) VALUES ('n', '', 100)`)
	_, err := tx.Exec(ctx, `SELECT * FROM notify_send('n', 'k-1', '["u1"]', tenant => 'nobody')`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22023" || pe.ColumnName != "tenant" {
		t.Fatalf("unknown tenant: %v, want 22023 on column tenant", err)
	}
	in, ok := stores.InputErrorOf(err)
	if !ok || in.Field != "tenant" {
		t.Fatalf("InputErrorOf = %+v %v", in, ok)
	}
	tx = pgtest.Tx(t)
	exec(t, tx, `INSERT INTO notify_notifiers (name, category, max_recipients) VALUES ('n', '', 100)`)
	if _, err := stores.PutTenant(ctx, tx, &stores.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	exec(t, tx, `SELECT * FROM notify_send('n', 'k-1', '["u1"]', tenant => 'acme')`)
	if _, _, err := stores.InsertNotification(ctx, tx, stores.NewNotification{Notifier: "n", Key: "k-2",
		Recipients: []string{"u1"}, Reasons: []string{"direct"}, Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	exec(t, tx, `SELECT * FROM notify_send('n', 'k-3', '["u1"]')`)
	if got := countRows(t, tx, `SELECT count(*) FROM notify_notifications WHERE tenant = 'acme'`); got != 2 {
		t.Fatalf("%d notifications of acme, want 2", got)
	}
	if got := countRows(t, tx, `SELECT count(*) FROM notify_notifications WHERE tenant IS NULL`); got != 1 {
		t.Fatalf("%d notifications without a tenant, want 1", got)
	}
}

// The tenant-scoped inbox statements differ from the recipient's by the
// tenant condition alone.
func TestTenantInboxStatements(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	tenantFixture(t, tx, "acme", 3)
	tenantFixture(t, tx, "globex", 2)
	page, err := stores.ListTenantInbox(ctx, tx, "shared", "globex", stores.InboxAll, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 || page.Items[0].Tenant != "globex" || page.Items[1].Tenant != "globex" {
		t.Fatalf("globex's page: %+v", page.Items)
	}
	c, err := stores.CountTenantInbox(ctx, tx, "shared", "acme", 0)
	if err != nil || c.Unread != 3 {
		t.Fatalf("acme's counts %+v %v, want 3 unread", c, err)
	}
	changed, err := stores.MarkInbox(ctx, tx, stores.InboxMark{Recipient: "shared", Op: stores.InboxOpRead, All: true,
		At: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Tenant: "globex"})
	if err != nil || len(changed) != 2 {
		t.Fatalf("mark globex's read: %v %v", changed, err)
	}
	if c, err := stores.CountInbox(ctx, tx, "shared", 0); err != nil || c.Unread != 3 {
		t.Fatalf("all counts %+v %v, want acme's 3 unread", c, err)
	}
}
