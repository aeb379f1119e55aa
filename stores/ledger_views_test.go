package stores_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// ledgerRow is a delivery for the views' tests.
type ledgerRow struct {
	status, channel, notifier, recipient string
	ago                                  time.Duration // updated_at = base - ago
}

// insertLedger writes one notification and a delivery per row, returning
// the delivery ids in the order of rows.
func insertLedger(t *testing.T, db stores.DB, base time.Time, notificationStatus string, rows []ledgerRow) (string, []string) {
	t.Helper()
	nid := uuidv7.String()
	exec(t, db, `INSERT INTO notify_notifications (id, notifier, key, status, normalized, params)
		VALUES ($1::text::uuid, 'comment.created', $1::text, $2, true, '{"post_title": "Hello"}')`, nid, notificationStatus)
	ids := uuidv7.Strings(len(rows))
	for i, r := range rows {
		var rcpt any
		if r.recipient != "" {
			rcpt = r.recipient
		}
		exec(t, db, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, updated_at)
			VALUES ($1, $2::text::uuid, $3, $2::text, $4, $5, 'immediate', $6, $7)`,
			ids[i], nid, r.notifier, rcpt, r.channel, r.status, base.Add(-r.ago))
	}
	return nid, ids
}

// TestListDeliveriesAcrossNotifications: newest change first, each filter
// narrows, keyset pages walk the list without a gap or a repeat, and a
// notifier filter that matches rarely comes back short with a cursor that
// goes on.
func TestListDeliveriesAcrossNotifications(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	base := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
	var rows []ledgerRow
	statuses := []string{"sent", "failed", "refused", "expired", "pending"}
	channels := []string{"email", "webhook", "slack"}
	for i := range 45 {
		rows = append(rows, ledgerRow{status: statuses[i%len(statuses)], channel: channels[i%len(channels)],
			notifier: "comment.created", recipient: fmt.Sprintf("u%d", i%4), ago: time.Duration(i) * time.Minute})
	}
	var ids []string
	for _, r := range rows { // a notification each: a notification has one delivery per channel and recipient
		_, id := insertLedger(t, tx, base, "fanned_out", []ledgerRow{r})
		ids = append(ids, id...)
	}
	_, other := insertLedger(t, tx, base, "fanned_out", []ledgerRow{{status: "failed", channel: "email", notifier: "invoice.paid", ago: 90 * time.Minute}})

	list := func(f stores.DeliveryFilter, limit int) []string {
		t.Helper()
		var got []string
		var after *stores.DeliveryCursor
		for pages := 0; ; pages++ {
			p, err := stores.ListDeliveries(ctx, tx, f, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Items) > limit {
				t.Fatalf("a page of %d rows for limit %d", len(p.Items), limit)
			}
			for i, d := range p.Items {
				got = append(got, d.ID)
				if i > 0 && p.Items[i-1].UpdatedAt.Before(d.UpdatedAt) {
					t.Fatalf("not newest first: %v then %v", p.Items[i-1].UpdatedAt, d.UpdatedAt)
				}
			}
			if p.Next == nil {
				return got
			}
			if pages > 100 {
				t.Fatal("the pages do not end")
			}
			after = p.Next
		}
	}
	want := func(pick func(i int, r ledgerRow) bool) []string {
		var out []string
		for i, r := range rows {
			if pick(i, r) {
				out = append(out, ids[i])
			}
		}
		return out // rows are newest first already (ago grows)
	}
	all := append(want(func(int, ledgerRow) bool { return true }), other...)
	for _, limit := range []int{1, 7, 50} {
		if got := list(stores.DeliveryFilter{}, limit); !slices.Equal(got, all) {
			t.Fatalf("everything in pages of %d: %d rows, want %d in order", limit, len(got), len(all))
		}
	}
	failedEmail := want(func(_ int, r ledgerRow) bool { return r.status == "failed" && r.channel == "email" })
	if got := list(stores.DeliveryFilter{Statuses: []string{"failed"}, Channel: "email", Until: base.Add(-80 * time.Minute).Add(time.Second)}, 3); len(got) != 1 || got[0] != other[0] {
		t.Fatalf("failed email before base-80m: %v, want only the invoice's", got)
	}
	if got := list(stores.DeliveryFilter{Statuses: []string{"failed"}, Channel: "email", Since: base.Add(-time.Hour)}, 2); !slices.Equal(got, failedEmail) {
		t.Fatalf("every failed email of the last hour: %v, want %v", got, failedEmail)
	}
	failedOrRefused := want(func(_ int, r ledgerRow) bool { return r.status == "failed" || r.status == "refused" })
	if got := list(stores.DeliveryFilter{Statuses: []string{"failed", "refused"}, Since: base.Add(-time.Hour)}, 4); !slices.Equal(got, failedOrRefused) {
		t.Fatalf("failed or refused, any channel: %v, want %v", got, failedOrRefused)
	}
	u2Slack := want(func(_ int, r ledgerRow) bool { return r.recipient == "u2" && r.channel == "slack" })
	if got := list(stores.DeliveryFilter{Recipient: "u2", Channel: "slack"}, 2); !slices.Equal(got, u2Slack) {
		t.Fatalf("u2 on slack: %v, want %v", got, u2Slack)
	}
	if got := list(stores.DeliveryFilter{Notifier: "invoice.paid"}, 5); !slices.Equal(got, other) {
		t.Fatalf("notifier invoice.paid: %v, want %v", got, other)
	}
	if got := list(stores.DeliveryFilter{Statuses: []string{"digest_sent"}}, 5); len(got) != 0 {
		t.Fatalf("a status no row has: %v", got)
	}
}

// TestListDeliveriesBoundsItsScan: with a notifier filter no index serves,
// a page reads at most 5,000 rows, and comes back short with a cursor from
// which the next pages find the rare match.
func TestListDeliveriesBoundsItsScan(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	base := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
	nid := uuidv7.String()
	exec(t, tx, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1, 'n', 'k', 'fanned_out', true)`, nid)
	exec(t, tx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, updated_at)
		SELECT gen_random_uuid(), $1, CASE WHEN i = 12000 THEN 'rare' ELSE 'common' END, 'k', 'u' || i, 'email', 'immediate', 'sent',
		       $2::timestamptz - i * interval '1 second'
		FROM generate_series(1, 12000) i`, nid, base)
	p, err := stores.ListDeliveries(ctx, tx, stores.DeliveryFilter{Notifier: "rare"}, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 0 || p.Next == nil {
		t.Fatalf("first page: %d rows, next %v; want none and a cursor (the scan ran out)", len(p.Items), p.Next)
	}
	if got := base.Sub(p.Next.UpdatedAt); got != 5000*time.Second {
		t.Fatalf("the first page examined down to base-%v, want the 5,000th row", got)
	}
	var found []string
	for pages := 0; p.Next != nil; pages++ {
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
		if p, err = stores.ListDeliveries(ctx, tx, stores.DeliveryFilter{Notifier: "rare"}, p.Next, 10); err != nil {
			t.Fatal(err)
		}
		for _, d := range p.Items {
			found = append(found, d.Notifier)
		}
	}
	if !slices.Equal(found, []string{"rare"}) {
		t.Fatalf("walking the pages found %v", found)
	}
}

// TestRedriveMatching: only the matching deliveries in re-drivable statuses
// become failed and due, never those of a cancelled notification, at most
// the limit; the count says how many matched.
func TestRedriveMatching(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	base := time.Now().UTC().Truncate(time.Second)
	_, ids := insertLedger(t, tx, base, "fanned_out", []ledgerRow{
		{status: "failed", channel: "email", notifier: "comment.created", recipient: "u1", ago: time.Minute},
		{status: "expired", channel: "email", notifier: "comment.created", recipient: "u2", ago: 2 * time.Minute},
		{status: "failed", channel: "webhook", notifier: "comment.created", recipient: "u1", ago: 3 * time.Minute},
		{status: "sent", channel: "email", notifier: "comment.created", recipient: "u3", ago: 4 * time.Minute},
		{status: "failed", channel: "email", notifier: "comment.created", recipient: "u4", ago: 3 * time.Hour},
	})
	_, cancelled := insertLedger(t, tx, base, "cancelled", []ledgerRow{
		{status: "failed", channel: "email", notifier: "comment.created", recipient: "u5", ago: time.Minute}})
	if _, _, err := stores.RedriveMatching(ctx, tx, stores.DeliveryFilter{Statuses: []string{"sent"}}, base, 10); err == nil {
		t.Fatal("re-driving sent deliveries was accepted")
	}
	f := stores.DeliveryFilter{Statuses: []string{"failed", "expired"}, Channel: "email", Since: base.Add(-time.Hour)}
	matched, got, err := stores.RedriveMatching(ctx, tx, f, base, 1)
	if err != nil {
		t.Fatal(err)
	}
	if matched != 2 || len(got) != 1 {
		t.Fatalf("limit 1: matched %d, re-drove %v; want 2 matched, 1 re-driven", matched, got)
	}
	matched, got2, err := stores.RedriveMatching(ctx, tx, f, base, 10)
	if err != nil {
		t.Fatal(err)
	}
	// The first one re-driven is failed now, and changed at base: it still
	// matches, and is re-driven again, with the other.
	slices.Sort(got2)
	want := []string{ids[0], ids[1]}
	slices.Sort(want)
	if matched != 2 || !slices.Equal(got2, want) {
		t.Fatalf("limit 10: matched %d, re-drove %v; want %v", matched, got2, want)
	}
	for _, id := range []string{ids[2], ids[3], ids[4], cancelled[0]} {
		var status string
		var next *time.Time
		if err := tx.QueryRow(ctx, `SELECT status, next_attempt_at FROM notify_deliveries WHERE id = $1`, id).Scan(&status, &next); err != nil {
			t.Fatal(err)
		}
		if next != nil {
			t.Fatalf("delivery %s (%s) was re-driven", id, status)
		}
	}
}

// TestLedgerHoursAndQueueDepths: the overview's counts.
func TestLedgerHoursAndQueueDepths(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	base := time.Now().UTC().Truncate(time.Hour).Add(30 * time.Minute)
	insertLedger(t, tx, base, "fanned_out", []ledgerRow{
		{status: "sent", channel: "email", notifier: "n", recipient: "u1"},
		{status: "sent", channel: "email", notifier: "n", recipient: "u2", ago: 5 * time.Minute},
		{status: "failed", channel: "webhook", notifier: "n", recipient: "u1", ago: time.Hour},
		{status: "sent", channel: "email", notifier: "n", recipient: "u3", ago: 30 * time.Hour},
	})
	got, err := stores.LedgerHours(ctx, tx, base.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, h := range got {
		lines = append(lines, fmt.Sprintf("%s %s %s %d", base.Sub(h.Hour).Round(time.Minute), h.Channel, h.Status, h.Count))
	}
	if want := "[1h30m0s webhook failed 1 30m0s email sent 2]"; fmt.Sprint(lines) != want {
		t.Fatalf("per hour: %v, want %s", lines, want)
	}
	exec(t, tx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at, finalized_at)
		SELECT '{}', 'k', 1, q, s::river_job_state, now(), CASE WHEN s = 'completed' THEN now() END
		FROM (VALUES ('send', 'available'), ('send', 'available'), ('send', 'retryable'), ('fanout', 'running'),
		             ('send', 'completed')) AS v(q, s)`)
	depths, err := stores.QueueDepths(ctx, tx, []string{"fanout", "send"})
	if err != nil {
		t.Fatal(err)
	}
	lines = nil
	for _, d := range depths {
		if d.Count > 0 {
			lines = append(lines, fmt.Sprintf("%s %s %d", d.Queue, d.State, d.Count))
		}
	}
	if want := "[fanout running 1 send available 2 send retryable 1]"; fmt.Sprint(lines) != want {
		t.Fatalf("queue depths: %v, want %s", lines, want)
	}
	if len(depths) != 2*len(stores.QueueStates) {
		t.Fatalf("%d depths, want every queue and state", len(depths))
	}
}

// TestNotificationCountsAndDeliveryMessage: the list's grouped counts, the
// inbox included, and what a delivery that carries a batch renders with.
func TestNotificationCountsAndDeliveryMessage(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	base := time.Now().UTC()
	nid, ids := insertLedger(t, tx, base, "fanned_out", []ledgerRow{
		{status: "sent", channel: "email", notifier: "comment.created", recipient: "u1"},
		{status: "failed", channel: "slack", notifier: "comment.created"},
		{status: "refused", channel: "email", notifier: "comment.created", recipient: "u2"},
	})
	exec(t, tx, `INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, title) VALUES ($1, $2::text::uuid, 'u1', 'comment.created', $2::text, 't')`,
		uuidv7.String(), nid)
	lone, _ := insertLedger(t, tx, base, "pending", nil)
	counts, err := stores.NotificationCounts(ctx, tx, []string{nid, lone}, "in_app")
	if err != nil {
		t.Fatal(err)
	}
	if c := counts[nid]; c == nil || fmt.Sprint(c.ByStatus) != "map[email:map[refused:1 sent:1] in_app:map[sent:1] slack:map[failed:1]]" || c.Truncated {
		t.Fatalf("counts: %+v", c)
	}
	if _, ok := counts[lone]; ok {
		t.Fatal("a notification without deliveries has counts")
	}

	exec(t, tx, `INSERT INTO notify_recipients (id, email, name, locale) VALUES ('u1', 'ada@example.test', 'Ada', 'fr')`)
	bid := uuidv7.String()
	exec(t, tx, `INSERT INTO notify_batches (id, notifier, recipient, batch_key, state, closes_at, max_members, count, members, actors, items)
		VALUES ($1, 'comment.created', 'u1', 'k', 'closed', now(), 50, 2, ARRAY[$2::uuid], '{a1,a2}', '[{"x": 1}, {"x": 2}]')`, bid, nid)
	exec(t, tx, `UPDATE notify_deliveries SET batch_id = $2 WHERE id = $1`, ids[0], bid)
	m, err := stores.GetDeliveryMessage(ctx, tx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if m.Email != "ada@example.test" || m.Locale != "fr" || m.Batch == nil || m.Batch.Count != 2 ||
		fmt.Sprint(m.Batch.Actors) != "[a1 a2]" || !strings.Contains(string(m.Batch.Items), `"x": 2`) || m.Status != "sent" {
		t.Fatalf("message: %+v batch %+v", m, m.Batch)
	}
	var params map[string]any
	if err := json.Unmarshal(m.Params, &params); err != nil || params["post_title"] != "Hello" {
		t.Fatalf("params %s: %v", m.Params, err)
	}
	if _, err := stores.GetDeliveryMessage(ctx, tx, uuidv7.String()); err != stores.ErrNotFound {
		t.Fatalf("unknown id: %v", err)
	}
}
