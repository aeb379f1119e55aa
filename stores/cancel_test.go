package stores_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// A cancel that waits for a fan-out chunk holding the notification row must
// see (and withdraw) what that chunk committed.
func TestCancelWithdrawsAChunkThatCommitsWhileItWaits(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	const nid = "01900000-0000-7000-8000-00000000c001"
	if _, err := pool.Exec(ctx, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1, 'n', 'k', 'pending', true)`, nid); err != nil {
		t.Fatal(err)
	}
	// The "chunk": lock the notification, write a delivery and an inbox item, commit later.
	chunk, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stores.LockFanout(ctx, chunk, nid, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := chunk.Exec(ctx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status)
		VALUES ('01900000-0000-7000-8000-00000000c002', $1, 'n', 'k', 'u1', 'email', 'immediate', 'pending')`, nid); err != nil {
		t.Fatal(err)
	}
	if _, err := chunk.Exec(ctx, `INSERT INTO notify_inbox (id, recipient, notifier, key) VALUES ('01900000-0000-7000-8000-00000000c003', 'u1', 'n', 'k')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			done <- -1
			return
		}
		n, err := stores.CancelNotification(ctx, tx, "n", "k")
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	time.Sleep(150 * time.Millisecond) // the cancel is now waiting on the notification row
	if err := chunk.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-done; n != 2 {
		t.Fatalf("cancel withdrew %d, want the chunk's delivery and inbox item", n)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM notify_deliveries WHERE notification_id = $1`, nid).Scan(&status); err != nil || status != "cancelled" {
		t.Fatalf("delivery status %q (%v), want cancelled", status, err)
	}
}

// The unguarded chunk statement is the guarded one without its two ON
// CONFLICT clauses, nothing else.
func TestWriteChunkFreshSQLDropsOnlyTheGuards(t *testing.T) {
	fresh, guarded := stores.WriteChunkSQLs()
	if strings.Contains(fresh, "ON CONFLICT") || strings.Count(guarded, "ON CONFLICT") != 2 ||
		len(guarded)-len(fresh) != len("    ON CONFLICT (recipient, notifier, key) DO NOTHING\n")+
			len("    ON CONFLICT (notification_id, channel, coalesce(recipient, '')) DO NOTHING\n") {
		t.Fatalf("fresh statement:\n%s", fresh)
	}
}

// Normalising an empty audience (a notification for bulk channels only)
// gives no split points, even when lanes are asked for.
func TestNormalizeEmptyAudience(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	const nid = "01900000-0000-7000-8000-00000000e001"
	if _, err := tx.Exec(t.Context(), `INSERT INTO notify_notifications (id, notifier, key, status) VALUES ($1, 'n', 'empty', 'pending')`, nid); err != nil {
		t.Fatal(err)
	}
	a, err := stores.NormalizeAudience(t.Context(), tx, nid, nil, false, 4)
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != 0 || len(a.Bounds) != 0 {
		t.Fatalf("empty audience: %+v", a)
	}
}
