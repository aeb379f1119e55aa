package jobs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

func batchConfig(port int, window string, max int) string {
	return servertest.BaseConfig + fmt.Sprintf(`
  post.liked:
    params: {type: object, properties: {post: {type: string}, who: {type: string}}}
    example: {post: p1, who: Ada}
    batch: {key: "{{.post}}", window: %s, max: %d}
    channels:
      in_app: {title: "{{.Count}} likes on {{.post}} ({{range $i, $a := .Actors}}{{if $i}}, {{end}}{{$a}}{{end}})"}
      email:
        subject: "{{.Count}} likes on {{.post}}"
        text: "{{range .Items}}{{.who}};{{end}}"
channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: 127.0.0.1, port: %d, tls: none}
    timeout: 2s
`, window, max, port)
}

func setupBatch(t *testing.T, window string, max int) *emailBundle {
	t.Helper()
	b := setup(t)
	srv := smtpcapture.Start(t)
	b.cfg = servertest.Config(t, batchConfig(srv.Port(), window, max))
	b.deps.Config = b.cfg
	servertest.Wire(b.deps, servertest.Channels(t, b.cfg))
	client := servertest.Client(t, b.pool, b.cfg)
	b.client = client
	return &emailBundle{bundle: b, smtp: srv}
}

func (b *emailBundle) like(t *testing.T, key, post, who string) string {
	t.Helper()
	res, err := b.client.Send(context.Background(), notifyd.Notification{Notifier: "post.liked", Key: key, Actor: who,
		Params: map[string]any{"post": post, "who": who}, Recipients: []notifyd.Recipient{{ID: "u1"}}})
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

// Three likes of one post within the window: one in-app item, re-rendered
// in place (unread again) as they arrive; one email when the window closes,
// with the batch's count, actors and items; the later likes' emails are
// batched into the first's. A like after the window opens the next batch.
func TestBatchCollapsesABurst(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, "2s", 0)
	ctx := context.Background()
	b.profile(t, "u1", "u1@example.test")
	servertest.StartWorkers(t, b.deps)
	first := b.like(t, "l-1", "p1", "ada")
	b.waitDelivery(t, first, "u1", "scheduled")
	// Read the item: a later like makes it unread again.
	b.markInbox(t, "u1", "post.liked", "l-1", stores.InboxOpRead)
	second := b.like(t, "l-2", "p1", "bob")
	b.waitDelivery(t, second, "u1", "batched")
	third := b.like(t, "l-3", "p1", "ada")
	d3 := b.waitDelivery(t, third, "u1", "batched")
	other := b.like(t, "l-4", "p2", "cy") // another key: a batch of its own

	var title string
	var readAt *time.Time
	if err := b.pool.QueryRow(ctx, `SELECT title, read_at FROM notify_inbox WHERE recipient = 'u1' AND key = 'l-1'`).Scan(&title, &readAt); err != nil {
		t.Fatal(err)
	}
	if title != "3 likes on p1 (ada, bob)" || readAt != nil {
		t.Fatalf("batch item %q read_at %v, want re-rendered and unread", title, readAt)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient = 'u1' AND key IN ('l-2', 'l-3')`); n != 0 {
		t.Fatalf("later members created %d inbox items", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox_changes WHERE kind = 'updated' AND data ? 'title'`); n != 2 {
		t.Fatalf("%d inbox.updated changes for the batch item, want 2", n)
	}

	lead := b.waitDelivery(t, first, "u1", "sent")
	if d3.lastError != "" {
		t.Fatalf("batched delivery has last_error %q", d3.lastError)
	}
	n, err := stores.GetNotification(ctx, b.pool, third, 10, "in_app")
	if err != nil {
		t.Fatal(err)
	}
	var into string
	for _, d := range n.Deliveries {
		if d.Channel == "email" && d.BatchedInto != nil {
			into = *d.BatchedInto
		}
	}
	if into != lead.id {
		t.Fatalf("batched_into = %q, want the first like's delivery %s", into, lead.id)
	}
	b.waitDelivery(t, other, "u1", "sent")
	msgs := b.smtp.Messages()
	if len(msgs) != 2 {
		t.Fatalf("%d emails, want 2 (one per batch)", len(msgs))
	}
	subjects := msgs[0].Subject + "|" + msgs[1].Subject
	if !strings.Contains(subjects, "3 likes on p1") || !strings.Contains(subjects, "1 likes on p2") {
		t.Fatalf("subjects %q", subjects)
	}
	for _, m := range msgs {
		if strings.Contains(m.Subject, "p1") && m.Text != "ada;bob;ada;" {
			t.Fatalf("batch email text %q, want every member oldest first", m.Text)
		}
	}

	// The window is over: the next like opens a new batch.
	fifth := b.like(t, "l-5", "p1", "dee")
	b.waitDelivery(t, fifth, "u1", "sent")
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_batches WHERE batch_key = 'p1'`); n != 2 {
		t.Fatalf("%d batches of p1, want 2", n)
	}
}

// 1,000 likes of one post sent at once and fanned out by two daemons (two
// River clients on the same database): exactly one batch, every member
// counted once, one inbox item, 999 deliveries batched into the first, and
// one email when the batch reaches max.
func TestBatchThousandConcurrentSendsTwoDaemons(t *testing.T) {
	t.Parallel()
	const n = 1000
	b := setupBatch(t, "1h", n)
	ctx := context.Background()
	b.profile(t, "u1", "u1@example.test")
	b.cfg.Queues.Fanout = 6
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := b.client.Send(ctx, notifyd.Notification{Notifier: "post.liked", Key: fmt.Sprintf("l-%04d", i),
				Actor: fmt.Sprintf("a%d", i%7), Params: map[string]any{"post": "p1", "who": fmt.Sprint(i)},
				Recipients: []notifyd.Recipient{{ID: "u1"}}}); err != nil {
				t.Error(err)
			}
		})
	}
	// Two daemons, started while the sends are still arriving.
	servertest.StartWorkers(t, b.deps)
	servertest.StartWorkers(t, b.deps)
	wg.Wait()
	servertest.Eventually(t, 120*time.Second, "every like fanned out", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE status = 'fanned_out'`) == n
	})
	msgs := b.smtp.WaitFor(1, 60*time.Second)
	if len(msgs) != 1 || msgs[0].Subject != fmt.Sprintf("%d likes on p1", n) {
		t.Fatalf("emails %d, first %q; want one for %d likes", len(msgs), subjectOf(msgs), n)
	}
	var batches, count, members, distinct, items int
	if err := b.pool.QueryRow(ctx, `SELECT count(*), max(count), max(cardinality(members)),
		max((SELECT count(DISTINCT m) FROM unnest(members) m)), max(jsonb_array_length(items)) FROM notify_batches`).Scan(
		&batches, &count, &members, &distinct, &items); err != nil {
		t.Fatal(err)
	}
	if batches != 1 || count != n || members != n || distinct != n || items != n {
		t.Fatalf("batches %d, count %d, members %d (%d distinct), items %d; want 1 batch of %d", batches, count, members, distinct, items, n)
	}
	if got := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`); got != 1 {
		t.Fatalf("%d inbox items, want 1", got)
	}
	// The sink has the email; the ledger says so once the send's settle
	// commits, a moment later.
	servertest.Eventually(t, 30*time.Second, "the carrying delivery settled sent", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE batch_id IS NOT NULL AND status = 'sent'`) == 1
	})
	if got := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries d WHERE status = 'batched'
		AND batched_into = (SELECT id FROM notify_deliveries WHERE batch_id IS NOT NULL AND status = 'sent')`); got != n-1 {
		t.Fatalf("%d deliveries batched into the sent one, want %d", got, n-1)
	}
	var title string
	if err := b.pool.QueryRow(ctx, `SELECT title FROM notify_inbox`).Scan(&title); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(title, fmt.Sprintf("%d likes on p1 (", n)) || strings.Count(title, ",") != 6 {
		t.Fatalf("item title %q, want the count and 7 distinct actors", title)
	}
	if got := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE status NOT IN ('sent', 'batched')`); got != 0 {
		t.Fatalf("%d deliveries neither sent nor batched", got)
	}
}

func subjectOf(msgs []smtpcapture.Message) string {
	if len(msgs) == 0 {
		return ""
	}
	return msgs[0].Subject
}

// batchItem is the recipient's one in-app item of batch key p1: its title,
// key, notification and whether it is read.
// unlike cancels like key of post.liked and waits until u1's batch item is
// rendered again with title.
func (b *emailBundle) unlike(t *testing.T, key, title string) {
	t.Helper()
	if _, err := b.client.Cancel(context.Background(), "post.liked", key); err != nil {
		t.Fatal(err)
	}
	servertest.Eventually(t, 10*time.Second, "the batch's item rendered without the cancelled like", func() bool {
		got, _, _, _ := b.batchItem(t, "u1")
		return got == title
	})
}

// wantBatch checks the count and the actors (comma-separated) of the batch
// with batch key batchKey.
func (b *emailBundle) wantBatch(t *testing.T, batchKey string, count int, actors string) {
	t.Helper()
	var n int
	var got []string
	if err := b.pool.QueryRow(context.Background(), `SELECT count, actors FROM notify_batches WHERE batch_key = $1`, batchKey).
		Scan(&n, &got); err != nil {
		t.Fatal(err)
	}
	if n != count || strings.Join(got, ",") != actors {
		t.Fatalf("batch count %d actors %v, want %d and %s", n, got, count, actors)
	}
}

func (b *emailBundle) batchItem(t *testing.T, recipient string) (title, key, notification string, read bool) {
	t.Helper()
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient = $1`, recipient); n != 1 {
		t.Fatalf("%s has %d inbox items, want the batch's one", recipient, n)
	}
	if err := b.pool.QueryRow(context.Background(), `SELECT title, key, notification_id::text, read_at IS NOT NULL
		FROM notify_inbox WHERE recipient = $1`, recipient).Scan(&title, &key, &notification, &read); err != nil {
		t.Fatal(err)
	}
	return title, key, notification, read
}

// waitSendJobsDone waits until no send job is left to run: every message
// the ledger will ever send for the test has been sent.
func (b *emailBundle) waitSendJobsDone(t *testing.T) {
	t.Helper()
	servertest.Eventually(t, 20*time.Second, "every send job finished", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.send'
			AND state IN ('available', 'scheduled', 'running', 'retryable')`) == 0
	})
}

// threeLikes runs workers on a batching notifier with a 2 s window and
// sends u1 three likes of post p1, by ada, bob and cy, each fanned out
// before the next: the first carries the batch, the others are batched.
func threeLikes(t *testing.T) (b *emailBundle, first, second, third string) {
	t.Helper()
	b = setupBatch(t, "2s", 0)
	b.profile(t, "u1", "u1@example.test")
	servertest.StartWorkers(t, b.deps)
	first = b.like(t, "l-1", "p1", "ada")
	b.waitDelivery(t, first, "u1", "scheduled")
	second = b.like(t, "l-2", "p1", "bob")
	b.waitDelivery(t, second, "u1", "batched")
	third = b.like(t, "l-3", "p1", "cy")
	b.waitDelivery(t, third, "u1", "batched")
	return b, first, second, third
}

// Cancelling the first like of a batch (an unlike) hands the batch to the
// next like: the email still goes once, when the window closes, without the
// cancelled like; the batch's in-app item stays, moves to the next like and
// is rendered again without it, read as it was. Before, the cancel took the
// carrying delivery and the item with it, and the likes batched into them
// were never sent nor shown.
func TestCancelFirstMemberHandsTheBatchOn(t *testing.T) {
	t.Parallel()
	b, first, second, third := threeLikes(t)
	ctx := context.Background()
	b.markInbox(t, "u1", "post.liked", "l-1", stores.InboxOpRead)
	b.unlike(t, "l-1", "2 likes on p1 (bob, cy)")
	_, key, notification, read := b.batchItem(t, "u1")
	if key != "l-2" || notification != second || !read {
		t.Fatalf("batch item key %q notification %s read %v; want l-2's (%s), still read", key, notification, read, second)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox_changes WHERE kind = 'deleted'`); n != 0 {
		t.Fatalf("%d deleted changes: the batch's item was kept", n)
	}

	lead := b.waitDelivery(t, second, "u1", "sent")
	b.waitSendJobsDone(t)
	if d := b.delivery(t, first, "u1"); d.status != "cancelled" {
		t.Fatalf("the cancelled like's email delivery is %s", d.status)
	}
	var into string
	if err := b.pool.QueryRow(ctx, `SELECT coalesce(batched_into::text, '') FROM notify_deliveries
		WHERE notification_id = $1 AND channel = 'email' AND status = 'batched'`, third).Scan(&into); err != nil {
		t.Fatal(err)
	}
	if into != lead.id {
		t.Fatalf("the third like is batched into %q, want the second's delivery %s", into, lead.id)
	}
	msgs := b.smtp.Messages()
	if len(msgs) != 1 || msgs[0].Subject != "2 likes on p1" || msgs[0].Text != "bob;cy;" {
		t.Fatalf("emails %d (first %q %q), want one: 2 likes, bob;cy;", len(msgs), subjectOf(msgs), textOf(msgs))
	}
	b.wantBatch(t, "p1", 2, "bob,cy")
}

// Cancelling a later like takes it out of the batch: the email and the
// item count the others only, and its batched delivery is cancelled.
func TestCancelLaterMemberLeavesTheBatch(t *testing.T) {
	t.Parallel()
	b, first, second, third := threeLikes(t)
	b.unlike(t, "l-2", "2 likes on p1 (ada, cy)")
	if d := b.delivery(t, second, "u1"); d.status != "cancelled" {
		t.Fatalf("the cancelled like's email delivery is %s, want cancelled", d.status)
	}
	lead := b.waitDelivery(t, first, "u1", "sent")
	b.waitSendJobsDone(t)
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1
		AND channel = 'email' AND status = 'batched' AND batched_into = $2`, third, lead.id); n != 1 {
		t.Fatalf("the third like is not batched into the first's delivery")
	}
	msgs := b.smtp.Messages()
	if len(msgs) != 1 || msgs[0].Subject != "2 likes on p1" || msgs[0].Text != "ada;cy;" {
		t.Fatalf("emails %d (first %q %q), want one: 2 likes, ada;cy;", len(msgs), subjectOf(msgs), textOf(msgs))
	}
}

// Cancelling a batch's only like withdraws all of it, and closes the batch:
// the next like opens a batch of its own.
func TestCancelOnlyMemberClosesTheBatch(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, "1s", 0)
	ctx := context.Background()
	b.profile(t, "u1", "u1@example.test")
	servertest.StartWorkers(t, b.deps)
	first := b.like(t, "l-1", "p1", "ada")
	b.waitDelivery(t, first, "u1", "scheduled")
	if _, err := b.client.Cancel(ctx, "post.liked", "l-1"); err != nil {
		t.Fatal(err)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient = 'u1'`); n != 0 {
		t.Fatalf("%d inbox items left, want none", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_batches WHERE state = 'closed' AND count = 0`); n != 1 {
		t.Fatalf("%d empty closed batches, want the cancelled one", n)
	}
	second := b.like(t, "l-2", "p1", "bob")
	b.waitDelivery(t, second, "u1", "sent")
	b.waitSendJobsDone(t)
	if d := b.delivery(t, first, "u1"); d.status != "cancelled" {
		t.Fatalf("the cancelled like's email delivery is %s", d.status)
	}
	msgs := b.smtp.Messages()
	if len(msgs) != 1 || msgs[0].Subject != "1 likes on p1" || msgs[0].Text != "bob;" {
		t.Fatalf("emails %d (first %q %q), want one for bob's like", len(msgs), subjectOf(msgs), textOf(msgs))
	}
}

func textOf(msgs []smtpcapture.Message) string {
	if len(msgs) == 0 {
		return ""
	}
	return msgs[0].Text
}

// notify_cancel enqueues send and batch_render jobs in SQL: the kinds,
// queues and attempts it names are the Go job kinds' own.
func TestCancelEnqueuesJobsAsTheirKindsDeclare(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var src string
	if err := b.pool.QueryRow(context.Background(), `SELECT string_agg(prosrc, ' ') FROM pg_proc WHERE proname = 'notify_cancel'`).Scan(&src); err != nil {
		t.Fatal(err)
	}
	for _, a := range []interface {
		river.JobArgs
		river.JobArgsWithInsertOpts
	}{jobs.SendArgs{}, jobs.BatchRenderArgs{}} {
		o := a.InsertOpts()
		want := fmt.Sprintf("'%s', %d, 1, '%s'", a.Kind(), o.MaxAttempts, o.Queue)
		if !strings.Contains(src, want) {
			t.Errorf("notify_cancel does not enqueue %s as %s", a.Kind(), want)
		}
	}
}

// Cancelling the first like after the batch's email went out (an unlike
// minutes later) leaves the email as it was sent, but the batch's in-app
// item, which shows the other likes too, stays: it moves to the next like
// and is rendered without the cancelled one.
func TestCancelFirstMemberAfterTheEmailKeepsTheItem(t *testing.T) {
	t.Parallel()
	b, first, second, _ := threeLikes(t)
	b.waitDelivery(t, first, "u1", "sent")
	b.waitSendJobsDone(t)
	b.unlike(t, "l-1", "2 likes on p1 (bob, cy)")
	if _, key, notification, _ := b.batchItem(t, "u1"); key != "l-2" || notification != second {
		t.Fatalf("batch item key %q notification %s, want l-2's", key, notification)
	}
	if d := b.delivery(t, first, "u1"); d.status != "sent" {
		t.Fatalf("the sent email's delivery is %s after the cancel", d.status)
	}
	b.waitSendJobsDone(t)
	if msgs := b.smtp.Messages(); len(msgs) != 1 || msgs[0].Subject != "3 likes on p1" {
		t.Fatalf("emails %d (first %q), want the one batch email of 3 likes", len(msgs), subjectOf(msgs))
	}
}

// Cancelling a later like after the batch's email went takes it out of the
// batch's in-app item too: the item is rendered again without it, read as it
// was. Its delivery stays batched into the sent one (that email did carry
// it), and nothing is sent again.
func TestCancelLaterMemberAfterTheEmailLeavesTheItem(t *testing.T) {
	t.Parallel()
	b, first, second, _ := threeLikes(t)
	lead := b.waitDelivery(t, first, "u1", "sent")
	b.waitSendJobsDone(t)
	b.markInbox(t, "u1", "post.liked", "l-1", stores.InboxOpRead)
	b.unlike(t, "l-2", "2 likes on p1 (ada, cy)")
	if _, key, notification, read := b.batchItem(t, "u1"); key != "l-1" || notification != first || !read {
		t.Fatalf("batch item key %q notification %s read %v; want l-1's (%s), still read", key, notification, read, first)
	}
	b.wantBatch(t, "p1", 2, "ada,cy")
	if d := b.delivery(t, second, "u1"); d.status != "batched" {
		t.Fatalf("the cancelled like's delivery is %s, want still batched into the sent email", d.status)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1
		AND channel = 'email' AND status = 'batched' AND batched_into = $2`, second, lead.id); n != 1 {
		t.Fatalf("the cancelled like's delivery no longer names the email that carried it")
	}
	b.waitSendJobsDone(t)
	if msgs := b.smtp.Messages(); len(msgs) != 1 || msgs[0].Subject != "3 likes on p1" {
		t.Fatalf("emails %d (first %q), want the one batch email of 3 likes", len(msgs), subjectOf(msgs))
	}
}

// A batch key rendered from a 7,000-character param (over the btree limit of
// the open-batches index) is stored hashed: the notification reaches every
// recipient on every channel, in-app included, and a second like of the same
// post joins the same batch while one of a post that differs only at its end
// opens its own.
func TestBatchKeyFromAHugeParamBlocksNoOne(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, "1s", 0)
	ctx := context.Background()
	b.profile(t, "u1", "u1@example.test")
	b.profile(t, "u2", "u2@example.test")
	servertest.StartWorkers(t, b.deps)
	// 7,000 characters that do not compress (PostgreSQL compresses a long
	// index entry first: a repeated character would fit).
	var sb strings.Builder
	sb.WriteString("éé")
	for i := 0; sb.Len() < 7000; i++ {
		sum := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		sb.WriteString(hex.EncodeToString(sum[:]))
	}
	long := sb.String()
	like := func(key, post string) string {
		t.Helper()
		res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "post.liked", Key: key, Actor: "ada",
			Params: map[string]any{"post": post, "who": "ada"}, Recipients: []notifyd.Recipient{{ID: "u1"}, {ID: "u2"}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	first := like("huge-1", long+"a")
	second := like("huge-2", long+"a")
	other := like("huge-3", long+"b")
	// The two likes of the same post fan out concurrently: whichever opens
	// the batch carries it and is sent, the other is batched into it.
	for _, r := range []string{"u1", "u2"} {
		servertest.Eventually(t, 20*time.Second, "one like of the post sent to "+r+", the other batched into it", func() bool {
			var a, z string
			_ = b.pool.QueryRow(ctx, `SELECT
				(SELECT status FROM notify_deliveries WHERE notification_id = $1 AND recipient = $3 AND channel = 'email'),
				(SELECT status FROM notify_deliveries WHERE notification_id = $2 AND recipient = $3 AND channel = 'email')`,
				first, second, r).Scan(&a, &z)
			return (a == "sent" && z == "batched") || (a == "batched" && z == "sent")
		})
		b.waitDelivery(t, other, r, "sent")
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE key IN ('huge-1', 'huge-2', 'huge-3')`); n != 4 {
		t.Fatalf("%d inbox items, want one per recipient per batch (4)", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_batches WHERE octet_length(batch_key) > $1`, jobs.MaxBatchKey); n != 0 {
		t.Fatalf("%d batches with a key over %d bytes", n, jobs.MaxBatchKey)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(DISTINCT batch_key) FROM notify_batches WHERE batch_key LIKE 'éé%…sha256:%'`); n != 2 {
		t.Fatalf("%d distinct hashed keys, want 2 (one per post)", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE status <> 'fanned_out'`); n != 0 {
		t.Fatalf("%d notifications not fanned out", n)
	}
}

// The first like's email, carrying the batch, is in flight when that like is
// cancelled (an unlike), and the send fails temporarily: the carrier is not
// cancelled with its notification (the batch's other members ride on it),
// it is retried and sent, and the second like's batched delivery names a
// sent one. Cancelled at that point, the members' email was never sent (the
// workflows chaos scenario's "batched deliveries name a delivery that was
// not sent").
func TestCancelledCarrierInFlightStillCarriesItsBatch(t *testing.T) {
	t.Parallel()
	b := setupBatch(t, "1s", 0)
	b.deps.Backoff = func(int) time.Duration { return 100 * time.Millisecond }
	ctx := context.Background()
	b.profile(t, "u1", "u1@example.test")
	servertest.StartWorkers(t, b.deps)
	first := b.like(t, "c-1", "p1", "ada")
	b.waitDelivery(t, first, "u1", "scheduled")
	second := b.like(t, "c-2", "p1", "bob")
	b.waitDelivery(t, second, "u1", "batched")
	b.smtp.HangNext(1, 3*time.Second) // the email timeout is 2s: a temporary failure
	servertest.Eventually(t, 20*time.Second, "the carrier's send in flight", func() bool { return b.smtp.Hanging() == 1 })
	if _, err := b.pool.Exec(ctx, `SELECT notify_cancel('post.liked', 'c-1')`); err != nil {
		t.Fatal(err)
	}
	lead := b.waitDelivery(t, first, "u1", "sent")
	member := b.delivery(t, second, "u1")
	var into string
	if err := b.pool.QueryRow(ctx, `SELECT coalesce(batched_into::text, '') FROM notify_deliveries WHERE id = $1`, member.id).Scan(&into); err != nil {
		t.Fatal(err)
	}
	if member.status != "batched" || into != lead.id {
		t.Fatalf("the second like's email is %s, batched into %q; want batched into the sent carrier %s", member.status, into, lead.id)
	}
}
