package stores_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

func TestErasedID(t *testing.T) {
	t.Parallel()
	a, b := stores.ErasedID("ada"), stores.ErasedID("ada")
	if a != b || !strings.HasPrefix(a, stores.ErasedPrefix) || len(a) != len(stores.ErasedPrefix)+64 ||
		strings.Contains(a, "ada") || a == stores.ErasedID("bob") {
		t.Fatalf("pseudonyms %q %q %q", a, b, stores.ErasedID("bob"))
	}
}

// eraseFixture writes, for recipient id, everything notifyd can hold about a
// recipient; another recipient gets the same, to show it is left alone.
func eraseFixture(t *testing.T, tx pgx.Tx, id string) {
	t.Helper()
	ctx := t.Context()
	exec(t, tx, `INSERT INTO notify_recipients (id, email) VALUES ($1, $1 || '@example.com')`, id)
	items := addItems(t, tx, id, 3, time.Date(2029, 1, 2, 3, 4, 5, 0, time.UTC))
	exec(t, tx, `INSERT INTO notify_inbox_changes (recipient, kind, item_ids) SELECT $1, 'created', ARRAY[i] FROM unnest($2::uuid[]) i`, id, items)
	if err := stores.ReplacePreferences(ctx, tx, id, []stores.PreferenceRule{{Scope: "*", Channel: "email", Mode: "off"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.PutTenant(ctx, tx, &stores.Tenant{ID: "erase-tenant"}); err != nil {
		t.Fatal(err)
	}
	if err := stores.ReplaceTenantPreferences(ctx, tx, id, "erase-tenant", []stores.TenantRule{{Tenant: "erase-tenant",
		PreferenceRule: stores.PreferenceRule{Scope: "*", Channel: "*", Mode: "off"}}}); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"erase-topic-1", "erase-topic-2"} {
		if _, err := stores.Subscribe(ctx, tx, topic, id, "subscribed"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stores.PutMute(ctx, tx, id, "topic:erase-topic-2", nil, 0); err != nil {
		t.Fatal(err)
	}
	exec(t, tx, `INSERT INTO notify_audience_members (notification_id, recipient, reason) VALUES ($1, $2, 'watching')`,
		"0190b8a4-0000-7000-8000-0000000a0d1e", id)
	for i, platform := range []string{"ios", "android"} {
		if _, _, err := stores.PutDevice(ctx, tx, id, "", platform, fmt.Sprintf("%s-token-%d", id, i), "com.acme.app"); err != nil {
			t.Fatal(err)
		}
	}
}

func exec(t *testing.T, db stores.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func countRows(t *testing.T, db stores.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestEraseRecipient(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	const x, y = "erase-x", "erase-y"
	pseudo := stores.ErasedID(x)
	eraseFixture(t, tx, x)
	eraseFixture(t, tx, y)

	// Notifications: finished (x inline and actor), half-way through its
	// fan-out (x already written: position 2 covers erase-a and erase-x),
	// scheduled and not normalised (x twice), and one reaching x only
	// through a topic.
	const (
		nDone   = "00000000-0000-7000-8000-000000000001"
		nHalf   = "00000000-0000-7000-8000-000000000002"
		nLater  = "00000000-0000-7000-8000-000000000003"
		nTopic  = "00000000-0000-7000-8000-000000000004"
		nOthers = "00000000-0000-7000-8000-000000000005"
	)
	exec(t, tx, `INSERT INTO notify_notifications (id, notifier, key, actor, recipients, reasons, status, normalized)
		VALUES ($1, 'n', 'erase-done', $6, ARRAY['erase-a', $6], ARRAY['author', 'mentioned'], 'fanned_out', true),
		       ($2, 'n', 'erase-half', NULL, ARRAY['erase-a', $6, 'erase-z'], ARRAY['r1', 'r2', 'r3'], 'pending', true),
		       ($3, 'n', 'erase-later', NULL, ARRAY[$6, 'erase-b', $6], ARRAY['r1', 'r2', 'r3'], 'scheduled', false),
		       ($4, 'n', 'erase-topic', NULL, '{}', '{}', 'pending', true),
		       ($5, 'n', 'erase-others', NULL, ARRAY['erase-a'], ARRAY['r1'], 'fanned_out', true)`,
		nDone, nHalf, nLater, nTopic, nOthers, x)
	// nHalf is fanned out in two lanes split before 'erase-y': lane 0 (erase-a
	// and x) is written, lane 1 (erase-z) not yet.
	exec(t, tx, `INSERT INTO notify_fanout_lanes (notification_id, lane, lo, hi, cursor, inline_pos, inline_end, done)
		VALUES ($1, 0, NULL, NULL, $3, 2, 2, true),
		       ($2, 0, NULL, 'erase-y', $3, 2, 2, true),
		       ($2, 1, 'erase-y', NULL, NULL, 2, 3, false)`, nDone, nHalf, x)
	exec(t, tx, `UPDATE notify_notifications SET topics = ARRAY['erase-topic-1'] WHERE id = $1`, nTopic)

	// The ledger: one row per status for x on nDone, y's row and a bulk row
	// beside them, and a row for x on nOthers whose pseudonymised twin exists
	// already (x was erased before and reached again).
	statuses := []string{"sent", "pending", "failed", "rate_limited", "sending", "digest_pending", "skipped", "unavailable"}
	for i, st := range statuses {
		exec(t, tx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, last_error)
			VALUES (gen_random_uuid(), $1, 'n', 'erase-done', $2, $3, 'immediate', $4, 'SMTP 550 for erase-x@example.com')`,
			nDone, x, fmt.Sprintf("ch%d", i), st)
	}
	exec(t, tx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, last_error)
		VALUES (gen_random_uuid(), $1, 'n', 'erase-done', $2, 'ch1', 'immediate', 'pending', 'y error'),
		       (gen_random_uuid(), $1, 'n', 'erase-done', NULL, 'slack', 'immediate', 'pending', NULL),
		       (gen_random_uuid(), $3, 'n', 'erase-others', $4, 'email', 'immediate', 'sent', NULL),
		       (gen_random_uuid(), $3, 'n', 'erase-others', $5, 'email', 'immediate', 'pending', NULL)`,
		nDone, y, nOthers, pseudo, x)

	e, err := stores.EraseRecipient(ctx, tx, x)
	if err != nil {
		t.Fatal(err)
	}
	want := stores.Erasure{Profile: true, Inbox: 3, Changes: 3, Preferences: 2, Subscriptions: 2, Mutes: 1, Devices: 2,
		Deliveries: len(statuses) + 1, Cancelled: 5, Notifications: 3}
	if *e != want {
		t.Fatalf("erasure %+v, want %+v", *e, want)
	}

	for _, table := range []string{"notify_inbox", "notify_inbox_changes", "notify_preferences", "notify_tenant_preferences", "notify_subscriptions",
		"notify_mutes", "notify_devices", "notify_deliveries", "notify_audience_members"} {
		if n := countRows(t, tx, `SELECT count(*) FROM `+table+` WHERE recipient = $1`, x); n != 0 {
			t.Errorf("%s: %d rows of the erased recipient left", table, n)
		}
		if table != "notify_deliveries" && countRows(t, tx, `SELECT count(*) FROM `+table+` WHERE recipient = $1`, y) == 0 {
			t.Errorf("%s: the other recipient's rows were erased too", table)
		}
	}
	if n := countRows(t, tx, `SELECT count(*) FROM notify_recipients WHERE id = $1`, x); n != 0 {
		t.Error("profile left")
	}

	// The ledger is kept under the pseudonym, unsent rows cancelled, errors
	// cleared.
	rows, err := tx.Query(ctx, `SELECT channel, status, coalesce(last_error, ''), settled_at IS NOT NULL
		FROM notify_deliveries WHERE notification_id = $1 AND recipient = $2 ORDER BY channel`, nDone, pseudo)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var ch, st, le string
		var settled bool
		if err := rows.Scan(&ch, &st, &le, &settled); err != nil {
			t.Fatal(err)
		}
		got[ch] = fmt.Sprintf("%s|%s|%v", st, le, settled)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	wantLedger := map[string]string{
		"ch0": "sent||false", // settled_at was never set by this fixture; kept as it was
		"ch1": "cancelled|recipient erased|true",
		"ch2": "cancelled|recipient erased|true",
		"ch3": "cancelled|recipient erased|true",
		"ch4": "sending||false",
		"ch5": "digest_dropped|recipient erased|true",
		"ch6": "skipped||false",
		"ch7": "unavailable||false",
	}
	if fmt.Sprint(got) != fmt.Sprint(wantLedger) {
		t.Fatalf("ledger\n got %v\nwant %v", got, wantLedger)
	}
	if n := countRows(t, tx, `SELECT count(*) FROM notify_deliveries WHERE recipient = $1 AND status = 'pending' AND last_error = 'y error'`, y); n != 1 {
		t.Fatal("the other recipient's delivery changed")
	}
	if n := countRows(t, tx, `SELECT count(*) FROM notify_deliveries WHERE recipient IS NULL AND status = 'pending'`); n != 1 {
		t.Fatal("the bulk delivery changed")
	}
	if n := countRows(t, tx, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1`, nOthers); n != 1 {
		t.Fatalf("twin rows on %s: %d, want the one pseudonymised row", nOthers, n)
	}

	// Notifications: removed from unfinished inline lists (the position moves
	// back past the removed entry), pseudonymised in finished ones.
	type notif struct {
		recipients, reasons []string
		actor               *string
		lanes               [][2]int // per lane: inline_pos, inline_end
	}
	read := func(id string) notif {
		var n notif
		if err := tx.QueryRow(ctx, `SELECT recipients, reasons, actor FROM notify_notifications WHERE id = $1`, id).
			Scan(&n.recipients, &n.reasons, &n.actor); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, `SELECT inline_pos, inline_end FROM notify_fanout_lanes WHERE notification_id = $1 ORDER BY lane`, id)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var l [2]int
			if err := rows.Scan(&l[0], &l[1]); err != nil {
				t.Fatal(err)
			}
			n.lanes = append(n.lanes, l)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := read(nDone); !slices.Equal(n.recipients, []string{"erase-a", pseudo}) || n.actor == nil || *n.actor != pseudo ||
		!slices.Equal(n.lanes, [][2]int{{2, 2}}) {
		t.Fatalf("finished notification: %+v", n)
	}
	if n := read(nHalf); !slices.Equal(n.recipients, []string{"erase-a", "erase-z"}) || !slices.Equal(n.reasons, []string{"r1", "r3"}) ||
		!slices.Equal(n.lanes, [][2]int{{1, 1}, {1, 2}}) {
		t.Fatalf("half-way notification: %+v", n)
	}
	if n := read(nLater); !slices.Equal(n.recipients, []string{"erase-b"}) || !slices.Equal(n.reasons, []string{"r2"}) || n.lanes != nil {
		t.Fatalf("scheduled notification: %+v", n)
	}

	// Nothing is left to erase.
	if _, err := stores.EraseRecipient(ctx, tx, x); !errors.Is(err, stores.ErrNotFound) {
		t.Fatalf("second erasure: %v, want ErrNotFound", err)
	}
	if _, err := stores.EraseRecipient(ctx, tx, "erase-never-existed"); !errors.Is(err, stores.ErrNotFound) {
		t.Fatalf("unknown recipient: %v, want ErrNotFound", err)
	}
}
