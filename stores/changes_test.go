package stores_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// chgCreate inserts one inbox item per recipient in recipients (in order,
// notifier "chg", key prefix+index) and logs them the way the fan-out does.
// It returns the item ids.
func chgCreate(t *testing.T, db stores.DB, prefix string, recipients ...string) []string {
	t.Helper()
	ids := make([]string, len(recipients))
	keys := make([]string, len(recipients))
	for i := range recipients {
		ids[i] = uuidv7.String()
		keys[i] = prefix + "-" + ids[i]
	}
	if _, err := db.Exec(t.Context(), `
		INSERT INTO notify_inbox (id, recipient, notifier, key, title, params)
		SELECT u.id, u.recipient, 'chg', u.key, 'title ' || u.key, '{"n": 1}'
		FROM unnest($1::uuid[], $2::text[], $3::text[]) AS u(id, recipient, key)`, ids, recipients, keys); err != nil {
		t.Fatal(err)
	}
	if err := stores.LogInboxCreated(t.Context(), db, ids, recipients); err != nil {
		t.Fatal(err)
	}
	return ids
}

func chgSeqs(cs []stores.Change) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.Seq
	}
	return out
}

func TestChangesAfterPagesThroughOneRecipient(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	const me, other = "chg-page-me", "chg-page-other"

	ids := chgCreate(t, tx, "p", me, other, me, me, other, me, me, me, me)
	var mine []string
	for i, r := range []string{me, other, me, me, other, me, me, me, me} {
		if r == me {
			mine = append(mine, ids[i])
		}
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
	if _, err := stores.MarkInbox(ctx, tx, stores.InboxMark{Recipient: me, Op: stores.InboxOpRead, IDs: mine[:2], At: at}); err != nil {
		t.Fatal(err)
	}
	// A cancelled notification: its item is deleted and a deleted change
	// logged; the created change of that item has nothing left to show.
	cancelled := chgCreate(t, tx, "cancel", me)[0]
	if _, err := tx.Exec(ctx, `INSERT INTO notify_notifications (id, notifier, key, status)
		SELECT notification_id, 'chg', key, 'fanned_out' FROM notify_inbox WHERE id = $1`, cancelled); err != nil {
		t.Fatal(err)
	}
	var key string
	if err := tx.QueryRow(ctx, `SELECT key FROM notify_inbox WHERE id = $1`, cancelled).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.CancelNotification(ctx, tx, "", "chg", key); err != nil {
		t.Fatal(err)
	}

	all, err := stores.ChangesAfter(ctx, tx, me, 0, stores.MaxChangePage)
	if err != nil {
		t.Fatal(err)
	}
	if all.More {
		t.Fatal("one page of everything says More")
	}
	// 7 created (the cancelled item's is left out), 1 updated, 1 deleted.
	var kinds []stores.ChangeKind
	for _, c := range all.Changes {
		kinds = append(kinds, c.Kind)
		if c.Recipient != me {
			t.Fatalf("change %d of %s in %s's log", c.Seq, c.Recipient, me)
		}
	}
	want := []stores.ChangeKind{"created", "created", "created", "created", "created", "created", "created", "updated", "deleted"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	if seqs := chgSeqs(all.Changes); !slices.IsSorted(seqs) {
		t.Fatalf("seqs %v not in order", seqs)
	}
	for i, c := range all.Changes[:7] {
		if c.Item == nil || c.Item.ID != mine[i] || !slices.Equal(c.ItemIDs, []string{mine[i]}) {
			t.Fatalf("created %d: item %+v ids %v, want %s", i, c.Item, c.ItemIDs, mine[i])
		}
		if c.Item.Notifier != "chg" || c.Item.Title != "title "+c.Item.Key || string(c.Item.Params) != `{"n": 1}` ||
			c.Item.CreatedAt.Location() != time.UTC {
			t.Fatalf("created %d: item %+v", i, c.Item)
		}
	}
	// The item is read as it is now: the first two are read already.
	if r := all.Changes[0].Item.ReadAt; r == nil || !r.Equal(at) {
		t.Fatalf("created 0 read_at %v, want %v", r, at)
	}
	upd := all.Changes[7]
	var data map[string]any
	if err := json.Unmarshal(upd.Data, &data); err != nil || data["read_at"] != "2030-01-02T03:04:05.123456Z" {
		t.Fatalf("updated data %s (%v)", upd.Data, err)
	}
	if upd.Item != nil || !slices.Equal(upd.ItemIDs, slices.Sorted(slices.Values(mine[:2]))) {
		t.Fatalf("updated %+v", upd)
	}
	if del := all.Changes[8]; !slices.Equal(del.ItemIDs, []string{cancelled}) || del.Data != nil {
		t.Fatalf("deleted %+v", del)
	}
	// The skipped created row still moves Last: it is between the others.
	if all.Last != all.Changes[8].Seq {
		t.Fatalf("last %d, want the deleted change's seq %d", all.Last, all.Changes[8].Seq)
	}

	// Paging in small pages reads the same changes, and every page's Last is the
	// next one's start.
	for _, limit := range []int{1, 2, 3, 4} {
		var got []int64
		after := int64(0)
		for pages := 0; ; pages++ {
			page, err := stores.ChangesAfter(ctx, tx, me, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Changes) > limit || page.Last < after {
				t.Fatalf("limit %d: page of %d, last %d after %d", limit, len(page.Changes), page.Last, after)
			}
			got = append(got, chgSeqs(page.Changes)...)
			after = page.Last
			if !page.More {
				break
			}
			if pages > 20 {
				t.Fatalf("limit %d: paging does not end", limit)
			}
		}
		if !slices.Equal(got, chgSeqs(all.Changes)) {
			t.Fatalf("limit %d: paged %v, want %v", limit, got, chgSeqs(all.Changes))
		}
	}

	// After the end: nothing, and Last stays.
	end, err := stores.ChangesAfter(ctx, tx, me, all.Last, 0)
	if err != nil || len(end.Changes) != 0 || end.More || end.Last != all.Last {
		t.Fatalf("after the end: %+v, %v", end, err)
	}
}

func TestChangesAfterForReadsOnlyTheGivenRecipients(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	const a, b, c = "chg-for-a", "chg-for-b", "chg-for-c"
	ids := chgCreate(t, tx, "for", a, c, b, a, c, b)
	before, err := stores.ChangesAfter(ctx, tx, a, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := before.Changes[0].Seq - 1

	page, err := stores.ChangesAfterFor(ctx, tx, []string{b, a}, start, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range page.Changes {
		got = append(got, ch.Recipient+" "+ch.Item.ID)
	}
	want := []string{a + " " + ids[0], b + " " + ids[2], a + " " + ids[3], b + " " + ids[5]}
	if !slices.Equal(got, want) || !slices.IsSorted(chgSeqs(page.Changes)) || page.More {
		t.Fatalf("got %v more %v, want %v", got, page.More, want)
	}

	// Paged by two, from the middle.
	page, err = stores.ChangesAfterFor(ctx, tx, []string{a, b}, page.Changes[0].Seq, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Changes) != 2 || !page.More || page.Changes[0].Item.ID != ids[2] || page.Last != page.Changes[1].Seq {
		t.Fatalf("second page %+v", page)
	}

	none, err := stores.ChangesAfterFor(ctx, nil, nil, 42, 0) // no recipients: no database needed
	if err != nil || len(none.Changes) != 0 || none.Last != 42 || none.More {
		t.Fatalf("no recipients: %+v, %v", none, err)
	}
}

func TestChangeSeqBoundsAndTrim(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	const me = "chg-trim"

	// The test's transaction sees only its own rows: the shared database's
	// tests never commit.
	if n, err := stores.MaxChangeSeq(ctx, tx); err != nil || n != 0 {
		t.Fatalf("empty log: max %d, %v", n, err)
	}
	if n, err := stores.OldestChangeSeq(ctx, tx); err != nil || n != 0 {
		t.Fatalf("empty log: oldest %d, %v", n, err)
	}

	chgCreate(t, tx, "trim", me, me, me, me)
	page, err := stores.ChangesAfter(ctx, tx, me, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	seqs := chgSeqs(page.Changes)
	if n, err := stores.MaxChangeSeq(ctx, tx); err != nil || n != seqs[3] {
		t.Fatalf("max %d, %v; want %d", n, err, seqs[3])
	}
	if n, err := stores.OldestChangeSeq(ctx, tx); err != nil || n != seqs[0] {
		t.Fatalf("oldest %d, %v; want %d", n, err, seqs[0])
	}

	// The first two are ten days old, and so is the last: a row that
	// committed after a newer one (a long transaction). Trimming stops at the
	// first new row, so what is left stays a contiguous tail.
	if _, err := tx.Exec(ctx, `UPDATE notify_inbox_changes SET created_at = now() - interval '10 days' WHERE seq = ANY($1)`,
		[]int64{seqs[0], seqs[1], seqs[3]}); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-24 * time.Hour)
	if n, err := stores.DeleteChangesBefore(ctx, tx, cutoff, 0); err != nil || n != 0 {
		t.Fatalf("limit 0 deleted %d, %v", n, err)
	}
	if n, err := stores.DeleteChangesBefore(ctx, tx, cutoff, 1); err != nil || n != 1 {
		t.Fatalf("limit 1 deleted %d, %v", n, err)
	}
	if n, err := stores.OldestChangeSeq(ctx, tx); err != nil || n != seqs[1] {
		t.Fatalf("oldest after one: %d, %v; want %d (oldest first)", n, err, seqs[1])
	}
	if n, err := stores.DeleteChangesBefore(ctx, tx, cutoff, 10); err != nil || n != 1 {
		t.Fatalf("limit 10 deleted %d, %v; want the 1 old row left", n, err)
	}
	if n, err := stores.OldestChangeSeq(ctx, tx); err != nil || n != seqs[2] {
		t.Fatalf("oldest after trim: %d, %v; want %d", n, err, seqs[2])
	}
	left, err := stores.ChangesAfter(ctx, tx, me, 0, 0)
	if err != nil || !slices.Equal(chgSeqs(left.Changes), seqs[2:]) {
		t.Fatalf("left %v, %v; want %v", chgSeqs(left.Changes), err, seqs[2:])
	}
}

func TestCountInboxesAgreesWithCountInbox(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	const a, b, nobody = "chg-count-a", "chg-count-b", "chg-count-nobody"
	ids := chgCreate(t, tx, "count", a, a, a, a, b, b)
	at := time.Now()
	for _, m := range []stores.InboxMark{
		{Recipient: a, Op: stores.InboxOpRead, IDs: ids[:1], At: at},
		{Recipient: a, Op: stores.InboxOpSeen, IDs: ids[1:2], At: at},
		{Recipient: a, Op: stores.InboxOpArchive, IDs: ids[2:3], At: at},
		{Recipient: b, Op: stores.InboxOpSeen, IDs: ids[4:5], At: at},
	} {
		if _, err := stores.MarkInbox(ctx, tx, m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := stores.CountInboxes(ctx, tx, []string{a, b, a, nobody})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %v, want three recipients", got)
	}
	for _, r := range []string{a, b, nobody} {
		one, err := stores.CountInbox(ctx, tx, r, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got[r] != one {
			t.Fatalf("%s: CountInboxes %+v, CountInbox %+v", r, got[r], one)
		}
	}
	if got[a] != (stores.InboxCounts{Unread: 2, Unseen: 1}) || got[b] != (stores.InboxCounts{Unread: 2, Unseen: 1}) {
		t.Fatalf("counts %v", got)
	}
	if empty, err := stores.CountInboxes(ctx, tx, nil); err != nil || len(empty) != 0 {
		t.Fatalf("no recipients: %v, %v", empty, err)
	}
}

// Items of distinct recipients (a fan-out chunk's) are logged as one row
// naming them all; every reader sees one change per recipient with that row's
// seq, and a page's limit counts log rows, so a shared row is never split.
func TestSharedCreatedRowReadsAsOneChangePerRecipient(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	a, b, c := "chg-shared-a", "chg-shared-b", "chg-shared-c"
	first := chgCreate(t, tx, "s1", a, b, c)
	second := chgCreate(t, tx, "s2", c, a)
	if n := countRows(t, tx, `SELECT count(*) FROM notify_inbox_changes WHERE recipient IS NULL AND recipients && ARRAY[$1, $2, $3]`, a, b, c); n != 2 {
		t.Fatalf("%d shared rows, want 2 (one per call)", n)
	}

	for _, tc := range []struct {
		recipient string
		items     []string
	}{{a, []string{first[0], second[1]}}, {b, []string{first[1]}}, {c, []string{first[2], second[0]}}} {
		page, err := stores.ChangesAfter(ctx, tx, tc.recipient, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ch := range page.Changes {
			if ch.Recipient != tc.recipient || ch.Kind != stores.ChangeCreated || ch.Item == nil || len(ch.ItemIDs) != 1 ||
				ch.ItemIDs[0] != ch.Item.ID {
				t.Fatalf("%s: change %+v", tc.recipient, ch)
			}
			got = append(got, ch.Item.ID)
		}
		if !slices.Equal(got, tc.items) || page.More {
			t.Fatalf("%s: items %v (more %v), want %v", tc.recipient, got, page.More, tc.items)
		}
	}

	// The hub's read: both recipients' changes of the first row, then (limit
	// 1 log row) the second row on the next page.
	page, err := stores.ChangesAfterFor(ctx, tx, []string{a, c}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Changes) != 2 || !page.More || page.Changes[0].Seq != page.Changes[1].Seq || page.Last != page.Changes[0].Seq ||
		page.Changes[0].Item.ID != first[0] || page.Changes[1].Item.ID != first[2] {
		t.Fatalf("first page: %+v more %v last %d", page.Changes, page.More, page.Last)
	}
	next, err := stores.ChangesAfterFor(ctx, tx, []string{a, c}, page.Last, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Changes) != 2 || next.Changes[0].Item.ID != second[1] || next.Changes[1].Item.ID != second[0] {
		t.Fatalf("second page: %+v", next.Changes)
	}

	// Erasing b takes b's entry out of the shared row and leaves the others.
	e, err := stores.EraseRecipient(ctx, tx, b)
	if err != nil {
		t.Fatal(err)
	}
	if e.Changes != 1 {
		t.Fatalf("erasure removed %d change-log entries, want 1", e.Changes)
	}
	if n := countRows(t, tx, `SELECT count(*) FROM notify_inbox_changes WHERE recipients @> ARRAY[$1]`, b); n != 0 {
		t.Fatalf("%d rows still name the erased recipient", n)
	}
	after, err := stores.ChangesAfter(ctx, tx, c, 0, 0)
	if err != nil || len(after.Changes) != 2 || after.Changes[0].Item.ID != first[2] {
		t.Fatalf("after the erasure, c's changes %+v (%v)", after.Changes, err)
	}
}

// A writer that started first and commits last is never skipped: a reader
// that has read what a later writer committed meanwhile reads the late row
// after it. Two orders, since a transaction gets its id at its first write,
// not at BEGIN: the first writer also writes first (its id is the older one,
// and the later writer's row waits behind it), or it writes only after the
// later writer did (its id is the newer one, and its row comes after the
// later writer's).
func TestLateCommitIsNeverSkipped(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name        string
		firstWrites bool // the first writer writes before the later one does
	}{{"first writer writes first", true}, {"first writer writes last", false}} {
		t.Run(tc.name, func(t *testing.T) {
			me := "chg-late-" + strings.ReplaceAll(tc.name, " ", "-")
			start, err := stores.MaxChangeSeq(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			first, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(ctx)
			// BEGIN is lazy in pgx: a statement makes the transaction start
			// now, still without a transaction id.
			if _, err := first.Exec(ctx, `SELECT 1`); err != nil {
				t.Fatal(err)
			}
			var early []string
			if tc.firstWrites {
				early = chgCreate(t, first, "late", me)
			}
			later, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer later.Rollback(ctx)
			laterIDs := chgCreate(t, later, "late", me)
			if !tc.firstWrites {
				early = chgCreate(t, first, "late", me)
			}
			if err := later.Commit(ctx); err != nil {
				t.Fatal(err)
			}

			// The reader: one recipient's replay, and the hub's read of many.
			seen, err := stores.ChangesAfter(ctx, pool, me, start, 0)
			if err != nil {
				t.Fatal(err)
			}
			head, err := stores.MaxChangeSeq(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			seenFor, err := stores.ChangesAfterFor(ctx, pool, []string{me}, start, 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.firstWrites {
				// The later writer's row is beyond the head until the first
				// writer ends: nobody may pass it yet.
				if len(seen.Changes) != 0 || len(seenFor.Changes) != 0 || head != start {
					t.Fatalf("read %d and %d changes, head %d (start %d) while an older writer is open",
						len(seen.Changes), len(seenFor.Changes), head, start)
				}
			} else if len(seen.Changes) != 1 || seen.Changes[0].Item.ID != laterIDs[0] ||
				len(seenFor.Changes) != 1 || head < seen.Last {
				// The later writer's row is below the watermark: readers
				// pass it, and the first writer's row must come after it.
				t.Fatalf("read %+v and %+v, head %d; want the later writer's item", seen.Changes, seenFor.Changes, head)
			}

			if err := first.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			want := []string{laterIDs[0], early[0]}
			if tc.firstWrites {
				want = []string{early[0], laterIDs[0]}
			}
			for name, from := range map[string]int64{"position": seen.Last, "head": max(head, seenFor.Last)} {
				rest, err := stores.ChangesAfter(ctx, pool, me, from, 0)
				if err != nil {
					t.Fatal(err)
				}
				got := itemIDs(seen.Changes)
				if name == "head" {
					got = itemIDs(seenFor.Changes)
				}
				got = append(got, itemIDs(rest.Changes)...)
				if !slices.Equal(got, want) {
					t.Fatalf("resuming from the %s: items %v, want %v", name, got, want)
				}
				if len(rest.Changes) > 0 && rest.Changes[0].Seq <= from {
					t.Fatalf("resuming from the %s %d read seq %d", name, from, rest.Changes[0].Seq)
				}
			}
		})
	}
}

// Writers that commit in any order (and some that roll back) while a reader
// tails the log: the reader reads every committed row exactly once, in seq
// order, never one at or below a position it already passed.
func TestTailingReaderMissesNoConcurrentCommit(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	const writers, perWriter = 6, 40
	recipients := []string{"chg-tail-a", "chg-tail-b", "chg-tail-c"}

	done := make(chan struct{})
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				tx, err := pool.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				// Items of two recipients, logged in two statements: one
				// transaction, two log rows.
				r1, r2 := recipients[(w+i)%3], recipients[(w+i+1)%3]
				chgCreate(t, tx, fmt.Sprintf("tail-%d-%d", w, i), r1)
				chgCreate(t, tx, fmt.Sprintf("tail-%d-%d-b", w, i), r2)
				if (w+i)%7 == 0 {
					err = tx.Rollback(ctx)
				} else {
					err = tx.Commit(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()

	var got []int64
	pos := int64(0)
	read := func() {
		// The hub's read: the head first, then the page. A page that is
		// not full has read everything up to the head.
		head, err := stores.MaxChangeSeq(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		page, err := stores.ChangesAfterFor(ctx, pool, recipients, pos, 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page.Changes {
			if c.Seq <= pos {
				t.Fatalf("read seq %d at position %d", c.Seq, pos)
			}
			if len(got) == 0 || got[len(got)-1] != c.Seq {
				got = append(got, c.Seq)
			}
		}
		pos = page.Last
		if !page.More {
			pos = max(pos, head)
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		read()
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	// Every writer has ended. The watermark passes their rows once the
	// database has seen them end, which can take a moment more than the
	// commits' return; keep reading (as a hub keeps polling) until the
	// reader has caught up with the log or the deadline passes. A row the
	// reader skipped is never read later, so this cannot hide a skip.
	var total int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notify_inbox_changes`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	servertest.Wait(10*time.Second, func() bool {
		if len(got) < total {
			read()
		}
		return len(got) >= total
	})

	var want []int64
	rows, err := pool.Query(ctx, `SELECT seq FROM notify_inbox_changes ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		want = append(want, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if committed := writers * perWriter * 2; len(want) >= committed || len(want) < committed/2 {
		t.Fatalf("%d rows committed of %d written: the rollbacks did not happen", len(want), committed)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the reader read %d rows, %d were committed:\n got %v\nwant %v", len(got), len(want), got, want)
	}
}

func itemIDs(cs []stores.Change) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Item.ID)
	}
	return out
}

// The rows of one transaction sit together, in insert order, numbered from
// its transaction id; a rolled-back savepoint takes its numbers back with its
// rows; a transaction is refused its 65,537th row.
func TestChangeSeqsOfOneTransaction(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	const me = "chg-one-tx"
	chgCreate(t, tx, "one", me)
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		t.Fatal(err)
	}
	chgCreate(t, sp, "gone", me, me)
	if err := sp.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	chgCreate(t, tx, "two", me)
	page, err := stores.ChangesAfter(ctx, tx, me, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var xid int64
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if got := chgSeqs(page.Changes); !slices.Equal(got, []int64{xid << 16, xid<<16 | 1}) {
		t.Fatalf("seqs %v, want %d and %d (transaction %d)", got, xid<<16, xid<<16|1, xid)
	}

	sp, err = tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Rollback(ctx)
	_, err = sp.Exec(ctx, `INSERT INTO notify_inbox_changes (recipient, kind, item_ids)
		SELECT $1, 'deleted', ARRAY[gen_random_uuid()] FROM generate_series(1, 65535)`, me)
	if err == nil || !strings.Contains(err.Error(), "more than 65536") {
		t.Fatalf("the 65,537th row of a transaction: %v, want refused", err)
	}
}
