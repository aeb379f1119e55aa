package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

// emailConfig is BaseConfig plus an email channel on the test SMTP server
// (sends time out after 400ms) and a notifier that emails.
func emailConfig(port int, extra string) string { return emailConfigTimeout(port, "400ms", extra) }

func emailConfigTimeout(port int, timeout, extra string) string {
	return servertest.BaseConfig + fmt.Sprintf(`
  invoice.paid:
    category: billing
    params: {type: object, properties: {amount: {type: string}}}
    channels:
      in_app: {title: "Invoice paid: {{.amount}}"}
      email:
        subject: "Paid {{.amount}}"
        text: "You paid {{.amount}}."
        html: "<p>You paid <b>{{.amount}}</b>.</p>"
channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: 127.0.0.1, port: %d, tls: none}
    timeout: %s
%s`, port, timeout, extra)
}

type emailBundle struct {
	*bundle
	smtp *smtpcapture.Server
}

func setupEmail(t *testing.T, extra string) *emailBundle {
	t.Helper()
	return setupEmailTimeout(t, "400ms", extra)
}

func setupEmailTimeout(t *testing.T, timeout, extra string) *emailBundle {
	t.Helper()
	b := setup(t)
	srv := smtpcapture.Start(t)
	b.cfg = servertest.Config(t, emailConfigTimeout(srv.Port(), timeout, extra))
	b.deps.Config = b.cfg
	servertest.Wire(b.deps, servertest.Channels(t, b.cfg))
	b.deps.Backoff = func(int) time.Duration { return 100 * time.Millisecond }
	b.client = servertest.Client(t, b.pool, b.cfg)
	return &emailBundle{bundle: b, smtp: srv}
}

func (b *emailBundle) profile(t *testing.T, id, address string) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), `INSERT INTO notify_recipients (id, email, name) VALUES ($1, $2, $3)`, id, address, "Person "+id); err != nil {
		t.Fatal(err)
	}
}

func (b *emailBundle) send(t *testing.T, key string, to ...string) string {
	t.Helper()
	n := notifyd.Notification{Notifier: "invoice.paid", Key: key, Params: map[string]any{"amount": "<script>alert(1)</script>"}}
	for _, r := range to {
		n.Recipients = append(n.Recipients, notifyd.Recipient{ID: r})
	}
	res, err := b.client.Send(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

type delivery struct {
	id, status, lastError string
	attempts              int
}

func (b *emailBundle) delivery(t *testing.T, notificationID, recipient string) delivery {
	t.Helper()
	var d delivery
	err := b.pool.QueryRow(context.Background(), `SELECT id::text, status, coalesce(last_error, ''), attempts FROM notify_deliveries
		WHERE notification_id = $1 AND recipient = $2 AND channel = 'email'`, notificationID, recipient).Scan(&d.id, &d.status, &d.lastError, &d.attempts)
	if err != nil {
		t.Fatalf("delivery of %s to %s: %v", notificationID, recipient, err)
	}
	return d
}

func (b *emailBundle) waitDelivery(t *testing.T, notificationID, recipient, status string) delivery {
	t.Helper()
	var d delivery
	servertest.Eventually(t, 20*time.Second, fmt.Sprintf("email to %s becomes %s", recipient, status), func() bool {
		var ok bool
		_ = b.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM notify_deliveries WHERE notification_id = $1 AND recipient = $2 AND channel = 'email' AND status = $3)`,
			notificationID, recipient, status).Scan(&ok)
		return ok
	})
	d = b.delivery(t, notificationID, recipient)
	return d
}

// settled waits until no notify.send job that carries the email delivery of
// notificationID to recipient is left to run, then returns the delivery's row.
// Nothing sends a delivery but such a job (a retry, the sweep's re-drive and
// an operator's retry are all one), so a check made after settled sees what
// is final: a retry the code should not have made has been waited for, not
// raced, and shows in the row's attempts and in what the SMTP server received.
func (b *emailBundle) settled(t *testing.T, notificationID, recipient string) delivery {
	t.Helper()
	id := b.delivery(t, notificationID, recipient).id
	if !servertest.Wait(20*time.Second, func() bool { return len(sendJobsToRun(t, b.pool, id)) == 0 }) {
		t.Fatalf("after 20s, send jobs of the email to %s are still to run: %v", recipient, sendJobsToRun(t, b.pool, id))
	}
	return b.delivery(t, notificationID, recipient)
}

// sendJobsToRun lists the notify.send jobs that carry delivery id and are
// still to run (not completed, cancelled or discarded) as "id state
// scheduled_at", matching either form of SendArgs.
func sendJobsToRun(t *testing.T, pool *pgxpool.Pool, id string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT j.id || ' ' || j.state || ' ' || j.scheduled_at FROM river_job j
		WHERE j.kind = 'notify.send' AND j.state NOT IN ('completed', 'cancelled', 'discarded')
		  AND (position(uuid_send($1::uuid) IN decode(coalesce(j.args->>'ids', ''), 'base64')) > 0
		       OR j.args->'delivery_ids' ? $1::text)
		ORDER BY j.id`, id)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

func TestEmailRetriedAfter451ThenSentOnce(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	b.profile(t, "u1", "u1@example.test")
	b.smtp.FailNext(2, 451, "4.7.1 try again later")
	id := b.send(t, "inv-451", "u1")
	servertest.StartWorkers(t, b.deps)
	b.waitDelivery(t, id, "u1", "sent")
	// Nothing more may arrive: no send job of it is left to run.
	d := b.settled(t, id, "u1")
	if d.status != "sent" || d.attempts != 3 {
		t.Fatalf("status %s after %d attempts, want sent after 3", d.status, d.attempts)
	}
	msgs := b.smtp.Messages()
	if len(msgs) != 1 {
		t.Fatalf("messages received = %d, want exactly 1", len(msgs))
	}
	m := msgs[0]
	if m.MessageID != "<"+d.id+"@acme.test>" {
		t.Fatalf("Message-ID = %q, want the delivery id %s (stable across the retries)", m.MessageID, d.id)
	}
	if !strings.Contains(m.HTML, "&lt;script&gt;") || strings.Contains(m.HTML, "<script>") {
		t.Fatalf("html part does not escape params: %q", m.HTML)
	}
	if !strings.Contains(m.Text, "<script>") {
		t.Fatalf("text part = %q, want the param as given", m.Text)
	}
}

func TestEmail550IsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	b.profile(t, "u1", "bounce@example.test")
	b.profile(t, "u2", "ok@example.test")
	b.smtp.FailRecipient("bounce@example.test", 550)
	id := b.send(t, "inv-550", "u1", "u2")
	servertest.StartWorkers(t, b.deps)
	d := b.waitDelivery(t, id, "u1", "refused")
	b.waitDelivery(t, id, "u2", "sent")
	if d.attempts != 1 || !strings.Contains(d.lastError, "550") {
		t.Fatalf("refused delivery: attempts %d, last_error %q", d.attempts, d.lastError)
	}
	if d := b.settled(t, id, "u1"); d.attempts != 1 || d.status != "refused" {
		t.Fatalf("a refused delivery was retried: %+v", d)
	}
}

func TestEmailHungServerTimesOutAndRetries(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	for i := range 5 {
		b.profile(t, fmt.Sprintf("u%d", i), fmt.Sprintf("u%d@example.test", i))
	}
	b.smtp.HangNext(1, 3*time.Second) // the first message hangs past the 400ms timeout
	id := b.send(t, "inv-hang", "u0")
	servertest.StartWorkers(t, b.deps)
	d := b.waitDelivery(t, id, "u0", "sent")
	if d.attempts < 2 {
		t.Fatalf("attempts = %d: the hung attempt should have failed and been retried", d.attempts)
	}
	// Meanwhile other deliveries go through.
	start := time.Now()
	other := b.send(t, "inv-other", "u1", "u2", "u3", "u4")
	for i := 1; i < 5; i++ {
		b.waitDelivery(t, other, fmt.Sprintf("u%d", i), "sent")
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("other deliveries took %s", time.Since(start))
	}
}

func TestEmailClaimRaceSendsOnce(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	b.profile(t, "u1", "u1@example.test")
	id := b.send(t, "inv-race", "u1")
	servertest.StartWorkers(t, b.deps)
	d := b.waitDelivery(t, id, "u1", "sent")

	// Put it back to pending and let two claims race: exactly one wins.
	if _, err := b.pool.Exec(context.Background(), `UPDATE notify_deliveries SET status = 'pending', attempts = 0 WHERE id = $1`, d.id); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wins := make([]int, 8)
	for i := range wins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			claimed, err := stores.ClaimDeliveries(context.Background(), b.pool, []string{d.id}, time.Now())
			if err != nil {
				t.Error(err)
			}
			wins[i] = len(claimed)
		}()
	}
	wg.Wait()
	total := 0
	for _, w := range wins {
		total += w
	}
	if total != 1 {
		t.Fatalf("%d claims won the race, want 1", total)
	}
}

func TestKilledAfterClaimIsRedrivenBySweep(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "retry: {lease: 1s}\n")
	b.profile(t, "u1", "u1@example.test")
	id := b.send(t, "inv-killed", "u1")
	// A worker claimed the delivery 10 s ago and died before settling it: the
	// row is `sending` with an old claim (the fan-out is marked done so it
	// writes nothing itself).
	var deliveryID string
	if _, err := b.pool.Exec(context.Background(), `UPDATE notify_notifications SET status = 'fanned_out' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	err := b.pool.QueryRow(context.Background(), `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, attempts, claimed_at)
		VALUES (gen_random_uuid(), $1, 'invoice.paid', 'inv-killed', 'u1', 'email', 'immediate', 'sending', 1, now() - interval '10 seconds') RETURNING id::text`, id).Scan(&deliveryID)
	if err != nil {
		t.Fatal(err)
	}
	client := servertest.StartWorkers(t, b.deps)
	// The periodic sweep runs on start too; insert one more to be independent of leadership timing.
	if _, err := client.Insert(context.Background(), jobs.RetrySweepArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	d := b.waitDelivery(t, id, "u1", "sent")
	if d.attempts != 2 {
		t.Fatalf("attempts = %d, want 2 (the killed one and the re-drive)", d.attempts)
	}
	if b.smtp.Count() != 1 {
		t.Fatalf("received %d messages, want 1", b.smtp.Count())
	}
	// The re-drive went to send_bulk: under a large fan-out's backlog the
	// sweep re-drives by the thousand, which must not take the send queue's
	// workers from one-recipient notifications.
	var queues []string
	if err := b.pool.QueryRow(context.Background(), `SELECT coalesce(array_agg(DISTINCT queue), '{}') FROM river_job
		WHERE kind = 'notify.send' AND (position(uuid_send($1::uuid) IN decode(args->>'ids', 'base64')) > 0 OR args->'delivery_ids' ? $1::text)`,
		deliveryID).Scan(&queues); err != nil {
		t.Fatal(err)
	}
	if len(queues) != 1 || queues[0] != jobs.QueueSendBulk {
		t.Fatalf("the re-driven delivery's send jobs are on %q, want [%q]", queues, jobs.QueueSendBulk)
	}
}

func TestEmailPastMaxAgeExpires(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "retry: {max_age: 72h}\n")
	b.profile(t, "u1", "u1@example.test")
	b.smtp.FailNext(1, 451, "4.3.0 mailbox busy")
	id := b.send(t, "inv-old", "u1")
	// The injected clock says the delivery is 73 hours old at its first failure.
	b.deps.Clock = func() time.Time { return time.Now().Add(73 * time.Hour) }
	servertest.StartWorkers(t, b.deps)
	d := b.waitDelivery(t, id, "u1", "expired")
	if !strings.Contains(d.lastError, "451") || d.attempts != 1 {
		t.Fatalf("expired delivery: attempts %d, last_error %q", d.attempts, d.lastError)
	}
}

func TestEmailUnavailableQueuesNothing(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	b.profile(t, "has", "has@example.test")
	// "none" has no profile, so no address.
	id := b.send(t, "inv-noaddr", "has", "none")
	servertest.StartWorkers(t, b.deps)
	d := b.waitDelivery(t, id, "none", "unavailable")
	if d.lastError != "recipient has no email address" {
		t.Fatalf("last_error = %q", d.lastError)
	}
	b.waitDelivery(t, id, "has", "sent")
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.send' AND args::text LIKE '%' || $1 || '%'`, d.id); n != 0 {
		t.Fatalf("%d send jobs carry the unavailable delivery", n)
	}

	// A daemon without channels.email: every email delivery is unavailable.
	b2 := setup(t)
	cfg := servertest.Config(t, strings.Split(emailConfig(1, ""), "channels:\n  email:")[0])
	servertest.Wire(b2.deps, servertest.Channels(t, cfg))
	b2.deps.Config = cfg
	client := servertest.Client(t, b2.pool, cfg)
	res, err := client.Send(context.Background(), notifyd.Notification{Notifier: "invoice.paid", Key: "k",
		Recipients: []notifyd.Recipient{{ID: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b2.deps)
	servertest.Eventually(t, 10*time.Second, "unavailable row", func() bool {
		return servertest.Count(t, b2.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND status = 'unavailable' AND last_error = 'email channel is not configured'`, res.ID) == 1
	})
	if n := servertest.Count(t, b2.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.send'`); n != 0 {
		t.Fatalf("%d send jobs enqueued without an email channel", n)
	}
}

func TestEmailRateLimitWaitsOrSnoozesWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		rate    float64
		n       int
		snoozed bool
	}{
		// Two a second: the batch waits the limiter out in-process.
		{"short waits", 2, 6, false},
		// 0.4 a second: the second message would wait 2.5 s, longer than a send
		// waits, so the job snoozes and comes back.
		{"snooze", 0.4, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupEmail(t, "")
			sec, err := b.cfg.Channels["email"].With("", map[string]any{"rate": tc.rate})
			if err != nil {
				t.Fatal(err)
			}
			b.cfg.Channels["email"] = sec
			servertest.Wire(b.deps, servertest.Channels(t, b.cfg))
			var ids []string
			for i := range tc.n {
				id := fmt.Sprintf("r%d", i)
				b.profile(t, id, id+"@example.test")
				ids = append(ids, id)
			}
			start := time.Now()
			nid := b.send(t, "inv-rate", ids...)
			servertest.StartWorkers(t, b.deps)
			for _, r := range ids {
				d := b.waitDelivery(t, nid, r, "sent")
				if d.attempts != 1 || d.lastError != "" {
					t.Fatalf("%s: attempts %d, last_error %q; rate limiting must not spend attempts or look like an error", r, d.attempts, d.lastError)
				}
			}
			if took := time.Since(start); took < 2*time.Second {
				t.Fatalf("%d messages at %v/s took %s: the limiter did not hold them back", tc.n, tc.rate, took)
			}
			// River counts a job's snoozes in its metadata.
			snoozed := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.send' AND (metadata->>'snoozes')::int > 0`) > 0
			if snoozed != tc.snoozed {
				t.Fatalf("send job snoozed = %t, want %t", snoozed, tc.snoozed)
			}
		})
	}
}

func TestCancelWithdrawsUnsentEmail(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	b.profile(t, "u1", "u1@example.test")
	id := b.send(t, "inv-cancel", "u1")
	// Fan out with no send worker able to reach SMTP yet: stop the server.
	b.smtp.Down()
	servertest.StartWorkers(t, b.deps)
	b.waitDelivery(t, id, "u1", "failed")
	n, err := b.client.Cancel(context.Background(), "invoice.paid", "inv-cancel")
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 { // the email delivery and the inbox item
		t.Fatalf("cancel withdrew %d, want the delivery and the inbox item", n)
	}
	if err := b.smtp.Up(); err != nil {
		t.Fatal(err)
	}
	// The retry the failure scheduled runs, and finds the delivery cancelled.
	d := b.settled(t, id, "u1")
	if d.status != "cancelled" || b.smtp.Count() != 0 {
		t.Fatalf("after cancel: status %s, %d messages received", d.status, b.smtp.Count())
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE key = 'inv-cancel'`); n != 0 {
		t.Fatal("the inbox item survived the cancel")
	}
}

// A send in flight when the cancel commits, which then fails temporarily, is
// settled cancelled and never retried.
func TestCancelDuringAFailingSendIsNotRetried(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	b.profile(t, "u1", "u1@example.test")
	b.smtp.HangNext(1, 3*time.Second) // the first attempt hangs past the 400ms timeout
	id := b.send(t, "inv-inflight", "u1")
	servertest.StartWorkers(t, b.deps)
	b.waitDelivery(t, id, "u1", "sending")
	if _, err := b.client.Cancel(context.Background(), "invoice.paid", "inv-inflight"); err != nil {
		t.Fatal(err)
	}
	d := b.waitDelivery(t, id, "u1", "cancelled")
	// The server takes the hung attempt's message when its stall ends, after
	// the client gave up on it: that message arrives, and no other may.
	if msgs := b.smtp.WaitFor(1, 10*time.Second); len(msgs) != 1 {
		t.Fatalf("%d messages received once the stall ended, want the hung attempt's", len(msgs))
	}
	if d2 := b.settled(t, id, "u1"); d2.status != "cancelled" || d2.attempts != d.attempts || b.smtp.Count() != 1 {
		t.Fatalf("after the cancel: %+v, %d messages received, want only the hung attempt's", d2, b.smtp.Count())
	}
}

// A settle that meets a row lock waits it out and records `sent`, instead of
// giving up and leaving the row claimed for the sweep to re-drive and send
// again (or, had the notification been cancelled meanwhile, to record as
// cancelled although it went out). The lock here stands in for a cancel's,
// which keeps rows it skipped locked until it commits
// (stores.TestCancelKeepsALockOnARowItSkipped); it is held 2.5 s past the
// send, where the settle used to give up after half the 2 s lease.
func TestSettleWaitsOutARowLock(t *testing.T) {
	t.Parallel()
	b := setupEmailTimeout(t, "5s", "retry: {lease: 2s}\n")
	b.profile(t, "u1", "u1@example.test")
	const inFlight = 3 * time.Second // time to take the lock while the message is in flight
	b.smtp.HangNext(1, inFlight)
	id := b.send(t, "inv-locked", "u1")
	servertest.StartWorkers(t, b.deps)
	d := b.waitDelivery(t, id, "u1", "sending")

	ctx := context.Background()
	lock, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	var status string
	if err := lock.QueryRow(ctx, `SELECT status FROM notify_deliveries WHERE id = $1 FOR UPDATE`, d.id).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "sending" {
		t.Fatalf("the row was %s when the lock was taken: the send finished before the test could hold its row", status)
	}
	locked := time.Now()
	servertest.Eventually(t, 10*time.Second, "the message arrives", func() bool { return b.smtp.Count() == 1 })
	// Not synchronisation: what is under test is the passing of time. The
	// settle must still be waiting for the lock 2.5 s after the send, well
	// past the half lease (1 s) after which it used to give up.
	time.Sleep(time.Until(locked.Add(inFlight + 2500*time.Millisecond)))
	if got := b.delivery(t, id, "u1"); got.status != "sending" {
		t.Fatalf("while the row was locked its status became %s", got.status)
	}
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := b.waitDelivery(t, id, "u1", "sent")
	if got.attempts != 1 || b.smtp.Count() != 1 {
		t.Fatalf("after the lock: %+v, %d messages received, want sent after one attempt and one message", got, b.smtp.Count())
	}
}

// Each outcome is recorded as it happens, not at the end of the batch: while a
// batch's lane sends one message after another, the ledger never lags the
// SMTP server by more than the one message in flight, so a crash at any
// moment could duplicate at most that one.
func TestOutcomesAreSettledAsTheyHappen(t *testing.T) {
	t.Parallel()
	b := setupEmailTimeout(t, "5s", "")
	const n = 10
	var to []string
	for i := range n {
		id := fmt.Sprintf("u%d", i)
		b.profile(t, id, id+"@example.test")
		to = append(to, id)
	}
	b.smtp.Hang(150 * time.Millisecond) // every message is accepted after 150 ms
	id := b.send(t, "inv-one-by-one", to...)
	servertest.StartWorkers(t, b.deps)
	// Each poll is a sample: the ledger checked against the server.
	var samples int
	servertest.Eventually(t, 20*time.Second, fmt.Sprintf("all %d messages accepted", n), func() bool {
		accepted := b.smtp.Count()
		sent := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND status = 'sent'`, id)
		if sent < accepted-1 {
			t.Fatalf("%d messages accepted but only %d recorded sent: outcomes wait for the end of the batch", accepted, sent)
		}
		if accepted > 0 && accepted < n {
			samples++
		}
		return accepted >= n
	})
	if samples < 5 {
		t.Fatalf("only %d samples while the batch was being sent", samples)
	}
	for _, r := range to {
		b.waitDelivery(t, id, r, "sent")
	}
}
