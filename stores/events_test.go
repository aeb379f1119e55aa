package stores_test

import (
	"context"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// Provider events land on their delivery's history, matched by delivery tag
// or provider message id; the status moves up sent < delivered < bounced <
// complained whatever order they arrive in; a hard bounce and a complaint
// suppress the address on the delivery's channel, a soft bounce counts it;
// the same events again, and events of unknown messages, change nothing.
func TestRecordProviderEventsConverge(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	const nid = "01900000-0000-7000-8000-00000000e001"
	d1, d2, d3 := "01900000-0000-7000-8000-00000000e011", "01900000-0000-7000-8000-00000000e012", "01900000-0000-7000-8000-00000000e013"
	exec(`INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1, 'n', 'k', 'fanned_out', true)`, nid)
	exec(`INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, provider_message_id) VALUES
		($1, $4, 'n', 'k', 'u1', 'email', 'immediate', 'sent', 'ses-1'),
		($2, $4, 'n', 'k', 'u2', 'email', 'immediate', 'sent', 'ses-2'),
		($3, $4, 'n', 'k', 'u3', 'sms', 'immediate', 'sending', NULL)`, d1, d2, d3, nid)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	evs := []stores.ProviderEvent{
		// d1: the complaint arrives before the delivery.
		{Source: "ses", Key: "c1", Type: "complained", At: t0.Add(time.Minute), MessageID: "ses-1", Address: "U1@Example.test"},
		{Source: "ses", Key: "d1", Type: "delivered", At: t0, MessageID: "ses-1", Address: "u1@example.test"},
		// d2 by its tag: delivered, opened by a proxy, then a soft bounce:
		// counted, not suppressed, and the delivery is bounced.
		{Source: "sendgrid", Key: "e1", Type: "delivered", At: t0, DeliveryID: d2, Address: "u2@example.test"},
		{Source: "sendgrid", Key: "e2", Type: "opened", At: t0, DeliveryID: d2, Machine: true},
		{Source: "sendgrid", Key: "e3", Type: "bounced", At: t0, DeliveryID: d2, Address: "u2@example.test", Detail: "soft: mailbox full"},
		// d3 is not sent yet: recorded, status kept.
		{Source: "twilio", Key: "s1", Type: "delivered", At: t0, DeliveryID: d3, Address: "+15550001"},
		// unknown message
		{Source: "ses", Key: "x1", Type: "bounced", Hard: true, At: t0, MessageID: "nobody", Address: "x@example.test"},
		// a tag that is not a delivery id is ignored
		{Source: "ses", Key: "x2", Type: "complained", At: t0, DeliveryID: "garbage", Address: "y@example.test"},
	}
	r, err := stores.RecordProviderEvents(ctx, pool, evs, t0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Matched != 6 || r.Recorded != 6 || r.Moved != 2 || r.Suppressed != 1 {
		t.Fatalf("first call: %+v, want 6 matched, 6 recorded, 2 moved, 1 suppressed", r)
	}
	check := func(when string) {
		t.Helper()
		for id, want := range map[string]string{d1: "complained", d2: "bounced", d3: "sending"} {
			var status string
			if err := pool.QueryRow(ctx, `SELECT status FROM notify_deliveries WHERE id = $1`, id).Scan(&status); err != nil {
				t.Fatal(err)
			}
			if status != want {
				t.Errorf("%s: delivery %s is %s, want %s", when, id, status, want)
			}
		}
		var sups, soft, events int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM notify_suppressions),
			(SELECT coalesce(sum(count), 0) FROM notify_soft_bounces WHERE address = 'u2@example.test'),
			(SELECT count(*) FROM notify_delivery_events)`).Scan(&sups, &soft, &events); err != nil {
			t.Fatal(err)
		}
		var reason string
		if err := pool.QueryRow(ctx, `SELECT reason FROM notify_suppressions WHERE channel = 'email' AND address = 'u1@example.test'`).Scan(&reason); err != nil {
			t.Fatalf("%s: u1 not suppressed: %v", when, err)
		}
		if sups != 1 || soft != 1 || events != 6 || reason != "complaint (ses)" {
			t.Errorf("%s: %d suppressions (%q), %d soft bounces, %d events; want 1 (complaint (ses)), 1, 6", when, sups, reason, soft, events)
		}
	}
	check("first call")
	// The same call again (a provider's retry): nothing new.
	if r, err = stores.RecordProviderEvents(ctx, pool, evs, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r.Recorded != 0 || r.Moved != 0 || r.Suppressed != 0 {
		t.Fatalf("replay: %+v, want nothing recorded", r)
	}
	check("replay")
	// A later delivered event never moves a complained delivery back.
	if _, err = stores.RecordProviderEvents(ctx, pool, []stores.ProviderEvent{
		{Source: "ses", Key: "d1-again", Type: "delivered", At: t0.Add(2 * time.Minute), MessageID: "ses-1"}}, t0); err != nil {
		t.Fatal(err)
	}
	d, err := stores.GetDelivery(ctx, pool, d2)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Events) != 3 || d.Events[1].Type != "opened" && d.Events[0].Type != "opened" {
		t.Fatalf("d2's events: %+v", d.Events)
	}
	var machine bool
	for _, e := range d.Events {
		machine = machine || e.Type == "opened" && e.Machine && e.Source == "sendgrid"
	}
	if !machine {
		t.Fatalf("d2's machine open is not flagged: %+v", d.Events)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM notify_deliveries WHERE id = $1`, d1).Scan(&status); err != nil || status != "complained" {
		t.Fatalf("d1 after a late delivered: %s %v", status, err)
	}
	// Erasure (the recipient column changes) forgets the events.
	exec(`UPDATE notify_deliveries SET recipient = 'erased' WHERE id = $1`, d2)
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notify_delivery_events WHERE delivery_id = $1`, d2).Scan(&left); err != nil || left != 0 {
		t.Fatalf("erased delivery keeps %d events (%v)", left, err)
	}
}
