package httpapi_test

import (
	"testing"
)

// An in-app item's click is recorded once, as a `clicked` event of the
// item's in-app delivery with its url, as a tracked email link is; another
// recipient's click is a 404 and records nothing.
func TestInboxClicked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	nid, did, item := "01900000-0000-7000-8000-0000000c0001", "01900000-0000-7000-8000-0000000c0002", "01900000-0000-7000-8000-0000000c0003"
	for _, q := range []string{
		`INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ('` + nid + `', 'comment.created', 'k1', 'fanned_out', true)`,
		`INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status)
		 VALUES ('` + did + `', '` + nid + `', 'comment.created', 'k1', 'alice', 'in_app', 'immediate', 'sent')`,
		`INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status)
		 VALUES ('01900000-0000-7000-8000-0000000c0004', '` + nid + `', 'comment.created', 'k1', 'alice', 'email', 'immediate', 'sent')`,
		`INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, title, url)
		 VALUES ('` + item + `', '` + nid + `', 'alice', 'comment.created', 'k1', 'Hi', 'https://app.test/posts/1')`,
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	events := func() int {
		return count(t, b.pool, `SELECT count(*) FROM notify_delivery_events`)
	}
	r := b.do(t, "POST", "/v1/inbox/"+item+"/clicked", recipientToken(t, "bob"), nil)
	expect(t, r, 404, "not_found")
	if n := events(); n != 0 {
		t.Fatalf("bob's click on alice's item wrote %d events", n)
	}
	alice := recipientToken(t, "alice")
	for i, want := range []bool{true, false} {
		r := b.do(t, "POST", "/v1/inbox/"+item+"/clicked", alice, nil)
		expect(t, r, 200, "")
		if r.body["recorded"] != want {
			t.Fatalf("click %d: %s, want recorded %v", i+1, r.raw, want)
		}
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_delivery_events WHERE delivery_id = $1
		AND type = 'clicked' AND detail = 'https://app.test/posts/1' AND source = 'in_app'`, did); n != 1 || events() != 1 {
		t.Fatalf("clicked events on the in-app delivery = %d of %d, want 1 of 1", n, events())
	}
	expect(t, b.do(t, "POST", "/v1/inbox/nope/clicked", alice, nil), 404, "not_found")
}
