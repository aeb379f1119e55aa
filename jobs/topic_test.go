package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/server/servertest"
)

// A topic with 100k subscribers fans out completely, one inbox item each, in
// bounded chunks, merged with inline recipients and a second topic.
func TestTopicFanoutOf100kSubscribers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: skipping the 100k-subscriber fan-out")
	}
	b := setup(t)
	b.cfg.Queues.FanoutChunk = 2000
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_subscriptions (topic, recipient, reason)
		SELECT 'big', 'r' || lpad(g::text, 6, '0'), 'subscribed' FROM generate_series(1, 100000) g`); err != nil {
		t.Fatal(err)
	}
	// A second topic overlapping the first, and an inline recipient who is also a subscriber.
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_subscriptions (topic, recipient, reason)
		SELECT 'small', 'r' || lpad(g::text, 6, '0'), 'mentioned' FROM generate_series(99990, 100010) g`); err != nil {
		t.Fatal(err)
	}
	b.cfg.Notifiers["comment.created"].MaxRecipients = 200000
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "big-topic", Actor: "r000500",
		Recipients: []notifyd.Recipient{{ID: "r000007", Reason: "assigned"}}, Topics: []string{"big", "small"}, Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	servertest.StartWorkers(t, b.deps)
	servertest.Eventually(t, 2*time.Minute, "100k fan-out completes", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'fanned_out'`, res.ID) == 1
	})
	t.Logf("100k-subscriber fan-out took %s", time.Since(start))
	// 100,010 distinct subscribers, minus the actor.
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`); n != 100009 {
		t.Fatalf("inbox items = %d, want 100009", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM (SELECT recipient FROM notify_inbox GROUP BY recipient HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d recipients got more than one item", n)
	}
	for r, want := range map[string]string{"r000007": "assigned", "r099995": "mentioned", "r100005": "mentioned", "r000001": "subscribed"} {
		var got string
		if err := b.pool.QueryRow(ctx, `SELECT reason FROM notify_inbox WHERE recipient = $1`, r).Scan(&got); err != nil || got != want {
			t.Errorf("%s: reason %q (%v), want %q", r, got, err, want)
		}
	}
}
