package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/testing/notifydtest"
	"github.com/notifyd/notifyd/internal/testing/smtptest"
	"github.com/notifyd/notifyd/stores"
)

func batchConfig(port int, window string, max int) string {
	return notifydtest.BaseConfig + fmt.Sprintf(`
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
	srv := smtptest.Start(t)
	b.cfg = notifydtest.Config(t, batchConfig(srv.Port(), window, max))
	b.deps.Config = b.cfg
	notifydtest.Wire(b.deps, notifydtest.Channels(t, b.cfg))
	client, err := notifyd.NewClient(b.pool, notifyd.ClientConfig{Config: b.cfg})
	if err != nil {
		t.Fatal(err)
	}
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
	notifydtest.StartWorkers(t, b.deps)
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
	if n := notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient = 'u1' AND key IN ('l-2', 'l-3')`); n != 0 {
		t.Fatalf("later members created %d inbox items", n)
	}
	if n := notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox_changes WHERE kind = 'updated' AND data ? 'title'`); n != 2 {
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
	if n := notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_batches WHERE batch_key = 'p1'`); n != 2 {
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
	notifydtest.StartWorkers(t, b.deps)
	notifydtest.StartWorkers(t, b.deps)
	wg.Wait()
	notifydtest.Eventually(t, 120*time.Second, "every like fanned out", func() bool {
		return notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE status = 'fanned_out'`) == n
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
	if got := notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`); got != 1 {
		t.Fatalf("%d inbox items, want 1", got)
	}
	// The sink has the email; the ledger says so once the send's settle
	// commits, a moment later.
	notifydtest.Eventually(t, 30*time.Second, "the carrying delivery settled sent", func() bool {
		return notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE batch_id IS NOT NULL AND status = 'sent'`) == 1
	})
	if got := notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries d WHERE status = 'batched'
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
	if got := notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE status NOT IN ('sent', 'batched')`); got != 0 {
		t.Fatalf("%d deliveries neither sent nor batched", got)
	}
}

func subjectOf(msgs []smtptest.Message) string {
	if len(msgs) == 0 {
		return ""
	}
	return msgs[0].Subject
}
