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
