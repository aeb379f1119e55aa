package jobs_test

import (
	"context"
	"testing"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/server/servertest"
)

func TestRetentionDeletesOnlyWhatIsOld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if _, err := b.pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO notify_notifications (id, notifier, key, status, created_at) VALUES
	      ('01900000-0000-7000-8000-000000000001', 'comment.created', 'old', 'fanned_out', now() - interval '200 days'),
	      ('01900000-0000-7000-8000-000000000002', 'comment.created', 'new', 'fanned_out', now())`)
	exec(`INSERT INTO notify_notifications (id, notifier, key, status, params, recipients, reasons, created_at) VALUES
	      ('01900000-0000-7000-8000-000000000003', 'comment.created', 'spent', 'fanned_out', '{"post_title":"x"}', '{u1}', '{author}', now() - interval '200 days')`)
	exec(`INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, created_at) VALUES
	      ('01900000-0000-7000-8000-00000000000a', '01900000-0000-7000-8000-000000000001', 'u1', 'comment.created', 'old', now() - interval '100 days'),
	      ('01900000-0000-7000-8000-00000000000b', '01900000-0000-7000-8000-000000000002', 'u1', 'comment.created', 'new', now())`)
	exec(`INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, created_at) VALUES
	      ('01900000-0000-7000-8000-0000000000d1', '01900000-0000-7000-8000-000000000001', 'comment.created', 'old', 'u1', 'email', 'immediate', 'sent', now() - interval '40 days'),
	      ('01900000-0000-7000-8000-0000000000d2', '01900000-0000-7000-8000-000000000001', 'comment.created', 'old', 'u2', 'email', 'immediate', 'failed', now() - interval '40 days'),
	      ('01900000-0000-7000-8000-0000000000d3', '01900000-0000-7000-8000-000000000002', 'comment.created', 'new', 'u1', 'email', 'immediate', 'sent', now())`)
	exec(`INSERT INTO notify_inbox_changes (recipient, kind, item_ids, created_at) VALUES
	      ('u1', 'created', ARRAY['01900000-0000-7000-8000-00000000000a'::uuid], now() - interval '30 days'),
	      ('u1', 'created', ARRAY['01900000-0000-7000-8000-00000000000b'::uuid], now())`)

	res, err := b.deps.Retention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Inbox != 1 || res.Deliveries != 1 || res.Changes != 1 || res.Notifications != 1 {
		t.Fatalf("retention %+v, want 1 inbox item, 1 delivery, 1 change deleted and 1 notification compacted (not 'old': one of its rows is unsettled)", res)
	}
	// The spent notification keeps its identity: the same key is still a duplicate.
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE key = 'spent' AND params = '{}' AND recipients = '{}'`); n != 1 {
		t.Fatal("the spent notification was not compacted in place")
	}
	dup, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "spent",
		Recipients: []notifyd.Recipient{{ID: "u1"}}, Params: commentParams})
	if err != nil || !dup.Duplicate || dup.ID != "01900000-0000-7000-8000-000000000003" {
		t.Fatalf("a send of a compacted key = %+v, %v; want the old id as a duplicate", dup, err)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE status = 'failed'`); n != 1 {
		t.Fatal("an unsettled delivery was deleted")
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE key = 'new'`); n != 1 {
		t.Fatal("a recent inbox item was deleted")
	}
}
