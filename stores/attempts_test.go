package stores_test

import (
	"testing"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// TestErasureForgetsFailedAttempts: erasing a recipient takes their
// deliveries' failed attempts (whose errors name the address) with it, and
// leaves other recipients' alone.
func TestErasureForgetsFailedAttempts(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	const n = "00000000-0000-7000-8000-0000000000a1"
	exec(t, tx, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1, 'n', 'k', 'fanned_out', true)`, n)
	exec(t, tx, `INSERT INTO notify_recipients (id, email) VALUES ('att-x', 'x@example.com'), ('att-y', 'y@example.com')`)
	exec(t, tx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, attempts)
		VALUES ('00000000-0000-7000-8000-0000000000b1', $1, 'n', 'k', 'att-x', 'email', 'immediate', 'refused', 1),
		       ('00000000-0000-7000-8000-0000000000b2', $1, 'n', 'k', 'att-y', 'email', 'immediate', 'refused', 1)`, n)
	exec(t, tx, `INSERT INTO notify_delivery_attempts (delivery_id, notification_id, attempt, at, error, provider)
		VALUES ('00000000-0000-7000-8000-0000000000b1', $1, 1, now(), '550 no mailbox x@example.com', 'relay'),
		       ('00000000-0000-7000-8000-0000000000b2', $1, 1, now(), '550 no mailbox y@example.com', 'relay')`, n)
	if _, err := stores.EraseRecipient(t.Context(), tx, "att-x"); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, tx, `SELECT count(*) FROM notify_delivery_attempts WHERE error LIKE '%x@example.com%'`); got != 0 {
		t.Fatalf("%d failed attempts of the erased recipient remain", got)
	}
	if got := countRows(t, tx, `SELECT count(*) FROM notify_delivery_attempts WHERE delivery_id = '00000000-0000-7000-8000-0000000000b2'`); got != 1 {
		t.Fatalf("the other recipient's attempts: %d rows, want 1", got)
	}
}

// An erasure that deletes a delivery (its recipient's pseudonym has the same
// delivery already: an erased recipient sent to again) deletes its failed
// attempts too: the partitioned ledger has no foreign key to cascade them.
func TestErasureDeletesTheAttemptsOfDeletedDeliveries(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	const n = "00000000-0000-7000-8000-0000000000a2"
	exec(t, tx, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1, 'n', 'k2', 'fanned_out', true)`, n)
	exec(t, tx, `INSERT INTO notify_recipients (id, email) VALUES ('att-z', 'z@example.com')`)
	exec(t, tx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, attempts)
		VALUES ('00000000-0000-7000-8000-0000000000c1', $1, 'n', 'k2', $2, 'email', 'immediate', 'refused', 1),
		       ('00000000-0000-7000-8000-0000000000c2', $1, 'n', 'k2', 'att-z', 'email', 'immediate', 'refused', 1)`,
		n, stores.ErasedID("att-z"))
	exec(t, tx, `INSERT INTO notify_delivery_attempts (delivery_id, notification_id, attempt, at, error, provider)
		VALUES ('00000000-0000-7000-8000-0000000000c2', $1, 1, now(), '550 no mailbox z@example.com', 'relay')`, n)
	if _, err := stores.EraseRecipient(t.Context(), tx, "att-z"); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, tx, `SELECT count(*) FROM notify_deliveries WHERE id = '00000000-0000-7000-8000-0000000000c2'`); got != 0 {
		t.Fatal("the twin delivery was not deleted")
	}
	if got := countRows(t, tx, `SELECT count(*) FROM notify_delivery_attempts WHERE error LIKE '%z@example.com%'`); got != 0 {
		t.Fatalf("%d failed attempts of the deleted delivery remain", got)
	}
}
