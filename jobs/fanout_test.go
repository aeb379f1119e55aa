package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	pool   *pgxpool.Pool
	cfg    *config.Config
	deps   *jobs.Deps
	client *notifyd.Client
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.NewDB(t)
	cfg := servertest.Config(t, "")
	client := servertest.Client(t, pool, cfg)
	deps := &jobs.Deps{Pool: pool, Config: cfg, Logger: servertest.Logger()}
	return &bundle{pool: pool, cfg: cfg, client: client, deps: servertest.Wire(deps, servertest.Channels(t, cfg))}
}

func recipients(n int, reason string) []notifyd.Recipient {
	rs := make([]notifyd.Recipient, n)
	for i := range rs {
		rs[i] = notifyd.Recipient{ID: fmt.Sprintf("user-%05d", i), Reason: reason}
	}
	return rs
}

var commentParams = map[string]any{"post_title": "Hello", "author_name": "Ada", "url": "/posts/9"}

func waitStatus(t *testing.T, b *bundle, id, status string) {
	t.Helper()
	if servertest.Wait(30*time.Second, func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = $2`, id, status) == 1
	}) {
		return
	}
	rows, _ := b.pool.Query(context.Background(), `SELECT 'lane ' || lane || ' ' || coalesce(cursor, '-') || ' ' || inline_pos || '/' || inline_end || ' ' || done FROM notify_fanout_lanes WHERE notification_id = $1
		UNION ALL SELECT 'job ' || id || ' ' || args::text || ' ' || state || ' ' || attempt || ' ' || errors::text FROM river_job WHERE kind = 'notify.fanout'`, id)
	lines, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	t.Fatalf("timed out after 30s: notification %s to become %s\n%s", id, status, strings.Join(lines, "\n"))
}

func TestFanoutWritesOneInboxItemPerRecipient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "c-1", Actor: "user-00003",
		Recipients: recipients(450, "author"), Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, res.ID, "fanned_out")

	// 450 recipients minus the actor, in chunks of 100.
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`); n != 449 {
		t.Fatalf("inbox items = %d, want 449", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient = 'user-00003'`); n != 0 {
		t.Fatalf("the actor got %d inbox items", n)
	}
	var title, url, reason string
	if err := b.pool.QueryRow(ctx, `SELECT title, url, reason FROM notify_inbox WHERE recipient = 'user-00000'`).Scan(&title, &url, &reason); err != nil {
		t.Fatal(err)
	}
	if title != "Ada commented on Hello" || url != "/posts/9" || reason != "author" {
		t.Fatalf("item = %q %q %q", title, url, reason)
	}
	if n := servertest.Count(t, b.pool, `SELECT coalesce(sum(cardinality(item_ids)), 0) FROM notify_inbox_changes WHERE kind = 'created'`); n != 449 {
		t.Fatalf("change-log rows = %d, want 449", n)
	}
	// 449 recipients are more than two chunks for each of two lanes: lane 0's
	// job split them and enqueued lane 1's.
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_fanout_lanes WHERE notification_id = $1 AND done`, res.ID); n != 2 {
		t.Fatalf("done lanes = %d, want 2", n)
	}
	// A lane that finished first completes its job after the other one
	// marked the notification fanned_out.
	waitFanoutJobsCompleted(t, b, 2)
}

func TestFanoutReasonPrecedenceAndTopics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Subscribers of post-9: u1 (subscribed), u2 (subscribed), actor u9.
	for _, r := range []string{"u1", "u2", "u9"} {
		if _, err := b.pool.Exec(ctx, `INSERT INTO notify_subscriptions (topic, recipient, reason) VALUES ('post-9', $1, 'subscribed')`, r); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "c-2", Actor: "u9",
		Recipients: []notifyd.Recipient{{ID: "u1", Reason: "mentioned"}, {ID: "u1", Reason: "assigned"}, {ID: "u3"}},
		Topics:     []string{"post-9", "post-9"}, Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, res.ID, "fanned_out")
	got := map[string]string{}
	rows, err := b.pool.Query(ctx, `SELECT recipient, reason FROM notify_inbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r, reason string
		if err := rows.Scan(&r, &reason); err != nil {
			t.Fatal(err)
		}
		got[r] = reason
	}
	want := map[string]string{"u1": "assigned", "u2": "subscribed", "u3": notifyd.DefaultReason}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("inbox reasons = %v, want %v", got, want)
	}
}

func TestFanoutRejectsOverMaxRecipients(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Inline recipients within the limit (3), but the topic brings more.
	for _, r := range []string{"s1", "s2", "s3"} {
		if _, err := b.pool.Exec(ctx, `INSERT INTO notify_subscriptions (topic, recipient) VALUES ('team-1', $1)`, r); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "team.joined", Key: "j-1",
		Recipients: []notifyd.Recipient{{ID: "a"}}, Topics: []string{"team-1"}, Params: map[string]any{"team": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, res.ID, "rejected")
	var reason string
	if err := b.pool.QueryRow(ctx, `SELECT error FROM notify_notifications WHERE id = $1`, res.ID).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if reason != "audience of 4 recipients exceeds max_recipients 3" {
		t.Fatalf("rejection reason = %q", reason)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`) + servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries`); n != 0 {
		t.Fatalf("a rejected notification wrote %d rows", n)
	}

	// Inline over the limit is refused at enqueue when the client has the config.
	_, err = b.client.Send(ctx, notifyd.Notification{Notifier: "team.joined", Key: "j-2",
		Recipients: recipients(4, ""), Params: map[string]any{"team": "x"}})
	if !errors.Is(err, notifyd.ErrTooManyRecipients) {
		t.Fatalf("Send with 4 inline recipients = %v, want ErrTooManyRecipients", err)
	}
}

func TestFanoutNotifyActor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.client.Send(context.Background(), notifyd.Notification{Notifier: "team.joined", Key: "j-3", Actor: "a",
		Recipients: []notifyd.Recipient{{ID: "a"}, {ID: "b"}}, Params: map[string]any{"team": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, res.ID, "fanned_out")
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient IN ('a', 'b')`); n != 2 {
		t.Fatalf("with notify_actor the actor is notified too: got %d items, want 2", n)
	}
}

func TestFanoutRejectsInvalidParams(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// notify_send refuses such params at enqueue (the checkable part of the
	// schema); a notification enqueued before its notifier's schema changed
	// reaches the fan-out with them, written here as notify_send writes it.
	var id string
	err := b.pool.QueryRow(context.Background(), `SELECT id::text FROM notify_enqueue(notify_uuidv7(), 'comment.created',
		'bad', NULL, '{a}', '{direct}', '{}', '{"post_title": 7}', NULL, true, NULL)`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, id, "rejected")
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`); n != 0 {
		t.Fatalf("inbox items = %d, want 0", n)
	}
	// The reason says "invalid params" once.
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1
		AND error = 'invalid params: /author_name: missing required property; /post_title: got number, want string'`, id); n != 1 {
		var reason *string
		_ = b.pool.QueryRow(context.Background(), `SELECT error FROM notify_notifications WHERE id = $1`, id).Scan(&reason)
		t.Fatalf("rejection reason %v", reason)
	}
}

// A fan-out killed between chunks, then replayed from scratch, writes each
// item exactly once and moves no timestamp or read state.
func TestFanoutReplayIsExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var steps atomic.Int32
	b.deps.AfterFanoutStep = func(string) error {
		// Crash after the second and the fourth committed step.
		if n := steps.Add(1); n == 2 || n == 4 {
			return errors.New("simulated crash between chunks")
		}
		return nil
	}
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "c-replay",
		Recipients: recipients(530, "author"), Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, res.ID, "fanned_out")
	if steps.Load() < 4 {
		t.Fatalf("only %d steps ran; the crash points were not reached", steps.Load())
	}
	if n := servertest.Count(t, b.pool, `SELECT count(DISTINCT recipient) FROM notify_inbox`); n != 530 {
		t.Fatalf("distinct recipients = %d, want 530", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT coalesce(sum(cardinality(item_ids)), 0) FROM notify_inbox_changes`); n != 530 {
		t.Fatalf("change-log rows = %d, want 530 (one per item)", n)
	}

	// Read some items, then replay the whole fan-out as a duplicate job would.
	if _, err := b.pool.Exec(ctx, `UPDATE notify_inbox SET read_at = now() WHERE recipient < 'user-00100'`); err != nil {
		t.Fatal(err)
	}
	var before string
	if err := b.pool.QueryRow(ctx, `SELECT string_agg(id::text || created_at::text || coalesce(read_at::text, '-'), ',' ORDER BY id) FROM notify_inbox`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE notify_notifications SET status = 'pending', normalized = false WHERE id = $1`, res.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state) VALUES (jsonb_build_object('notification_id', $1::text), 'notify.fanout', 25, 'fanout', 'available')`, res.ID); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, b, res.ID, "fanned_out")
	waitFanoutJobsCompleted(t, b, 4)
	var after string
	if err := b.pool.QueryRow(ctx, `SELECT string_agg(id::text || created_at::text || coalesce(read_at::text, '-'), ',' ORDER BY id) FROM notify_inbox`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if before != after {
		t.Fatal("the replay changed inbox items (ids, created_at or read_at)")
	}
	if n := servertest.Count(t, b.pool, `SELECT coalesce(sum(cardinality(item_ids)), 0) FROM notify_inbox_changes`); n != 530 {
		t.Fatalf("change-log rows after replay = %d, want 530", n)
	}
}

func TestScheduledFanoutWaitsForSendAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.client.Send(context.Background(), notifyd.Notification{Notifier: "comment.created", Key: "later",
		Recipients: []notifyd.Recipient{{ID: "a"}}, Params: commentParams, SendAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'scheduled'`, res.ID); n != 1 {
		t.Fatal("a notification with send_at in the future is not scheduled")
	}
	// A small notification has no fan-out job: the claimers take it when
	// send_at is due (TestFanoutClaimerTakesScheduledWhenDue), not before.
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND batch_fanout AND send_at > now() + interval '59 minutes'`, res.ID); n != 1 {
		t.Fatal("the notification is not left to the claimers until send_at")
	}
	client, err := jobs.NewRiverClient(b.deps)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := jobs.NewFanoutClaimer(b.deps, client).ClaimOnce(context.Background()); err != nil || n != 0 {
		t.Fatalf("a claim took %d (%v) an hour before send_at", n, err)
	}
	// A large one keeps its fan-out job, scheduled for send_at.
	if _, err := b.client.Send(context.Background(), notifyd.Notification{Notifier: "comment.created", Key: "later-large",
		Recipients: recipients(101, "author"), Params: commentParams, SendAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout' AND state = 'scheduled' AND scheduled_at > now() + interval '59 minutes'`); n != 1 {
		t.Fatal("the fan-out job is not scheduled for send_at")
	}
}

func TestFanoutRejectsTemplatesThatDoNotRender(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := servertest.Config(t, servertest.BaseConfig+`
  deep.field:
    example: {user: {name: Ada}}
    channels:
      in_app: {title: "{{.user.name}}"}
`)
	b.deps.Config = cfg
	servertest.Wire(b.deps, servertest.Channels(t, cfg))
	client := servertest.Client(t, b.pool, cfg)
	// {{.user.name}} with user a string cannot render.
	res, err := client.Send(context.Background(), notifyd.Notification{Notifier: "deep.field", Key: "k",
		Recipients: []notifyd.Recipient{{ID: "a"}}, Params: map[string]any{"user": "not an object"}})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, res.ID, "rejected")
	var reason string
	if err := b.pool.QueryRow(context.Background(), `SELECT error FROM notify_notifications WHERE id = $1`, res.ID).Scan(&reason); err != nil || !strings.Contains(reason, "in_app templates do not render") {
		t.Fatalf("error = %q (%v)", reason, err)
	}
}

func TestFanoutGivesUpAfterItsLastAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deps.AfterFanoutStep = func(string) error { return errors.New("the database is on fire") }
	res, err := b.client.Send(context.Background(), notifyd.Notification{Notifier: "comment.created", Key: "doomed",
		Recipients: recipients(250, "author"), Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	// Make this the job's last attempt.
	if _, err := b.pool.Exec(context.Background(), `UPDATE river_job SET max_attempts = 1 WHERE kind = 'notify.fanout'`); err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, res.ID, "rejected")
	var reason string
	if err := b.pool.QueryRow(context.Background(), `SELECT error FROM notify_notifications WHERE id = $1`, res.ID).Scan(&reason); err != nil || !strings.Contains(reason, "gave up after 1 attempts") || !strings.Contains(reason, "on fire") {
		t.Fatalf("error = %q (%v)", reason, err)
	}
}

// A fan-out statement over one of PostgreSQL's program limits (here, as the
// btree's "index row size exceeds maximum" of a value rendered from params)
// rejects the notification on its first attempt, with the reason, instead of
// retrying it 25 times while nobody gets anything.
func TestFanoutOverADatabaseLimitIsRejectedAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deps.AfterFanoutStep = func(string) error {
		return &pgconn.PgError{Severity: "ERROR", Code: "54000",
			Message: "index row size 7032 exceeds btree version 4 maximum 2704 for index \"notify_batches_open\""}
	}
	res, err := b.client.Send(context.Background(), notifyd.Notification{Notifier: "comment.created", Key: "too-big",
		Recipients: recipients(250, "author"), Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, res.ID, "rejected")
	var reason string
	var attempts int
	if err := b.pool.QueryRow(context.Background(), `SELECT n.error, j.attempt FROM notify_notifications n, river_job j
		WHERE n.id = $1 AND j.kind = 'notify.fanout'`, res.ID).Scan(&reason, &attempts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "over a database limit") || !strings.Contains(reason, "index row size") || attempts != 1 {
		t.Fatalf("error = %q after %d attempts, want the limit named after 1", reason, attempts)
	}
}

// An audience split into lanes — inline recipients and topic subscribers
// overlapping across the split point — reaches each recipient once, with the
// strongest reason, and the notification becomes fanned_out once, when the
// last lane is done. A crash in each lane after its first chunk resumes from
// the lane's cursor.
func TestFanoutLanesSplitInlineAndTopicAudiences(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Inline user-00000..00299 (mentioned), topic subscribers user-00100..00499
	// (subscribed): 500 recipients, 200 of them reached both ways.
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_subscriptions (topic, recipient, reason)
		SELECT 'post-lanes', 'user-' || lpad(g::text, 5, '0'), 'subscribed' FROM generate_series(100, 499) g`); err != nil {
		t.Fatal(err)
	}
	var steps atomic.Int32
	b.deps.AfterFanoutStep = func(string) error {
		if n := steps.Add(1); n == 3 || n == 5 {
			return errors.New("simulated crash between chunks")
		}
		return nil
	}
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "c-lanes",
		Recipients: recipients(300, "mentioned"), Topics: []string{"post-lanes"}, Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, res.ID, "fanned_out")

	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`); n != 500 {
		t.Fatalf("inbox items = %d, want 500", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(DISTINCT recipient) FROM notify_inbox`); n != 500 {
		t.Fatalf("distinct recipients = %d, want 500", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE reason = 'mentioned'`); n != 300 {
		t.Fatalf("items with reason mentioned = %d, want 300 (the inline reason wins over subscribed)", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT coalesce(sum(cardinality(item_ids)), 0) FROM notify_inbox_changes WHERE kind = 'created'`); n != 500 {
		t.Fatalf("change-log rows = %d, want 500", n)
	}
	var lanes int
	var bound string
	if err := b.pool.QueryRow(ctx, `SELECT count(*), min(lo) FROM notify_fanout_lanes WHERE notification_id = $1 AND done`, res.ID).
		Scan(&lanes, &bound); err != nil {
		t.Fatal(err)
	}
	if lanes != 2 || bound <= "user-00100" || bound >= "user-00400" {
		t.Fatalf("%d done lanes split at %q, want 2 split near the middle", lanes, bound)
	}
	if steps.Load() < 5 {
		t.Fatalf("only %d steps ran; the crash points were not reached", steps.Load())
	}
	waitFanoutJobsCompleted(t, b, 2)
}

// Two lanes whose last chunks commit together both go round once more to
// finish the notification. The finish holds no share lock on the
// notification while it updates it: here the other lane's finish holds one
// (a transaction of the test's) and then updates the row itself. Holding
// one as well, the lane's finish would deadlock with it, and PostgreSQL
// would abort one of the two after deadlock_timeout.
func TestFanoutLanesFinishingTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const id = "01900000-0000-7000-8000-0000000f1415"
	for _, sql := range []string{`
INSERT INTO notify_notifications (id, notifier, key, params, status, normalized)
VALUES ($1, 'comment.created', 'c-finish', '{"post_title": "Hello", "author_name": "Ada"}', 'pending', true)`, `
INSERT INTO notify_fanout_lanes (notification_id, lane, lo, hi, inline_pos, inline_end, done)
VALUES ($1, 0, NULL, 'm', 0, 0, true), ($1, 1, 'm', NULL, 0, 0, true)`, `
INSERT INTO river_job (args, kind, max_attempts, priority, queue, state)
VALUES (jsonb_build_object('notification_id', $1::text, 'lane', 1), 'notify.fanout', 25, 1, 'fanout', 'available')`} {
		if _, err := b.pool.Exec(ctx, sql, id); err != nil {
			t.Fatal(err)
		}
	}
	other, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, `SELECT 1 FROM notify_notifications WHERE id = $1 FOR SHARE`, id); err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	servertest.Eventually(t, 10*time.Second, "the lane's finish to wait for the row", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE notify_notifications SET status = ''fanned_out''%'`) == 1
	})
	start := time.Now()
	finished, err := stores.FinishFanout(ctx, other, id)
	if err != nil || !finished {
		t.Fatalf("the other lane's finish: %v, %v (after %v)", finished, err, time.Since(start))
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFanoutJobsCompleted(t, b, 1)
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout' AND attempt = 1 AND errors IS NULL`); n != 1 {
		t.Fatalf("the lane's job failed on its way (a deadlock?): %d clean jobs", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'fanned_out'`, id); n != 1 {
		t.Fatal("the notification is not fanned_out")
	}
}

// waitFanoutJobsCompleted waits until n notify.fanout jobs (the notification's
// first job and its lane jobs) have completed.
func waitFanoutJobsCompleted(t *testing.T, b *bundle, n int) {
	t.Helper()
	servertest.Eventually(t, 10*time.Second, fmt.Sprintf("%d fan-out jobs to complete", n), func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout' AND state = 'completed'`) == n
	})
}
