package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/server/servertest"
)

// A chunked fan-out (here a topic) enqueues its sends on the send_bulk queue
// (its own workers) at a lower River priority, a one-recipient
// notification's on the send queue, so a small notification's email never
// waits for a worker behind a large one's.
func TestBulkSendsQueueBehindSmallOnes(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_recipients (id, email)
		SELECT 'r' || lpad(g::text, 3, '0'), 'r' || g || '@example.test' FROM generate_series(1, 60) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_subscriptions (topic, recipient)
		SELECT 'many', 'r' || lpad(g::text, 3, '0') FROM generate_series(1, 50) g`); err != nil {
		t.Fatal(err)
	}
	params := map[string]any{"amount": "1"}
	bulk, err := b.client.Send(ctx, notifyd.Notification{Notifier: "invoice.paid", Key: "bulk", Topics: []string{"many"}, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	small, err := b.client.Send(ctx, notifyd.Notification{Notifier: "invoice.paid", Key: "small",
		Recipients: []notifyd.Recipient{{ID: "r055"}}, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	servertest.Eventually(t, time.Minute, "both fanned out", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = ANY($1::uuid[]) AND status = 'fanned_out'`,
			[]string{bulk.ID, small.ID}) == 2
	})
	// The queue and priority of the send jobs that carry each notification's email deliveries.
	const prioritiesSQL = `
SELECT coalesce(array_agg(DISTINCT j.queue || ' ' || j.priority ORDER BY j.queue || ' ' || j.priority), '{}')
FROM river_job j, notify_deliveries d
WHERE j.kind = 'notify.send' AND d.notification_id = $1 AND d.channel = 'email'
  AND (position(uuid_send(d.id) IN decode(j.args->>'ids', 'base64')) > 0 OR j.args->'delivery_ids' ? d.id::text)`
	for _, tt := range []struct {
		name, id, want string
	}{{"the topic notification", bulk.ID, "send_bulk 2"}, {"the one-recipient notification", small.ID, "send 1"}} {
		var got []string
		if err := b.pool.QueryRow(ctx, prioritiesSQL, tt.id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("%s's send jobs are on (queue priority) %q, want [%q]", tt.name, got, tt.want)
		}
	}
}
