package stores_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// Erasing a recipient removes their batches and throttle windows too.
func TestEraseRecipientRemovesWorkflowRows(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	for _, id := range []string{"wf-gone", "wf-kept"} {
		eraseFixture(t, tx, id)
		j := &stores.BatchJoin{Notifier: "n", Key: "k", NotificationID: uuidv7.String(), Actor: "someone",
			Params: json.RawMessage(`{"who":"` + id + `"}`), Window: time.Hour,
			Recipients: []string{id}, BatchIDs: []string{uuidv7.String()}, InboxIDs: []string{""}}
		if _, err := stores.JoinBatches(t.Context(), tx, j); err != nil {
			t.Fatal(err)
		}
		exec(t, tx, `INSERT INTO notify_throttle (recipient, notifier, channel, lim, per, admitted) VALUES ($1, 'n', 'email', 3, '1 hour', ARRAY[now()])`, id)
	}
	if _, err := stores.EraseRecipient(t.Context(), tx, "wf-gone"); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"notify_batches", "notify_throttle"} {
		if n := countRows(t, tx, `SELECT count(*) FROM `+table+` WHERE recipient = 'wf-gone'`); n != 0 {
			t.Errorf("%s: %d rows of the erased recipient left", table, n)
		}
		if n := countRows(t, tx, `SELECT count(*) FROM `+table+` WHERE recipient = 'wf-kept'`); n != 1 {
			t.Errorf("%s: %d rows of the other recipient, want 1", table, n)
		}
	}
}

// A notification joins its batch once: a replayed chunk finds it among the
// members and changes nothing; another notification joins the same batch;
// a batch at max takes no more (the next one opens a new batch).
func TestJoinBatchesCountsEachNotificationOnce(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	join := func(notification, actor string) stores.BatchState {
		t.Helper()
		j := &stores.BatchJoin{Notifier: "n", Key: "post-1", NotificationID: notification, Actor: actor,
			Params: json.RawMessage(`{"a":1}`), Window: time.Hour, Max: 3,
			Recipients: []string{"wf-u1"}, BatchIDs: []string{uuidv7.String()}, InboxIDs: []string{uuidv7.String()}}
		got, err := stores.JoinBatches(t.Context(), tx, j)
		if err != nil || len(got) != 1 {
			t.Fatalf("join: %v %+v", err, got)
		}
		return got[0]
	}
	first := uuidv7.String()
	a := join(first, "ada")
	if !a.Opened || a.Count != 1 || a.Full {
		t.Fatalf("first join = %+v", a)
	}
	if again := join(first, "ada"); again.ID != a.ID || !again.Opened || again.Count != 1 {
		t.Fatalf("replay = %+v, want the same batch unchanged", again)
	}
	b := join(uuidv7.String(), "bob")
	if b.ID != a.ID || b.Opened || b.Count != 2 || b.Full || len(b.Actors) != 2 {
		t.Fatalf("second join = %+v", b)
	}
	c := join(uuidv7.String(), "ada")
	if c.ID != a.ID || c.Count != 3 || !c.Full || len(c.Actors) != 2 {
		t.Fatalf("third join = %+v, want the batch full with 2 distinct actors", c)
	}
	d := join(uuidv7.String(), "cy")
	if d.ID == a.ID || !d.Opened || d.Count != 1 {
		t.Fatalf("fourth join = %+v, want a new batch", d)
	}
}

// Retention keeps scheduled deliveries (they are not settled) and removes
// batches closed before the cutoff and throttle windows that are over.
func TestRetentionOfWorkflowRows(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	old := time.Now().Add(-60 * 24 * time.Hour)
	nid, did := uuidv7.String(), uuidv7.String()
	exec(t, tx, `INSERT INTO notify_notifications (id, notifier, key, status, created_at) VALUES ($1, 'n', 'ret-1', 'fanned_out', $2)`, nid, old)
	exec(t, tx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, next_attempt_at, created_at)
		VALUES ($1, $2, 'n', 'ret-1', 'wf-r', 'email', 'immediate', 'scheduled', now() + interval '1 day', $3)`, did, nid, old)
	exec(t, tx, `INSERT INTO notify_batches (id, recipient, notifier, batch_key, state, opened_at, closes_at, max_members, members)
		VALUES ($1, 'wf-r', 'n', 'k', 'closed', $2, $2, 0, ARRAY[$3::uuid]), ($4, 'wf-r', 'n', 'k2', 'open', now(), now() + interval '1 hour', 0, ARRAY[$3::uuid])`,
		uuidv7.String(), old, nid, uuidv7.String())
	exec(t, tx, `INSERT INTO notify_throttle (recipient, notifier, channel, lim, per, admitted, updated_at)
		VALUES ('wf-r', 'n', 'email', 3, '1 hour', '{}', $1), ('wf-r', 'n2', 'email', 3, '2000 hours', '{}', $1)`, old)
	cut := time.Now().Add(-30 * 24 * time.Hour)
	if _, err := stores.DeleteExpired(t.Context(), tx, stores.RetentionCutoffs{Inbox: cut, Deliveries: cut, Changes: cut}, 100); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, tx, `SELECT count(*) FROM notify_deliveries WHERE id = $1`, did); n != 1 {
		t.Fatal("retention deleted a scheduled delivery")
	}
	if n := countRows(t, tx, `SELECT count(*) FROM notify_batches WHERE recipient = 'wf-r'`); n != 1 {
		t.Fatalf("%d batches left, want the open one", n)
	}
	if n := countRows(t, tx, `SELECT count(*) FROM notify_throttle WHERE recipient = 'wf-r'`); n != 1 {
		t.Fatalf("%d throttle windows left, want the one whose per has not passed", n)
	}
}
