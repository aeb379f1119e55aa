package stores_test

import (
	"context"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// The claim settles deliveries to a suppressed address `suppressed` in its
// own statement and returns only the others; the suppression applies to its
// channel only, by the profile field the channel names.
func TestClaimSuppressesListedAddresses(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	const nid = "01900000-0000-7000-8000-00000000d001"
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1, 'n', 'k', 'fanned_out', true)`, nid)
	exec(`INSERT INTO notify_recipients (id, email, webhook_url) VALUES ('u1', ' Gone@Example.test ', 'https://h.test/x'), ('u2', 'ok@example.test', NULL)`)
	ids := []string{"01900000-0000-7000-8000-00000000d011", "01900000-0000-7000-8000-00000000d012", "01900000-0000-7000-8000-00000000d013"}
	exec(`INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status) VALUES
		($1, $4, 'n', 'k', 'u1', 'email', 'immediate', 'pending'),
		($2, $4, 'n', 'k', 'u2', 'email', 'immediate', 'pending'),
		($3, $4, 'n', 'k', 'u1', 'webhook', 'immediate', 'pending')`, ids[0], ids[1], ids[2], nid)
	now := time.Now()
	if err := stores.PutSuppressions(ctx, pool, []stores.Suppression{{Channel: "email", Address: "gone@example.TEST", Reason: "hard"}}, now); err != nil {
		t.Fatal(err)
	}
	fields := stores.AddressFields{Channels: []string{"email", "webhook"}, Fields: []string{"email", "webhook_url"}}
	claimed, err := stores.ClaimDeliveriesSuppressing(ctx, pool, ids, now, fields, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, c := range claimed {
		got[c.ID] = true
	}
	if len(claimed) != 2 || !got[ids[1]] || !got[ids[2]] {
		t.Fatalf("claimed %v, want u2's email and u1's webhook", got)
	}
	var status, lastError string
	var attempts int
	var settled *time.Time
	if err := pool.QueryRow(ctx, `SELECT status, last_error, attempts, settled_at FROM notify_deliveries WHERE id = $1`, ids[0]).
		Scan(&status, &lastError, &attempts, &settled); err != nil {
		t.Fatal(err)
	}
	if status != "suppressed" || lastError != "address is suppressed: hard" || attempts != 0 || settled == nil {
		t.Fatalf("u1's email: %s %q attempts %d settled %v", status, lastError, attempts, settled)
	}
	// Without the fields (ClaimDeliveries) nothing is suppressed.
	exec(`UPDATE notify_deliveries SET status = 'pending', claimed_at = NULL, settled_at = NULL WHERE id = $1`, ids[0])
	if c, err := stores.ClaimDeliveries(ctx, pool, ids[:1], now); err != nil || len(c) != 1 {
		t.Fatalf("ClaimDeliveries: %d, %v", len(c), err)
	}
}

func TestSuppressionStore(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	err := stores.PutSuppressions(ctx, pool, []stores.Suppression{
		{Channel: "email", Address: "A@x.test", Reason: "one"}, {Channel: "email", Address: "a@x.test", Reason: "two"},
		{Channel: "email", Address: "  ", Reason: "skipped"}, {Channel: "email", Address: "b@x.test", Reason: "manual"},
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := stores.PutSuppressions(ctx, pool, []stores.Suppression{{Channel: "email", Address: "a@x.test", Reason: "three"}}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	s, err := stores.GetSuppression(ctx, pool, "email", "A@X.test")
	if err != nil || s.Reason != "three" || !s.CreatedAt.Equal(t0) || !s.UpdatedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("a@x.test: %+v, %v", s, err)
	}
	page, err := stores.ListSuppressions(ctx, pool, "email", "", "email", "a@x.test", 10)
	if err != nil || len(page) != 1 || page[0].Address != "b@x.test" {
		t.Fatalf("page after a@x.test: %+v, %v", page, err)
	}
	b1, _ := stores.RecordSoftBounce(ctx, pool, "email", "Full@x.test", t0)
	b2, err := stores.RecordSoftBounce(ctx, pool, "email", "full@x.test", t0.Add(time.Minute))
	if err != nil || b1.Count != 1 || b2.Count != 2 || !b2.FirstAt.Equal(t0) || !b2.LastAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("soft bounces: %+v %+v %v", b1, b2, err)
	}
	if _, err := stores.GetSuppression(ctx, pool, "email", "full@x.test"); err != stores.ErrNotFound {
		t.Fatalf("a soft bounce suppressed: %v", err)
	}
}
