package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

func TestEraseRecipient(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: prefsConfig})
	ctx := t.Context()

	// Everything notifyd holds about "gone" (and the same about "kept"),
	// written through the API where the API writes it.
	for _, id := range []string{"gone", "kept"} {
		tok := recipientToken(t, id)
		expect(t, b.do(t, "PUT", "/v1/recipients/"+id, adminToken, map[string]any{"email": id + "@example.com"}), 200, "")
		expect(t, b.do(t, "PUT", "/v1/preferences", tok, `{"rules":[{"scope":"*","channel":"email","mode":"digest"}]}`), 200, "")
		expect(t, b.do(t, "PUT", "/v1/mutes", tok, map[string]any{"target": "topic:post-1"}), 200, "")
		expect(t, b.do(t, "PUT", "/v1/topics/post-1/subscribers/"+id, adminToken, nil), 200, "")
		expect(t, b.do(t, "PUT", "/v1/topics/post-2/subscribers/"+id, adminToken, nil), 200, "")
		ids := insertItems(t, b.pool, id, "e", 4, time.Now())
		expect(t, b.do(t, "POST", "/v1/inbox/read", tok, map[string]any{"ids": ids[:2]}), 200, "")
	}
	// Ledger rows: sent (with an error text quoting the address), pending,
	// failed, digest_pending; the other recipient's pending row beside them.
	const nid = "00000000-0000-7000-8000-0000000000e1"
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_notifications (id, notifier, key, recipients, reasons, status, normalized)
		VALUES ($1, 'comment.created', 'k', ARRAY['gone', 'kept'], ARRAY['author', 'author'], 'fanned_out', true)`, nid); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, last_error)
		SELECT gen_random_uuid(), $1, 'comment.created', 'k', r, ch, m, st, 'relay said no to ' || r || '@example.com'
		FROM (VALUES ('gone', 'email', 'immediate', 'sent'), ('gone', 'webhook', 'immediate', 'failed'),
		             ('gone', 'email2', 'immediate', 'pending'), ('gone', 'email3', 'digest', 'digest_pending'),
		             ('kept', 'email', 'immediate', 'pending')) AS v(r, ch, m, st)`, nid); err != nil {
		t.Fatal(err)
	}

	// Recipient tokens cannot erase, not even themselves.
	expect(t, b.do(t, "DELETE", "/v1/recipients/gone", recipientToken(t, "gone"), nil), 401, wire.CodeUnauthorized)

	r := b.do(t, "DELETE", "/v1/recipients/gone", adminToken, nil)
	expect(t, r, 200, "")
	for k, v := range map[string]any{"erased": true, "profile": true, "inbox": 4.0, "deliveries": 4.0, "cancelled": 3.0,
		"preferences": 1.0, "subscriptions": 2.0, "mutes": 1.0, "changes": 1.0, "notifications": 1.0,
		"pseudonym": stores.ErasedID("gone")} {
		if r.body[k] != v {
			t.Errorf("erase response %s: %s = %v, want %v", r.raw, k, r.body[k], v)
		}
	}

	// Gone from every table, and from the API.
	for _, sql := range []string{
		`SELECT count(*) FROM notify_recipients WHERE id = $1`,
		`SELECT count(*) FROM notify_inbox WHERE recipient = $1`,
		`SELECT count(*) FROM notify_inbox_changes WHERE recipient = $1`,
		`SELECT count(*) FROM notify_preferences WHERE recipient = $1`,
		`SELECT count(*) FROM notify_subscriptions WHERE recipient = $1`,
		`SELECT count(*) FROM notify_mutes WHERE recipient = $1`,
		`SELECT count(*) FROM notify_deliveries WHERE recipient = $1 OR last_error LIKE '%' || $1 || '@%'`,
		`SELECT count(*) FROM notify_notifications WHERE $1 = ANY(recipients)`,
	} {
		if n := count(t, b.pool, sql, "gone"); n != 0 {
			t.Errorf("%s: %d rows left", sql, n)
		}
		if n := count(t, b.pool, sql, "kept"); n == 0 {
			t.Errorf("%s: the other recipient's rows went too", sql)
		}
	}
	expect(t, b.do(t, "GET", "/v1/recipients/gone", adminToken, nil), 404, wire.CodeNotFound)
	if p := b.inbox(t, "/v1/recipients/gone/inbox", adminToken); len(p.Items) != 0 {
		t.Fatalf("inbox after erasure: %d items", len(p.Items))
	}
	if p := decodePrefs(t, b.do(t, "GET", "/v1/recipients/gone/preferences", adminToken, nil)); len(p.Rules) != 0 {
		t.Fatalf("rules after erasure: %s", p.rules())
	}

	// The ledger is kept under the pseudonym: sent stays sent, the unsent
	// rows will never be sent.
	got := map[string]string{}
	rows, err := b.pool.Query(ctx, `SELECT channel, status, coalesce(last_error, '') FROM notify_deliveries WHERE recipient = $1`,
		stores.ErasedID("gone"))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ch, st, le string
		if err := rows.Scan(&ch, &st, &le); err != nil {
			t.Fatal(err)
		}
		got[ch] = st + "|" + le
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"email": "sent|", "webhook": "cancelled|recipient erased",
		"email2": "cancelled|recipient erased", "email3": "digest_dropped|recipient erased"}
	for ch, w := range want {
		if got[ch] != w {
			t.Errorf("ledger %s: %q, want %q", ch, got[ch], w)
		}
	}
	// GET /v1/notifications/{id} shows the pseudonym, never the id.
	n := b.do(t, "GET", "/v1/notifications/"+nid, adminToken, nil)
	expect(t, n, 200, "")
	if strings.Contains(string(n.raw), `"gone"`) || !strings.Contains(string(n.raw), stores.ErasedID("gone")) {
		t.Fatalf("notification after erasure: %s", n.raw)
	}

	// A second erasure finds nothing; so does one of an id never seen.
	expect(t, b.do(t, "DELETE", "/v1/recipients/gone", adminToken, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "DELETE", "/v1/recipients/never", adminToken, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "DELETE", "/v1/recipients/%00", adminToken, nil), 400, wire.CodeBadRequest)
}

// TestErasureReachesPendingNotifications: a notification enqueued before the
// erasure but fanned out after it sends nothing to the erased recipient,
// whether it addressed them inline or through a topic.
func TestErasureReachesPendingNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: prefsConfig})
	for _, id := range []string{"gone", "stay"} {
		expect(t, b.do(t, "PUT", "/v1/topics/post-1/subscribers/"+id, adminToken, nil), 200, "")
	}
	send := func(key string, body map[string]any) string {
		t.Helper()
		body["notifier"], body["key"], body["params"] = "comment.created", key, map[string]any{"post_title": "x"}
		r := b.do(t, "POST", "/v1/notifications", adminToken, body)
		expect(t, r, 202, "")
		return r.body["id"].(string)
	}
	inline := send("inline", map[string]any{"recipients": []string{"a", "gone", "z", "gone"}})
	topic := send("topic", map[string]any{"topics": []string{"post-1"}})

	expect(t, b.do(t, "DELETE", "/v1/recipients/gone", adminToken, nil), 200, "")
	servertest.StartWorkers(t, &jobs.Deps{Pool: b.pool, Config: b.cfg})
	for _, id := range []string{inline, topic} {
		servertest.Eventually(t, 30*time.Second, "fan-out of "+id, func() bool {
			return count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'fanned_out'`, id) == 1
		})
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient = 'gone'`); n != 0 {
		t.Fatalf("the erased recipient got %d inbox items", n)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE recipient = 'gone'`); n != 0 {
		t.Fatalf("the erased recipient got %d delivery rows", n)
	}
	// Nobody else either: not the pseudonym.
	if got := count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient IN ('a', 'z', 'stay')`); got != 3 ||
		count(t, b.pool, `SELECT count(*) FROM notify_inbox`) != 3 {
		t.Fatalf("inbox items: %d for a, z and stay, want 3, and none for anybody else", got)
	}
}
