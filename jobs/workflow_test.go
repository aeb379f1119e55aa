package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

// workflowConfig is BaseConfig plus notifiers with workflow options on the
// email channel of the test SMTP server.
func workflowConfig(port int) string {
	return servertest.BaseConfig + fmt.Sprintf(`
  task.assigned:
    params: {type: object, properties: {task: {type: string}}}
    example: {task: T-1}
    channels:
      in_app: {title: "Task {{.task}}"}
      email:
        subject: "Task {{.task}}"
        text: "You were assigned {{.task}}."
        delay: 1s
        unless: read
  task.digested:
    params: {type: object, properties: {task: {type: string}}}
    channels:
      in_app: {title: "Task {{.task}}"}
      email:
        default: digest
        subject: "Task {{.task}}"
        text: "You were assigned {{.task}}."
        unless: seen
  login.alert:
    params: {type: object, properties: {n: {type: string}}}
    channels:
      email:
        subject: "Login {{.n}}"
        text: "A new login."
        throttle: {limit: 3, per: 1h}
  security.alert:
    required: true
    channels:
      email: {subject: "Security", text: "Something happened."}
  news.posted:
    channels:
      email: {subject: "News", text: "Something new."}
channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: 127.0.0.1, port: %d, tls: none}
    timeout: 2s
`, port)
}

func setupWorkflow(t *testing.T) *emailBundle {
	t.Helper()
	b := setup(t)
	srv := smtpcapture.Start(t)
	b.cfg = servertest.Config(t, workflowConfig(srv.Port()))
	b.deps.Config = b.cfg
	servertest.Wire(b.deps, servertest.Channels(t, b.cfg))
	client := servertest.Client(t, b.pool, b.cfg)
	b.client = client
	return &emailBundle{bundle: b, smtp: srv}
}

func (b *emailBundle) sendTo(t *testing.T, notifier, key string, params map[string]any, to ...string) string {
	t.Helper()
	n := notifyd.Notification{Notifier: notifier, Key: key, Params: params}
	for _, r := range to {
		n.Recipients = append(n.Recipients, notifyd.Recipient{ID: r})
	}
	res, err := b.client.Send(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

func (b *emailBundle) markInbox(t *testing.T, recipient, notifier, key string, op stores.InboxOp) {
	t.Helper()
	ctx := context.Background()
	var id string
	if err := b.pool.QueryRow(ctx, `SELECT id::text FROM notify_inbox WHERE recipient = $1 AND notifier = $2 AND key = $3`,
		recipient, notifier, key).Scan(&id); err != nil {
		t.Fatalf("inbox item of %s: %v", recipient, err)
	}
	if _, err := stores.MarkInbox(ctx, b.pool, stores.InboxMark{Recipient: recipient, Op: op, IDs: []string{id}, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

func rcpts(msgs []smtpcapture.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.To...)
	}
	return out
}

// A delayed email with `unless: read` waits `scheduled` until it is due; the
// recipient who read the in-app item before then gets no email (skipped,
// with the reason), the other gets it.
func TestDelayedEmailUnlessReadIsSkippedWhenRead(t *testing.T) {
	t.Parallel()
	b := setupWorkflow(t)
	b.profile(t, "u1", "u1@example.test")
	b.profile(t, "u2", "u2@example.test")
	sentAt := time.Now()
	id := b.sendTo(t, "task.assigned", "t-1", map[string]any{"task": "T-1"}, "u1", "u2")
	servertest.StartWorkers(t, b.deps)
	d1 := b.waitDelivery(t, id, "u1", "scheduled")
	b.waitDelivery(t, id, "u2", "scheduled")
	var due time.Time
	if err := b.pool.QueryRow(context.Background(), `SELECT next_attempt_at FROM notify_deliveries WHERE id = $1`, d1.id).Scan(&due); err != nil {
		t.Fatal(err)
	}
	if due.Before(sentAt.Add(time.Second)) || due.After(time.Now().Add(time.Second)) {
		t.Fatalf("next_attempt_at = %s, want about a second after %s", due, sentAt)
	}
	b.markInbox(t, "u1", "task.assigned", "t-1", stores.InboxOpRead)

	b.waitDelivery(t, id, "u2", "sent")
	d1 = b.waitDelivery(t, id, "u1", "skipped")
	if d1.lastError == "" || d1.attempts != 0 {
		t.Fatalf("skipped delivery = %+v, want a reason and no attempt", d1)
	}
	if got := rcpts(b.smtp.Messages()); len(got) != 1 || got[0] != "u2@example.test" {
		t.Fatalf("emails to %v, want only u2", got)
	}
}

// Cancelling a notification withdraws its scheduled deliveries: nothing is
// sent when they would have been due.
func TestCancelWithdrawsScheduledDeliveries(t *testing.T) {
	t.Parallel()
	b := setupWorkflow(t)
	b.profile(t, "u1", "u1@example.test")
	id := b.sendTo(t, "task.assigned", "t-2", map[string]any{"task": "T-2"}, "u1")
	servertest.StartWorkers(t, b.deps)
	b.waitDelivery(t, id, "u1", "scheduled")
	if _, err := b.client.Cancel(context.Background(), "task.assigned", "t-2"); err != nil {
		t.Fatal(err)
	}
	d := b.delivery(t, id, "u1")
	if d.status != "cancelled" {
		t.Fatalf("after cancel: %+v, want cancelled", d)
	}
	// The send job still runs at the due instant, and finds nothing to send.
	servertest.Eventually(t, 20*time.Second, "the scheduled send job ran", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.send' AND state = 'completed'`) == 1
	})
	if n := b.smtp.Count(); n != 0 {
		t.Fatalf("%d emails sent after cancel", n)
	}
}

// A read that commits before the due claim always wins; one that races it
// either wins (skipped, and the item is read) or loses (sent once): never
// both, never neither.
func TestUnlessReadRacesTheClaim(t *testing.T) {
	t.Parallel()
	b := setupWorkflow(t)
	ctx := context.Background()
	const n = 40
	var to []string
	for i := range n {
		r := fmt.Sprintf("r%02d", i)
		b.profile(t, r, r+"@example.test")
		to = append(to, r)
	}
	id := b.sendTo(t, "task.assigned", "t-3", map[string]any{"task": "T-3"}, to...)
	client := servertest.StartWorkers(t, b.deps)
	servertest.Eventually(t, 20*time.Second, "every email scheduled", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND status = 'scheduled'`, id) == n
	})
	// Stop the workers: the claims below are the test's own.
	if err := client.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := b.pool.Query(ctx, `SELECT d.id::text, i.id::text, d.recipient FROM notify_deliveries d
		JOIN notify_inbox i ON i.recipient = d.recipient AND i.key = d.key WHERE d.notification_id = $1 ORDER BY d.recipient`, id)
	if err != nil {
		t.Fatal(err)
	}
	type pair struct{ delivery, item, recipient string }
	var pairs []pair
	for rows.Next() {
		var p pair
		if err := rows.Scan(&p.delivery, &p.item, &p.recipient); err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, p)
	}
	if rows.Err() != nil || len(pairs) != n {
		t.Fatalf("pairs = %d (%v)", len(pairs), rows.Err())
	}
	// The first ten are read before the claim: all must be skipped.
	for _, p := range pairs[:10] {
		if _, err := stores.MarkInbox(ctx, b.pool, stores.InboxMark{Recipient: p.recipient, Op: stores.InboxOpRead, IDs: []string{p.item}, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// The rest race: each read runs alongside its own claim.
	due := time.Now().Add(2 * time.Second)
	claimed := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range pairs {
		wg.Go(func() {
			c, err := stores.ClaimDeliveries(ctx, b.pool, []string{p.delivery}, due)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			claimed[p.delivery] = len(c) == 1
			mu.Unlock()
		})
		wg.Go(func() {
			if _, err := stores.MarkInbox(ctx, b.pool, stores.InboxMark{Recipient: p.recipient, Op: stores.InboxOpRead, IDs: []string{p.item}, At: time.Now()}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i, p := range pairs {
		var status string
		if err := b.pool.QueryRow(ctx, `SELECT status FROM notify_deliveries WHERE id = $1`, p.delivery).Scan(&status); err != nil {
			t.Fatal(err)
		}
		switch {
		case claimed[p.delivery] && status != "sending":
			t.Fatalf("%s claimed but %s", p.recipient, status)
		case !claimed[p.delivery] && status != "skipped":
			t.Fatalf("%s neither claimed nor skipped: %s", p.recipient, status)
		case i < 10 && status != "skipped":
			t.Fatalf("%s read before the claim, yet %s", p.recipient, status)
		}
	}
}

// With mode digest, `unless: seen` leaves the items already seen out of the
// digest; a digest of only seen items is not sent at all.
func TestDigestUnlessSeenDropsSeenItems(t *testing.T) {
	t.Parallel()
	b := setupWorkflow(t)
	ctx := context.Background()
	b.profile(t, "u1", "u1@example.test")
	b.profile(t, "u2", "u2@example.test")
	a := b.sendTo(t, "task.digested", "d-1", map[string]any{"task": "Seen"}, "u1", "u2")
	c := b.sendTo(t, "task.digested", "d-2", map[string]any{"task": "Unseen"}, "u1")
	client := servertest.StartWorkers(t, b.deps)
	waitStatus(t, b.bundle, a, "fanned_out")
	waitStatus(t, b.bundle, c, "fanned_out")
	b.markInbox(t, "u1", "task.digested", "d-1", stores.InboxOpSeen)
	b.markInbox(t, "u2", "task.digested", "d-1", stores.InboxOpRead)
	if err := client.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Make the rows due, then sweep.
	if _, err := b.pool.Exec(ctx, `UPDATE notify_deliveries SET created_at = now() - interval '2 days' WHERE status = 'digest_pending'`); err != nil {
		t.Fatal(err)
	}
	client = servertest.StartWorkers(t, b.deps)
	if _, err := b.deps.DigestSweep(ctx, client); err != nil {
		t.Fatal(err)
	}
	b.smtp.WaitFor(1, 20*time.Second)
	servertest.Eventually(t, 20*time.Second, "no digest row left to settle", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE status IN ('digest_pending', 'digest_sending')`) == 0
	})
	msgs := b.smtp.Messages()
	if len(msgs) != 1 || msgs[0].To[0] != "u1@example.test" {
		t.Fatalf("digests to %v, want one to u1", rcpts(msgs))
	}
	if text := msgs[0].Text; !strings.Contains(text, "Unseen") {
		t.Fatalf("digest text %q does not list the unseen item", text)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE key = 'd-1' AND status = 'skipped' AND last_error LIKE 'unless%'`); n != 2 {
		t.Fatalf("skipped digest rows of d-1 = %d, want 2", n)
	}
}

// A throttle of 3 per hour admits exactly 3 of 20 notifications sent to each
// of two recipients at once (up to 16 fan-outs in flight together, on two
// River clients): the other 17 deliveries are throttled, and 3 emails go
// out to each.
func TestThrottleCannotOverAdmitUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setupWorkflow(t)
	ctx := context.Background()
	b.profile(t, "u1", "u1@example.test")
	b.profile(t, "u2", "u2@example.test")
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := b.client.Send(ctx, notifyd.Notification{Notifier: "login.alert", Key: fmt.Sprintf("l-%d", i),
				Params: map[string]any{"n": fmt.Sprint(i)}, Recipients: []notifyd.Recipient{{ID: "u1"}, {ID: "u2"}}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Two daemons with 8 fan-out workers each: the fan-outs run at once.
	b.cfg.Queues.Fanout = 8
	servertest.StartWorkers(t, b.deps)
	servertest.StartWorkers(t, b.deps)
	servertest.Eventually(t, 30*time.Second, "every delivery settled", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE status IN ('sent', 'throttled')`) == 2*n
	})
	for _, r := range []string{"u1", "u2"} {
		if got := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE recipient = $1 AND status = 'sent'`, r); got != 3 {
			t.Fatalf("%s: %d sent, want 3", r, got)
		}
		if got := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE recipient = $1 AND status = 'throttled'
			AND last_error LIKE 'throttled:%' AND settled_at IS NOT NULL`, r); got != n-3 {
			t.Fatalf("%s: %d throttled, want %d", r, got, n-3)
		}
	}
	if got := b.smtp.Count(); got != 6 {
		t.Fatalf("%d emails, want 6", got)
	}
}

// Quiet hours hold an email that would be sent inside them until they end
// (scheduled, next_attempt_at at the window's end in the recipient's zone);
// a required notifier's email is not held.
func TestQuietHoursHoldEmailButNotRequired(t *testing.T) {
	t.Parallel()
	b := setupWorkflow(t)
	ctx := context.Background()
	b.profile(t, "u1", "u1@example.test")
	// A window around now in Tokyo, ending in 3 hours.
	// The daemon carries the zone database (config imports time/tzdata).
	loc, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(loc)
	start, end := now.Add(-time.Hour).Format("15:04"), now.Add(3*time.Hour).Format("15:04")
	if _, err := b.pool.Exec(ctx, `UPDATE notify_recipients SET timezone = 'Asia/Tokyo', quiet_hours = $2 WHERE id = $1`,
		"u1", fmt.Sprintf(`{"start":%q,"end":%q}`, start, end)); err != nil {
		t.Fatal(err)
	}
	held := b.sendTo(t, "news.posted", "n-1", nil, "u1")
	urgent := b.sendTo(t, "security.alert", "s-1", nil, "u1")
	servertest.StartWorkers(t, b.deps)
	b.waitDelivery(t, urgent, "u1", "sent")
	b.waitDelivery(t, held, "u1", "scheduled")
	var due time.Time
	if err := b.pool.QueryRow(ctx, `SELECT next_attempt_at FROM notify_deliveries WHERE notification_id = $1`, held).Scan(&due); err != nil {
		t.Fatal(err)
	}
	if got := due.In(loc).Format("15:04"); got != end || due.Before(time.Now().Add(2*time.Hour)) {
		t.Fatalf("held until %s (%s Tokyo), want the window's end %s", due, got, end)
	}
	if got := b.smtp.Count(); got != 1 {
		t.Fatalf("%d emails, want only the required one", got)
	}
}

// A scheduled delivery whose send job was lost reaches a final status: the
// retry sweep re-drives it once it is overdue by a lease, and the claim
// still reads its `unless` condition.
func TestRetrySweepRedrivesScheduledWithLostJob(t *testing.T) {
	t.Parallel()
	b := setupWorkflow(t)
	ctx := context.Background()
	b.profile(t, "u1", "u1@example.test")
	b.profile(t, "u2", "u2@example.test")
	id := b.sendTo(t, "task.assigned", "t-lost", map[string]any{"task": "T-9"}, "u1", "u2")
	client := servertest.StartWorkers(t, b.deps)
	b.waitDelivery(t, id, "u1", "scheduled")
	b.waitDelivery(t, id, "u2", "scheduled")
	if err := client.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The job is lost, and the rows are overdue by more than a lease.
	if _, err := b.pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'notify.send'`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE notify_deliveries SET next_attempt_at = now() - interval '1 hour' WHERE notification_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	b.markInbox(t, "u1", "task.assigned", "t-lost", stores.InboxOpRead)
	client = servertest.StartWorkers(t, b.deps)
	if _, err := client.Insert(ctx, jobs.RetrySweepArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	b.waitDelivery(t, id, "u2", "sent")
	b.waitDelivery(t, id, "u1", "skipped")
	if got := rcpts(b.smtp.Messages()); len(got) != 1 || got[0] != "u2@example.test" {
		t.Fatalf("emails to %v, want only u2", got)
	}
}
