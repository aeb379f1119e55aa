package stores_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
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
	if _, err := stores.LockFanout(ctx, chunk, nid, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := chunk.Exec(ctx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status)
		VALUES ('01900000-0000-7000-8000-00000000c002', $1, 'n', 'k', 'u1', 'email', 'immediate', 'pending')`, nid); err != nil {
		t.Fatal(err)
	}
	if _, err := chunk.Exec(ctx, `INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key) VALUES ('01900000-0000-7000-8000-00000000c003', $1, 'u1', 'n', 'k')`, nid); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	pid := backendPID(t, tx)
	var withdrawn int
	done := make(chan error, 1)
	go func() {
		n, err := stores.CancelNotification(ctx, tx, "", "n", "k")
		if err == nil {
			withdrawn = n
			err = tx.Commit(ctx)
		}
		done <- err
	}()
	waitForLock(t, pool, pid, "the cancel", done) // it waits on the notification row
	if err := chunk.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if withdrawn != 2 {
		t.Fatalf("cancel withdrew %d, want the chunk's delivery and inbox item", withdrawn)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM notify_deliveries WHERE notification_id = $1`, nid).Scan(&status); err != nil || status != "cancelled" {
		t.Fatalf("delivery status %q (%v), want cancelled", status, err)
	}
}

// The unguarded chunk statement is the guarded one without its two ON
// CONFLICT clauses, nothing else (the throttle's upsert stays in both).
func TestWriteChunkFreshSQLDropsOnlyTheGuards(t *testing.T) {
	fresh, guarded := stores.WriteChunkSQLs()
	if strings.Count(fresh, "ON CONFLICT") != 1 || strings.Count(guarded, "ON CONFLICT") != 3 ||
		len(guarded)-len(fresh) != len("    ON CONFLICT (notification_id, recipient) DO NOTHING\n")+
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
	a, err := stores.NormalizeAudience(t.Context(), tx, nid, nil, false, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != 0 || len(a.Bounds) != 0 {
		t.Fatalf("empty audience: %+v", a)
	}
}

// A cancel whose withdrawal meets a row that a concurrent claim has just moved
// to `sending` leaves the row as it is, but PostgreSQL keeps the row locked
// until the cancel commits: an UPDATE in READ COMMITTED locks the newest
// version of a concurrently updated row before it re-checks its WHERE. The
// settle of that row waits for the cancel, however long it takes; this is
// why a worker's settle budget is generous (jobs.Deps.settleBudget and
// TestSettleWaitsOutARowLock).
func TestCancelKeepsALockOnARowItSkipped(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	const did = "01900000-0000-7000-8000-00000000c102"
	pendingEmail(t, pool, "01900000-0000-7000-8000-00000000c101", did, "k2")

	// A send job's claim, not yet committed.
	claim, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Rollback(ctx)
	if c, err := stores.ClaimDeliveries(ctx, claim, []string{did}, time.Now()); err != nil || len(c) != 1 {
		t.Fatalf("claim: %d rows, %v", len(c), err)
	}
	// The cancel's withdrawal waits on the claimed row.
	cancel, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel.Rollback(ctx)
	pid := backendPID(t, cancel)
	done := make(chan error, 1)
	go func() {
		_, err := stores.CancelNotification(ctx, cancel, "", "n", "k2")
		done <- err
	}()
	waitForLock(t, pool, pid, "the cancel", done)
	if err := claim.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The cancel (still open) skipped the row: it is `sending`, as claimed ...
	var status string
	if err := cancel.QueryRow(ctx, `SELECT status FROM notify_deliveries WHERE id = $1`, did).Scan(&status); err != nil || status != "sending" {
		t.Fatalf("status %q (%v) inside the cancel, want sending", status, err)
	}
	// ... and still holds it: a settle would wait for the cancel to commit.
	_, err = pool.Exec(ctx, `SELECT 1 FROM notify_deliveries WHERE id = $1 FOR UPDATE NOWAIT`, did)
	if err == nil || !strings.Contains(err.Error(), "55P03") {
		t.Fatalf("locking the row next to the open cancel: %v, want lock_not_available (55P03)", err)
	}
	if err := cancel.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT 1 FROM notify_deliveries WHERE id = $1 FOR UPDATE NOWAIT`, did); err != nil {
		t.Fatalf("after the cancel committed: %v", err)
	}
}

// A settle that starts while a cancel is in progress waits for it and sees
// the notification cancelled: a temporary failure settles `cancelled`, not
// `failed`, so nothing is claimable once the cancel has returned.
func TestSettleDuringACancelSeesIt(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	const did = "01900000-0000-7000-8000-00000000c202"
	pendingEmail(t, pool, "01900000-0000-7000-8000-00000000c201", did, "k3")
	claimed, err := stores.ClaimDeliveries(ctx, pool, []string{did}, time.Now())
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d rows, %v", len(claimed), err)
	}

	// The cancel has done its work (the claimed row is left to its settle)
	// but not committed.
	cancel, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel.Rollback(ctx)
	if _, err := stores.CancelNotification(ctx, cancel, "", "n", "k3"); err != nil {
		t.Fatal(err)
	}
	// The send failed temporarily; its settle starts now.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	pid := backendPID(t, conn)
	next := time.Now().Add(time.Minute)
	done := make(chan error, 1)
	go func() {
		_, err := stores.SettleDeliveries(ctx, conn, []stores.Settlement{{ID: did, ClaimedAt: claimed[0].ClaimedAt,
			Status: "failed", Error: "451 try again later", NextAttemptAt: &next}}, time.Now())
		done <- err
	}()
	waitForLock(t, pool, pid, "the settle", done)
	if err := cancel.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM notify_deliveries WHERE id = $1`, did).Scan(&status); err != nil || status != "cancelled" {
		t.Fatalf("status %q (%v) after the cancel and the settle, want cancelled", status, err)
	}
}

// A cancel and a send job's claim of the same notification's deliveries lock
// them in the same order (by id), so neither waits for the other while
// holding a row the other needs. Here the claim holds the lower id and then
// claims the higher one, which the cancel would find first (it was written
// first, for recipient "a"): a cancel that locked in its own order held that
// row while it waited, and one of the two was aborted as a deadlock.
func TestCancelAndAClaimInFlightNeverDeadlock(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	const nid, high, low = "01900000-0000-7000-8000-00000000c301", "01900000-0000-7000-8000-00000000c3ff", "01900000-0000-7000-8000-00000000c302"
	exec(t, pool, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1, 'n', 'k4', 'fanned_out', true)`, nid)
	for _, d := range []struct{ id, recipient string }{{high, "a"}, {low, "b"}} {
		exec(t, pool, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status)
			VALUES ($1, $2, 'n', 'k4', $3, 'email', 'immediate', 'pending')`, d.id, nid, d.recipient)
	}
	claim, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Rollback(ctx)
	if c, err := stores.ClaimDeliveries(ctx, claim, []string{low}, time.Now()); err != nil || len(c) != 1 {
		t.Fatalf("claim: %d rows, %v", len(c), err)
	}
	cancel, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel.Release()
	pid := backendPID(t, cancel)
	done := make(chan error, 1)
	go func() {
		_, err := stores.CancelNotification(ctx, cancel, "", "n", "k4")
		done <- err
	}()
	waitForLock(t, pool, pid, "the cancel", done)
	// The claim goes on with the other row: it must not wait for the cancel.
	if _, err := claim.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
		t.Fatal(err)
	}
	if c, err := stores.ClaimDeliveries(ctx, claim, []string{high}, time.Now()); err != nil || len(c) != 1 {
		t.Fatalf("the claim of the row the cancel had not reached: %d rows, %v", len(c), err)
	}
	if err := claim.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the cancel: %v", err)
	}
}

// pendingEmail writes a notification (notifier n, the given key) with one
// pending email delivery.
func pendingEmail(t *testing.T, db stores.DB, nid, did, key string) {
	t.Helper()
	exec(t, db, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1, 'n', $2, 'fanned_out', true)`, nid, key)
	exec(t, db, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status)
		VALUES ($1, $2, 'n', $3, 'u1', 'email', 'immediate', 'pending')`, did, nid, key)
}

func backendPID(t *testing.T, db stores.DB) int {
	t.Helper()
	var pid int
	if err := db.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitForLock waits until backend pid, running what's statement, waits for a
// lock. The statement reports on done when it finishes: finishing first means
// it did not wait.
func waitForLock(t *testing.T, db stores.DB, pid int, what string, done <-chan error) {
	t.Helper()
	servertest.Eventually(t, 10*time.Second, what+" to wait for a lock", func() bool {
		var waiting bool
		if err := db.QueryRow(context.Background(), `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if !waiting {
			select {
			case err := <-done:
				t.Fatalf("%s finished without waiting for a lock (err %v)", what, err)
			default:
			}
		}
		return waiting
	})
}
