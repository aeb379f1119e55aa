package jobs_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// digestJobsDone waits until no notify.digest job is left to run (every one
// completed), so that no further digest email can arrive.
func (b *digestBundle) digestJobsDone(t *testing.T) {
	t.Helper()
	servertest.Eventually(t, 30*time.Second, "every notify.digest job completed", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.digest' AND state <> 'completed'`) == 0
	})
}

// byRecipient indexes the received messages by envelope recipient.
func (b *digestBundle) byRecipient(t *testing.T) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for _, m := range b.smtp.Messages() {
		for _, to := range m.To {
			got[to] = append(got[to], m.MessageID)
		}
	}
	return got
}

// digestOf reads the one digest id the recipient's email rows carry.
func (b *digestBundle) digestOf(t *testing.T, recipient string) string {
	t.Helper()
	var ids []string
	rows, err := b.pool.Query(context.Background(), `SELECT DISTINCT coalesce(digest_id::text, '') FROM notify_deliveries
		WHERE recipient = $1 AND channel = 'email'`, recipient)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if len(ids) != 1 || ids[0] == "" {
		t.Fatalf("%s's rows carry digest ids %q, want one", recipient, ids)
	}
	return ids[0]
}

// Three recipients due at once go into one notify.digest job; each gets a
// digest of their own, as its own email with its own Message-ID.
func TestDigestBatchSendsEachRecipientsOwnDigest(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	users := []string{"u1", "u2", "u3"}
	for _, u := range users {
		b.profile(t, u, u+"@example.test")
	}
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "all", users...)
	b.report(t, "two", "u2", "u3")
	b.report(t, "one", "u3")
	b.waitRows(t, "digest_pending", 6)

	b.ahead(13 * time.Hour)
	if n := b.sweep(t, client); n != 3 {
		t.Fatalf("sweep enqueued %d digests, want 3", n)
	}
	b.waitRows(t, "digest_sent", 6)
	b.digestJobsDone(t)
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.digest'
		AND jsonb_array_length(args->'digests') = 3`); n != 1 {
		t.Fatalf("%d notify.digest jobs carry the three digests, want 1", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.digest'`); n != 1 {
		t.Fatalf("%d notify.digest jobs, want 1", n)
	}
	got := b.byRecipient(t)
	msgs := b.smtp.Messages()
	if len(msgs) != 3 {
		t.Fatalf("%d digest emails, want 3", len(msgs))
	}
	for i, u := range users {
		ids := got[u+"@example.test"]
		if want := "<" + b.digestOf(t, u) + "@acme.test>"; len(ids) != 1 || ids[0] != want {
			t.Fatalf("%s received Message-IDs %v, want only %s", u, ids, want)
		}
		subject := fmt.Sprintf("Your %d new notifications", i+1)
		for _, m := range msgs {
			if slices.Contains(m.To, u+"@example.test") && m.Subject != subject {
				t.Fatalf("%s's digest: subject %q, want %q", u, m.Subject, subject)
			}
		}
	}
}

// A job carries a recipient whose rows another job has claimed meanwhile:
// that recipient is skipped (no email, the other claim untouched), the
// others in the batch get their digests.
func TestDigestBatchSkipsRowsClaimedByAnotherJob(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	users := []string{"u1", "u2", "u3"}
	for _, u := range users {
		b.profile(t, u, u+"@example.test")
	}
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "a", users...)
	b.report(t, "b", users...)
	b.waitRows(t, "digest_pending", 6)

	ctx := context.Background()
	now := time.Now().Truncate(time.Microsecond)
	due := now.Add(time.Hour)
	other := uuidv7.String()
	claim, err := stores.ClaimDigest(ctx, b.pool, stores.DigestClaimRequest{Recipient: "u2", DigestID: other,
		DueAt: due, Now: now, MaxItems: 50})
	if err != nil || claim.Count != 2 {
		t.Fatalf("the other job's claim: %+v, %v", claim, err)
	}
	b.ahead(13 * time.Hour)
	var refs []jobs.DigestRef
	for _, u := range users {
		refs = append(refs, jobs.DigestRef{Recipient: u, DueAt: due.UTC(), OldestID: "test"})
	}
	if _, err := client.Insert(ctx, jobs.DigestArgs{Digests: refs}, nil); err != nil {
		t.Fatal(err)
	}
	b.waitRows(t, "digest_sent", 4)
	b.digestJobsDone(t)
	got := b.byRecipient(t)
	if len(got["u1@example.test"]) != 1 || len(got["u3@example.test"]) != 1 || len(got["u2@example.test"]) != 0 || b.smtp.Count() != 2 {
		t.Fatalf("received %v, want one digest each for u1 and u3 and none for u2", got)
	}
	n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries
		WHERE recipient = 'u2' AND status = 'digest_sending' AND digest_id = $1::uuid AND claimed_at = $2`, other, claim.ClaimedAt)
	if n != 2 {
		t.Fatalf("%d of u2's rows still held by the other claim, want 2", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.digest' AND attempt = 1`); n != 1 {
		t.Fatalf("%d digest jobs completed on their first attempt, want 1", n)
	}
}

// Rows of cancelled notifications in a batch become digest_dropped: a
// recipient left with nothing gets no email, one with a row left gets a
// digest of that row only.
func TestDigestBatchDropsCancelledRows(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	b.profile(t, "u2", "u2@example.test")
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "keep", "u1")
	b.report(t, "raced", "u1", "u2")
	b.report(t, "cancelled", "u2")
	b.waitRows(t, "digest_pending", 4)
	if _, err := b.client.Cancel(context.Background(), "report.ready", "cancelled"); err != nil {
		t.Fatal(err)
	}
	// A cancel its statement's snapshot missed: the rows stay digest_pending
	// for the claim to drop.
	if _, err := b.pool.Exec(context.Background(), `UPDATE notify_notifications SET status = 'cancelled' WHERE key = 'raced'`); err != nil {
		t.Fatal(err)
	}

	b.ahead(13 * time.Hour)
	if n := b.sweep(t, client); n != 2 {
		t.Fatalf("sweep enqueued %d digests, want 2 (u2 still has a pending row)", n)
	}
	b.waitRows(t, "digest_sent", 1)
	b.digestJobsDone(t)
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.digest'`); n != 1 {
		t.Fatalf("%d notify.digest jobs, want 1 for both recipients", n)
	}
	msgs := b.smtp.Messages()
	if len(msgs) != 1 || !slices.Equal(msgs[0].To, []string{"u1@example.test"}) || strings.TrimSpace(msgs[0].Text) != "- Report keep" {
		t.Fatalf("received %d emails (%+v), want u1's digest of the kept item only", len(msgs), msgs)
	}
	for _, c := range []struct{ key, recipient string }{{"raced", "u1"}, {"raced", "u2"}, {"cancelled", "u2"}} {
		st, lastErr, _ := b.rowStatus(t, c.key, c.recipient)
		if st != "digest_dropped" || lastErr != "notification cancelled" {
			t.Fatalf("%s/%s: status %s, last_error %q; want digest_dropped", c.key, c.recipient, st, lastErr)
		}
	}
}

// One recipient's email failing does not fail the batch: a permanent refusal
// fails that digest only, a temporary one is retried on its own, and the
// others are sent and settled; the job itself completes.
func TestDigestBatchFailureOfOneRecipientSparesTheOthers(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	users := []string{"u1", "u2", "u3", "u4"}
	for _, u := range users {
		b.profile(t, u, u+"@example.test")
	}
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "a", users...)
	b.waitRows(t, "digest_pending", 4)
	b.smtp.FailRecipient("u2@example.test", 550)
	b.smtp.FailRecipient("u3@example.test", 451)

	b.ahead(13 * time.Hour)
	if n := b.sweep(t, client); n != 4 {
		t.Fatalf("sweep enqueued %d digests, want 4", n)
	}
	// u3's digest waits for a retry under its digest id; the batch's job is
	// done with the others settled.
	servertest.Eventually(t, 20*time.Second, "u3's digest to wait for a retry after a 451", func() bool {
		st, lastErr, _ := b.rowStatus(t, "a", "u3")
		return st == "digest_pending" && strings.Contains(lastErr, "451")
	})
	for _, c := range []struct{ recipient, status string }{{"u1", "digest_sent"}, {"u2", "digest_failed"}, {"u4", "digest_sent"}} {
		if st, lastErr, attempts := b.rowStatus(t, "a", c.recipient); st != c.status || attempts != 1 {
			t.Fatalf("%s: status %s after %d attempts (%q), want %s after 1", c.recipient, st, attempts, lastErr, c.status)
		}
	}
	if _, lastErr, _ := b.rowStatus(t, "a", "u2"); !strings.Contains(lastErr, "550") {
		t.Fatalf("u2: last_error %q, want the 550", lastErr)
	}
	u3 := b.digestOf(t, "u3")
	b.smtp.FailRecipient("u3@example.test", 0)
	b.waitRows(t, "digest_sent", 3)
	b.digestJobsDone(t)

	got := b.byRecipient(t)
	for u, want := range map[string]int{"u1": 1, "u2": 0, "u3": 1, "u4": 1} {
		if len(got[u+"@example.test"]) != want {
			t.Fatalf("received %v, want %d digest(s) for %s", got, want, u)
		}
	}
	if ids := got["u3@example.test"]; ids[0] != "<"+u3+"@acme.test>" {
		t.Fatalf("u3's retried digest has Message-ID %s, want its digest id %s", ids[0], u3)
	}
	if _, _, attempts := b.rowStatus(t, "a", "u3"); attempts < 2 {
		t.Fatalf("u3: %d attempts, want the failed one and the retry", attempts)
	}
	// The batch's job completed on its first attempt: the failures were its
	// digests', not its own.
	var errs int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = 'notify.digest'
		AND jsonb_array_length(args->'digests') = 4 AND state = 'completed' AND attempt = 1 AND coalesce(array_length(errors, 1), 0) = 0`).Scan(&errs); err != nil || errs != 1 {
		t.Fatalf("the batch's job did not complete cleanly on its first attempt (%d, %v)", errs, err)
	}
}

// The sweep skips a digest that an unfinished job carries (in a batch, or as
// a single-digest job written before jobs carried batches), and enqueues it
// again once that job is discarded or finished without taking the rows.
func TestDigestSweepSkipsDigestsUnfinishedJobsCarry(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, "digest: {schedule: \"0 8 * * *\", sweep: \"0 0 1 1 *\", timezone: UTC}\n")
	ctx := context.Background()
	created := time.Date(2026, 3, 7, 18, 0, 0, 0, time.UTC)
	for _, r := range []string{"a", "b", "c"} {
		_, err := b.pool.Exec(ctx, `WITH n AS (
			INSERT INTO notify_notifications (id, notifier, key, params, status) VALUES (gen_random_uuid(), 'report.ready', $1, '{}', 'fanned_out') RETURNING id)
			INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, created_at)
			SELECT gen_random_uuid(), n.id, 'report.ready', $1, $1, 'email', 'digest', 'digest_pending', $2 FROM n`, r, created)
		if err != nil {
			t.Fatal(err)
		}
	}
	client, err := jobs.NewRiverClient(b.deps) // insert-only: nothing runs the jobs
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 8, 9, 0, 0, 0, time.UTC)
	b.deps.Clock = func() time.Time { return now }
	var oldestC string
	if err := b.pool.QueryRow(ctx, `SELECT id::text FROM notify_deliveries WHERE recipient = 'c'`).Scan(&oldestC); err != nil {
		t.Fatal(err)
	}
	due := time.Date(2026, 3, 8, 8, 0, 0, 0, time.UTC)
	if _, err := client.Insert(ctx, jobs.DigestArgs{Recipient: "c", DueAt: due, OldestID: oldestC}, nil); err != nil {
		t.Fatal(err)
	}
	finish := func(state, where string) {
		t.Helper()
		if _, err := b.pool.Exec(ctx, `UPDATE river_job SET state = $1::river_job_state, finalized_at = now()
			WHERE kind = 'notify.digest' AND state = 'available' AND `+where, state); err != nil {
			t.Fatal(err)
		}
	}

	if n := b.sweep(t, client); n != 2 {
		t.Fatalf("first sweep enqueued %d, want 2 (c is carried by its single-digest job)", n)
	}
	if n := b.sweep(t, client); n != 0 {
		t.Fatalf("second sweep enqueued %d, want 0 (a and b wait in a batch)", n)
	}
	finish("discarded", `args ? 'digests'`)
	if n := b.sweep(t, client); n != 2 {
		t.Fatalf("sweep after the batch was discarded enqueued %d, want 2 (a and b again)", n)
	}
	finish("completed", `args ? 'recipient'`)
	if n := b.sweep(t, client); n != 1 {
		t.Fatalf("sweep after c's job completed without taking its row enqueued %d, want 1", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.digest' AND state = 'available'`); n != 2 {
		t.Fatalf("%d digest jobs waiting, want 2 (a and b's second batch, c's)", n)
	}
}
