package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
)

// setupClaimer is an email bundle with a profile (and an address) for each
// of recipients r000, r001, ... and a claimer with an insert-only River
// client; no worker runs unless the test starts them.
func setupClaimer(t *testing.T, recipients int) (*emailBundle, *jobs.FanoutClaimer) {
	t.Helper()
	b := setupEmail(t, "")
	for i := range recipients {
		b.profile(t, fmt.Sprintf("r%03d", i), fmt.Sprintf("r%03d@example.test", i))
	}
	return b, newClaimer(t, b)
}

func newClaimer(t *testing.T, b *emailBundle) *jobs.FanoutClaimer {
	t.Helper()
	client, err := jobs.NewRiverClient(b.deps)
	if err != nil {
		t.Fatal(err)
	}
	return jobs.NewFanoutClaimer(b.deps, client)
}

// sendSmall sends n one-recipient notifications (in_app + email), to r000,
// r001, ... and returns their ids in order.
func sendSmall(t *testing.T, b *emailBundle, prefix string, n int, sendAt time.Time) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		res, err := b.client.Send(context.Background(), notifyd.Notification{Notifier: "invoice.paid",
			Key: fmt.Sprintf("%s-%d", prefix, i), Params: map[string]any{"amount": "1"}, SendAt: sendAt,
			Recipients: []notifyd.Recipient{{ID: fmt.Sprintf("r%03d", i)}}})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.ID
	}
	return ids
}

func claimOnce(t *testing.T, c *jobs.FanoutClaimer) int {
	t.Helper()
	n, err := c.ClaimOnce(context.Background())
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return n
}

// checkFannedOutOnce asserts that each of ids is fanned_out with exactly one
// inbox item, one email delivery and one change-log entry, and that send
// jobs exist (TestFanoutClaimerWritesABatchInOneTransaction sends them).
func checkFannedOutOnce(t *testing.T, b *emailBundle, ids []string) {
	t.Helper()
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = ANY($1::uuid[]) AND status = 'fanned_out' AND NOT batch_fanout`, ids); n != len(ids) {
		t.Fatalf("%d of %d notifications fanned out", n, len(ids))
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM (SELECT notification_id FROM notify_inbox WHERE notification_id = ANY($1::uuid[]) GROUP BY 1 HAVING count(*) = 1) x`, ids); n != len(ids) {
		t.Fatalf("%d of %d notifications have exactly one inbox item", n, len(ids))
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE notification_id = ANY($1::uuid[])`, ids); n != len(ids) {
		t.Fatalf("%d inbox items for %d notifications", n, len(ids))
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = ANY($1::uuid[]) AND channel = 'email' AND status = 'pending'`, ids); n != len(ids) {
		t.Fatalf("%d pending emails for %d notifications", n, len(ids))
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox_changes c, unnest(c.item_ids) AS i(id) JOIN notify_inbox x ON x.id = i.id WHERE x.notification_id = ANY($1::uuid[])`, ids); n != len(ids) {
		t.Fatalf("%d change-log entries for %d notifications", n, len(ids))
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.send'`); n == 0 {
		t.Fatal("no send jobs for the emails")
	}
}

// Small notifications get no River job; one claim writes them all (inbox,
// deliveries, send jobs shared across notifications, the change log), and
// the workers then send every email.
func TestFanoutClaimerWritesABatchInOneTransaction(t *testing.T) {
	t.Parallel()
	b, c := setupClaimer(t, 30)
	ids := sendSmall(t, b, "batch", 30, time.Time{})
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout'`); n != 0 {
		t.Fatalf("%d notify.fanout jobs for small notifications, want none", n)
	}
	if n := claimOnce(t, c); n != 30 {
		t.Fatalf("claimed %d, want 30", n)
	}
	checkFannedOutOnce(t, b, ids)
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.send'`); n != 1 {
		t.Fatalf("%d send jobs for 30 emails, want 1 (one per send_batch)", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox_changes`); n != 1 {
		t.Fatalf("%d change-log rows, want 1 (the batch's recipients are distinct)", n)
	}
	if n := claimOnce(t, c); n != 0 {
		t.Fatalf("a second claim took %d, want 0", n)
	}
	servertest.StartWorkers(t, b.deps)
	for i, id := range ids {
		b.waitDelivery(t, id, fmt.Sprintf("r%03d", i), "sent")
	}
}

// A crash between the claim and the commit (here: the context ends, as a
// killed process's connection does) rolls the whole batch back; the next
// claim writes every notification exactly once, and nothing of a
// notification is ever half written.
func TestFanoutClaimerCrashBeforeCommitWritesOnce(t *testing.T) {
	t.Parallel()
	b, c := setupClaimer(t, 20)
	ids := sendSmall(t, b, "crash", 20, time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	c.BeforeCommit = func(fanned []string) error {
		if len(fanned) != 20 {
			t.Errorf("the batch fanned out %d, want 20", len(fanned))
		}
		cancel()
		return context.Canceled
	}
	if _, err := c.ClaimOnce(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("claim = %v, want the crash", err)
	}
	for _, q := range []string{`SELECT count(*) FROM notify_inbox`, `SELECT count(*) FROM notify_deliveries`,
		`SELECT count(*) FROM notify_inbox_changes`, `SELECT count(*) FROM river_job`} {
		if n := servertest.Count(t, b.pool, q); n != 0 {
			t.Fatalf("%s = %d after the crash, want 0", q, n)
		}
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE status = 'pending' AND batch_fanout`); n != 20 {
		t.Fatalf("%d notifications left claimable, want 20", n)
	}
	c2 := newClaimer(t, b)
	if n := claimOnce(t, c2); n != 20 {
		t.Fatalf("the replay claimed %d, want 20", n)
	}
	checkFannedOutOnce(t, b, ids)
	if n := claimOnce(t, c2); n != 0 {
		t.Fatalf("claimed %d after the replay, want 0", n)
	}
}

// Two claimers split the waiting notifications: while one holds its batch
// (locked, uncommitted), the other takes the rest instead of waiting; each
// notification is written once.
func TestFanoutClaimersSplitTheWork(t *testing.T) {
	t.Parallel()
	b, first := setupClaimer(t, 25)
	ids := sendSmall(t, b, "split", 25, time.Time{})
	first.Limit = 10
	held, release := make(chan []string, 1), make(chan struct{})
	first.BeforeCommit = func(fanned []string) error {
		held <- fanned
		<-release
		return nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := first.ClaimOnce(context.Background())
		done <- err
	}()
	var mine []string
	select {
	case mine = <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the first claimer did not reach its commit")
	}
	second := newClaimer(t, b)
	if n := claimOnce(t, second); n != 15 {
		close(release)
		t.Fatalf("the second claimer took %d while the first held 10, want 15", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(mine) != 10 {
		t.Fatalf("the first claimer fanned out %d, want 10", len(mine))
	}
	checkFannedOutOnce(t, b, ids)
}

// A scheduled small notification is not claimed before its send_at, and is
// claimed once it is due.
func TestFanoutClaimerTakesScheduledWhenDue(t *testing.T) {
	t.Parallel()
	b, c := setupClaimer(t, 1)
	sendAt := time.Now().Add(1500 * time.Millisecond)
	ids := sendSmall(t, b, "later", 1, sendAt)
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE status = 'scheduled' AND batch_fanout`); n != 1 {
		t.Fatal("the notification is not scheduled for the claimer")
	}
	if n := claimOnce(t, c); n != 0 {
		t.Fatalf("claimed %d before send_at", n)
	}
	var claimedAt time.Time
	servertest.Eventually(t, 20*time.Second, "the scheduled notification is claimed", func() bool {
		if claimOnce(t, c) == 1 {
			claimedAt = time.Now()
			return true
		}
		return false
	})
	if claimedAt.Before(sendAt.Add(-50 * time.Millisecond)) {
		t.Fatalf("claimed at %s, before send_at %s", claimedAt, sendAt)
	}
	checkFannedOutOnce(t, b, ids)
}

// The claimer's loop picks up notifications by itself (its poll), and a
// Wake starts a claim at once.
func TestFanoutClaimerRunsAndWakes(t *testing.T) {
	t.Parallel()
	b, c := setupClaimer(t, 3)
	c.Poll = time.Hour // only the first claim and Wake can find them
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	ids := sendSmall(t, b, "wake", 3, time.Time{})
	c.Wake()
	servertest.Eventually(t, 10*time.Second, "woken claimer fans out", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE status = 'fanned_out'`) == 3
	})
	checkFannedOutOnce(t, b, ids)
}

// One notification whose write fails with a program-limit error (an index row
// over the btree's maximum, injected as the existing fan-out test does) is
// rejected alone, with the reason; the others of its batch are fanned out.
func TestFanoutClaimerRejectsOneBadNotificationAlone(t *testing.T) {
	t.Parallel()
	b, c := setupClaimer(t, 12)
	ids := sendSmall(t, b, "bad", 12, time.Time{})
	bad := ids[5]
	c.BeforeCommit = func(fanned []string) error {
		if slices.Contains(fanned, bad) {
			return &pgconn.PgError{Severity: "ERROR", Code: "54000",
				Message: "index row size 7032 exceeds btree version 4 maximum 2704 for index \"notify_inbox_notification_idx\""}
		}
		return nil
	}
	if n := claimOnce(t, c); n != 12 {
		t.Fatalf("claimed %d, want 12", n)
	}
	var reason string
	if err := b.pool.QueryRow(context.Background(), `SELECT coalesce(error, '') FROM notify_notifications WHERE id = $1 AND status = 'rejected'`, bad).Scan(&reason); err != nil {
		t.Fatalf("the bad notification is not rejected: %v", err)
	}
	if !strings.Contains(reason, "over a database limit") || !strings.Contains(reason, "index row size") {
		t.Fatalf("reason = %q", reason)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE notification_id = $1`, bad); n != 0 {
		t.Fatalf("the rejected notification has %d inbox items", n)
	}
	good := slices.Delete(slices.Clone(ids), 5, 6)
	checkFannedOutOnce(t, b, good)
	if n := claimOnce(t, c); n != 0 {
		t.Fatalf("claimed %d after the batch, want 0", n)
	}
}

// A notification of an unknown notifier is rejected in the batch, and the
// others of the batch are fanned out.
func TestFanoutClaimerRejectsAnUnknownNotifier(t *testing.T) {
	t.Parallel()
	b, c := setupClaimer(t, 2)
	ids := sendSmall(t, b, "fine", 2, time.Time{})
	// Written as notify_enqueue writes a small notification, for a notifier
	// this daemon does not know.
	var unknown string
	if err := b.pool.QueryRow(context.Background(), `INSERT INTO notify_notifications (id, notifier, key, recipients, reasons, status, batch_fanout)
		VALUES (gen_random_uuid(), 'no.such', 'k', '{r000}', '{""}', 'pending', true) RETURNING id::text`).Scan(&unknown); err != nil {
		t.Fatal(err)
	}
	if n := claimOnce(t, c); n != 3 {
		t.Fatalf("claimed %d, want 3", n)
	}
	checkFannedOutOnce(t, b, ids)
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'rejected' AND error LIKE '%unknown notifier%'`, unknown); n != 1 {
		t.Fatal("the notification of an unknown notifier is not rejected")
	}
}

// A notification the batch does not fan out itself (here: its email has a
// throttle, which counts per recipient across notifications) is handed to a
// notify.fanout job in the claim's transaction; the job fans it out and the
// throttle admits what it should.
func TestFanoutClaimerHandsOffAThrottledNotification(t *testing.T) {
	t.Parallel()
	b := setupWorkflow(t)
	b.profile(t, "u1", "u1@example.test")
	c := newClaimer(t, b)
	const n = 4
	ids := make([]string, n)
	for i := range n {
		ids[i] = b.sendTo(t, "login.alert", fmt.Sprintf("l-%d", i), map[string]any{"n": fmt.Sprint(i)}, "u1")
	}
	if got := claimOnce(t, c); got != n {
		t.Fatalf("claimed %d, want %d", got, n)
	}
	if got := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = ANY($1::uuid[]) AND status = 'pending' AND NOT batch_fanout`, ids); got != n {
		t.Fatalf("%d of %d handed off", got, n)
	}
	if got := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout' AND args->>'notification_id' = ANY($1)`, ids); got != n {
		t.Fatalf("%d fan-out jobs for %d handed-off notifications", got, n)
	}
	if got := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries`); got != 0 {
		t.Fatalf("the claim wrote %d deliveries of handed-off notifications", got)
	}
	servertest.StartWorkers(t, b.deps)
	servertest.Eventually(t, 30*time.Second, "every delivery settled", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE status IN ('sent', 'throttled')`) == n
	})
	if got := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE status = 'sent'`); got != 3 {
		t.Fatalf("%d sent, want 3 (the throttle's limit)", got)
	}
}
