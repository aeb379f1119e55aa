package stores_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// notify_cancel (which CancelNotification runs) leaves every protected status
// alone but digest_pending, which it drops, and cancels every other status,
// one this version does not know included: its SQL list of statuses is the Go
// one.
func TestCancelLeavesExactlyTheProtectedStatuses(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	const nid = "01900000-0000-7000-8000-00000000d001"
	if _, err := pool.Exec(ctx, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1, 'n', 'k', 'fanned_out', true)`, nid); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"pending": "cancelled", "failed": "cancelled", "rate_limited": "cancelled",
		"from_a_later_version": "cancelled"}
	for _, s := range stores.ProtectedStatuses {
		want[s] = s
	}
	want["digest_pending"] = "digest_dropped"
	i := 0
	for status := range want {
		i++
		if _, err := pool.Exec(ctx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status)
			VALUES ($1, $2, 'n', 'k', $3, 'email', 'immediate', $3)`, fmt.Sprintf("01900000-0000-7000-8000-%012d", i), nid, status); err != nil {
			t.Fatal(err)
		}
	}
	withdrawn, err := stores.CancelNotification(ctx, pool, "", "n", "k")
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for before, after := range want {
		var got string
		if err := pool.QueryRow(ctx, `SELECT status FROM notify_deliveries WHERE recipient = $1`, before).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != after {
			t.Errorf("a %s delivery became %s, want %s", before, got, after)
		}
		if before != after {
			changed++
		}
	}
	if withdrawn != changed {
		t.Errorf("withdrawn = %d, want %d", withdrawn, changed)
	}
}

// A cancel of a notification with more inbox items than a transaction may
// write change-log rows (65,536) withdraws them all, and logs their deletion
// so that each recipient's stream reads exactly its item's deletion, with
// the tenant named.
func TestCancelOfMoreThan65536InboxItems(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	const nid = "01900000-0000-7000-8000-00000000d002"
	const n = 70000
	if _, err := pool.Exec(ctx, `INSERT INTO notify_notifications (id, notifier, key, status, normalized, tenant)
		VALUES ($1, 'n', 'big', 'fanned_out', true, 'acme')`, nid); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, reason, title, tenant)
		SELECT gen_random_uuid(), $1, 'r' || g, 'n', 'big', 'direct', 'hi', 'acme' FROM generate_series(1, $2::int) g`,
		nid, n); err != nil {
		t.Fatal(err)
	}
	sample := []string{"r1", "r2000", "r2001", "r65537", "r70000"}
	items := map[string]string{}
	for _, r := range sample {
		var id string
		if err := pool.QueryRow(ctx, `SELECT id::text FROM notify_inbox WHERE recipient = $1`, r).Scan(&id); err != nil {
			t.Fatal(err)
		}
		items[r] = id
	}
	before, err := stores.MaxChangeSeq(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	var withdrawn int
	if err := pool.QueryRow(ctx, `SELECT notify_cancel('n', 'big', 'acme')`).Scan(&withdrawn); err != nil {
		t.Fatalf("notify_cancel of %d inbox items: %v", n, err)
	}
	if withdrawn != n {
		t.Fatalf("withdrawn %d, want %d", withdrawn, n)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notify_inbox WHERE notification_id = $1`, nid).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d inbox items left", left)
	}
	for _, r := range sample {
		page, err := stores.ChangesAfter(ctx, pool, r, before, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Changes) != 1 || page.Changes[0].Kind != stores.ChangeDeleted || len(page.Changes[0].ItemIDs) != 1 {
			t.Fatalf("%s's changes after the cancel: %+v, want one deletion of one item", r, page.Changes)
		}
		c := page.Changes[0]
		if string(c.Data) != `{"tenant": "acme"}` {
			t.Errorf("%s's deletion carries %s, want the tenant", r, c.Data)
		}
		if c.ItemIDs[0] != items[r] {
			t.Errorf("%s's deletion names %s, want its item %s", r, c.ItemIDs[0], items[r])
		}
	}
}
