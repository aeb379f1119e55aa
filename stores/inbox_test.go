package stores_test

import (
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

// TestMain is the one of package stores_test: every store test file shares it.
func TestMain(m *testing.M) { pgtest.Main(m) }

// addItems writes n inbox items for recipient at createdAt and returns their
// ids in insertion order.
func addItems(t *testing.T, db stores.DB, recipient string, n int, createdAt time.Time) []string {
	t.Helper()
	rows, err := db.Query(t.Context(), `
		INSERT INTO notify_inbox (id, recipient, notifier, key, title, created_at)
		SELECT gen_random_uuid(), $1, 'n', $1 || '-' || extract(epoch FROM $2::timestamptz) || '-' || g, 't' || g, $2
		FROM generate_series(1, $3) g
		RETURNING id::text`, recipient, createdAt, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestListInboxKeyset(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	base := time.Date(2028, 3, 4, 5, 6, 7, 0, time.UTC)
	var all []string
	all = append(all, addItems(t, tx, "r1", 5, base)...)
	all = append(all, addItems(t, tx, "r1", 5, base.Add(time.Microsecond))...)
	all = append(all, addItems(t, tx, "r1", 5, base.Add(-time.Hour))...)
	addItems(t, tx, "r2", 4, base)

	want, err := pgx.CollectRows(must(tx.Query(ctx,
		`SELECT id::text FROM notify_inbox WHERE recipient = 'r1' ORDER BY created_at DESC, id`)), pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 2, 3, 4, 7, 15, 50} {
		var got []string
		var after *stores.InboxCursor
		for pages := 0; ; pages++ {
			page, err := stores.ListInbox(ctx, tx, "r1", stores.InboxAll, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Items) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page.Items))
			}
			for _, it := range page.Items {
				got = append(got, it.ID)
			}
			if page.Next == nil {
				break
			}
			after = page.Next
			if pages > len(all) {
				t.Fatalf("limit %d: paging does not end", limit)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: paged %d ids in another order or with gaps; want %d", limit, len(got), len(want))
		}
	}

	// Limits are clamped, not trusted.
	page, err := stores.ListInbox(ctx, tx, "r1", stores.InboxAll, nil, 0)
	if err != nil || len(page.Items) != 15 || page.Next != nil {
		t.Fatalf("default limit: %d items, next %v, err %v", len(page.Items), page.Next, err)
	}
	if _, err := stores.ListInbox(ctx, tx, "r1", "bogus", nil, 10); err == nil {
		t.Fatal("unknown filter accepted")
	}
	if _, err := stores.ListInbox(ctx, tx, "r1", stores.InboxAll, &stores.InboxCursor{CreatedAt: base, ID: "x"}, 10); err == nil {
		t.Fatal("cursor with a bad id accepted")
	}
}

func TestListInboxMaxLimit(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	addItems(t, tx, "big", stores.MaxInboxLimit+5, time.Now())
	page, err := stores.ListInbox(t.Context(), tx, "big", stores.InboxAll, nil, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != stores.MaxInboxLimit || page.Next == nil {
		t.Fatalf("%d items, next %v; want %d and a next page", len(page.Items), page.Next, stores.MaxInboxLimit)
	}
}

func TestListInboxFiltersAndCounts(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	ids := addItems(t, tx, "f", 6, time.Now())
	// 0: unread unseen; 1: unread seen; 2: read; 3: archived unread; 4: archived read; 5: unread unseen
	for _, q := range []string{
		`UPDATE notify_inbox SET seen_at = now() WHERE id = '` + ids[1] + `'`,
		`UPDATE notify_inbox SET seen_at = now(), read_at = now() WHERE id = '` + ids[2] + `'`,
		`UPDATE notify_inbox SET archived_at = now() WHERE id = '` + ids[3] + `'`,
		`UPDATE notify_inbox SET seen_at = now(), read_at = now(), archived_at = now() WHERE id = '` + ids[4] + `'`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	list := func(f stores.InboxFilter) []string {
		page, err := stores.ListInbox(ctx, tx, "f", f, nil, 50)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range page.Items {
			out = append(out, it.ID)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	if got := list(stores.InboxAll); !slices.Equal(got, sorted(ids[0], ids[1], ids[2], ids[5])) {
		t.Errorf("all: %v", got)
	}
	if got := list(stores.InboxUnread); !slices.Equal(got, sorted(ids[0], ids[1], ids[5])) {
		t.Errorf("unread: %v", got)
	}
	if got := list(stores.InboxArchived); !slices.Equal(got, sorted(ids[3], ids[4])) {
		t.Errorf("archived: %v", got)
	}
	c, err := stores.CountInbox(ctx, tx, "f", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c != (stores.InboxCounts{Unread: 3, Unseen: 2}) {
		t.Errorf("counts %+v, want unread 3 unseen 2", c)
	}
	if c, _ := stores.CountInbox(ctx, tx, "nobody", 0); c != (stores.InboxCounts{}) {
		t.Errorf("counts of nobody %+v", c)
	}
}

// TestCountInboxCapped: each count is exact up to the cap and reads the cap,
// flagged, above it; a large inbox costs a count of the cap plus one index
// entries, whatever its size.
func TestCountInboxCapped(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	const heavy = "capped-heavy"
	ids := addItems(t, tx, heavy, 250, time.Now())
	// 250 unread, of which the first 40 seen: 210 unseen.
	if _, err := tx.Exec(ctx, `UPDATE notify_inbox SET seen_at = now() WHERE id = ANY($1::text[]::uuid[])`, ids[:40]); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		max  int
		want stores.InboxCounts
	}{
		{0, stores.InboxCounts{Unread: 99, Unseen: 99, UnreadCapped: true, UnseenCapped: true}},
		{249, stores.InboxCounts{Unread: 249, Unseen: 210, UnreadCapped: true}},
		{250, stores.InboxCounts{Unread: 250, Unseen: 210}},
		{210, stores.InboxCounts{Unread: 210, Unseen: 210, UnreadCapped: true}},
		{209, stores.InboxCounts{Unread: 209, Unseen: 209, UnreadCapped: true, UnseenCapped: true}},
		{1, stores.InboxCounts{Unread: 1, Unseen: 1, UnreadCapped: true, UnseenCapped: true}},
		{stores.MaxInboxCountsMax + 1, stores.InboxCounts{Unread: 250, Unseen: 210}},
	} {
		got, err := stores.CountInbox(ctx, tx, heavy, tc.max)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("max %d: %+v, want %+v", tc.max, got, tc.want)
		}
	}
	// The counts stop at the cap, however many items the recipient has:
	// EXPLAIN ANALYZE of the statement, with the settings it runs with
	// (stores.CountsPlanSQL), reads at most max+1 rows from each scan, here
	// of 3,000 unread items and statistics that know it. (Which inboxes
	// make PostgreSQL prefer a bitmap scan, which would read them all, depends
	// on the whole table's statistics; the bench's heavy recipient, 100,000
	// unread among 2 million items, is one.)
	addItems(t, tx, heavy, 2750, time.Now())
	if _, err := tx.Exec(ctx, `ANALYZE notify_inbox`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, stores.CountsPlanSQL); err != nil {
		t.Fatal(err)
	}
	{
		rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+stores.CountInboxSQL, heavy, 11)
		if err != nil {
			t.Fatal(err)
		}
		var plan []map[string]any
		for rows.Next() {
			if err := rows.Scan(&plan); err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		var most float64
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			if r, ok := n["Actual Rows"].(float64); ok && strings.Contains(fmt.Sprint(n["Node Type"]), "Scan") {
				most = max(most, r)
			}
			for _, c := range asSlice(n["Plans"]) {
				walk(c.(map[string]any))
			}
		}
		walk(plan[0]["Plan"].(map[string]any))
		if most == 0 || most > 11 {
			t.Fatalf("a scan of the count read %v rows, want 1..11 (the cap plus one)", most)
		}
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// changeRows reads recipient's change-log rows.
func changeRows(t *testing.T, db stores.DB, recipient string) []string {
	t.Helper()
	rows, err := db.Query(t.Context(), `SELECT kind || ' ' || array_to_string(item_ids, ',') || ' ' || coalesce(data::text, '')
		FROM notify_inbox_changes WHERE recipient = $1 ORDER BY seq`, recipient)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMarkInbox(t *testing.T) {
	t.Parallel()
	// A database of its own: every mark commits, as the HTTP API's do.
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	at := time.Date(2031, 7, 8, 9, 10, 11, 123456789, time.UTC)
	stamp := at.Truncate(time.Microsecond).Format(time.RFC3339Nano)
	ids := addItems(t, pool, "me", 3, time.Now())
	other := addItems(t, pool, "other", 1, time.Now())

	mark := func(m stores.InboxMark) []string {
		t.Helper()
		m.Recipient = "me"
		var changed []string
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			changed, err = stores.MarkInbox(ctx, tx, m)
			return err
		})
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		return changed
	}

	if got := mark(stores.InboxMark{Op: stores.InboxOpRead, IDs: []string{ids[0], other[0]}, At: at}); !slices.Equal(got, []string{ids[0]}) {
		t.Fatalf("read: changed %v, want only my item", got)
	}
	if got := mark(stores.InboxMark{Op: stores.InboxOpRead, IDs: []string{ids[0]}, At: at}); len(got) != 0 {
		t.Fatalf("read again: changed %v", got)
	}
	var readAt, seenAt *time.Time
	if err := pool.QueryRow(ctx, `SELECT read_at, seen_at FROM notify_inbox WHERE id = $1`, ids[0]).Scan(&readAt, &seenAt); err != nil {
		t.Fatal(err)
	}
	if readAt == nil || !readAt.Equal(at.Truncate(time.Microsecond)) || seenAt == nil || !seenAt.Equal(*readAt) {
		t.Fatalf("read_at %v seen_at %v, want both %v", readAt, seenAt, at)
	}
	if got := mark(stores.InboxMark{Op: stores.InboxOpUnread, IDs: []string{ids[0]}}); len(got) != 1 {
		t.Fatalf("unread: changed %v", got)
	}
	if got := mark(stores.InboxMark{Op: stores.InboxOpSeen, All: true, At: at}); len(got) != 2 {
		t.Fatalf("seen all: changed %v, want the 2 unseen", got)
	}
	if got := mark(stores.InboxMark{Op: stores.InboxOpArchive, IDs: []string{ids[2]}, At: at}); len(got) != 1 {
		t.Fatalf("archive: changed %v", got)
	}
	// Read-all leaves the archived item alone.
	if got := mark(stores.InboxMark{Op: stores.InboxOpRead, All: true, At: at}); len(got) != 2 {
		t.Fatalf("read all: changed %v, want 2", got)
	}

	sorted := func(s ...string) []string { slices.Sort(s); return s }
	j := func(s []string) string { return strings.Join(s, ",") }
	want := []string{
		`updated ` + ids[0] + ` {"read_at": "` + stamp + `"}`,
		`updated ` + ids[0] + ` {"read_at": null}`,
		`updated ` + j(sorted(ids[1], ids[2])) + ` {"seen_at": "` + stamp + `"}`,
		`updated ` + ids[2] + ` {"archived_at": "` + stamp + `"}`,
		`updated ` + j(sorted(ids[0], ids[1])) + ` {"read_at": "` + stamp + `"}`,
	}
	if got := changeRows(t, pool, "me"); !slices.Equal(got, want) {
		t.Fatalf("change log:\n%v\nwant\n%v", got, want)
	}
	if got := changeRows(t, pool, "other"); len(got) != 0 {
		t.Fatalf("change log of other: %v", got)
	}
}

func TestMarkInboxRefusals(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	now := time.Now()
	tooMany := make([]string, stores.MaxInboxMarkIDs+1)
	for i := range tooMany {
		tooMany[i] = "00000000-0000-0000-0000-000000000000"
	}
	for _, m := range []stores.InboxMark{
		{Recipient: "x", Op: stores.InboxOpRead, IDs: []string{"nope"}, At: now},
		{Recipient: "x", Op: stores.InboxOpRead, IDs: tooMany, At: now},
		{Recipient: "x", Op: stores.InboxOpArchive, All: true, At: now},
		{Recipient: "x", Op: stores.InboxOpUnread, All: true},
		{Recipient: "x", Op: stores.InboxOpRead, IDs: []string{"00000000-0000-0000-0000-000000000000"}},
		{Recipient: "x", Op: "delete", IDs: []string{"00000000-0000-0000-0000-000000000000"}, At: now},
	} {
		if _, err := stores.MarkInbox(ctx, tx, m); !errors.Is(err, stores.ErrBadInboxMark) {
			t.Errorf("%v %v: err %v, want ErrBadInboxMark", m.Op, len(m.IDs), err)
		}
	}
	// No ids is no change, and no lock taken.
	if got, err := stores.MarkInbox(ctx, tx, stores.InboxMark{Recipient: "x", Op: stores.InboxOpRead, IDs: []string{}, At: now}); err != nil || len(got) != 0 {
		t.Fatalf("empty ids: %v %v", got, err)
	}
	var locks int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks != 0 {
		t.Fatalf("%d advisory locks held after no change", locks)
	}
}

func must(rows pgx.Rows, err error) pgx.Rows {
	if err != nil {
		panic(err)
	}
	return rows
}

// No inbox writer takes an advisory lock: writers of different recipients
// never queue behind one another (the change log's readers stay correct
// through its watermark instead).
func TestInboxWritersTakeNoAdvisoryLock(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	ctx := t.Context()
	ids := chgCreate(t, tx, "nolock", "nolock-a", "nolock-b")
	if _, err := stores.MarkInbox(ctx, tx, stores.InboxMark{Recipient: "nolock-a", Op: stores.InboxOpRead, IDs: ids[:1], At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := stores.LogInboxUpdated(ctx, tx, "nolock-b", ids[1:], map[string]any{"seen_at": time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := stores.LogInboxDeleted(ctx, tx, ids, []string{"nolock-a", "nolock-b"}, ""); err != nil {
		t.Fatal(err)
	}
	var locks, rows int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM notify_inbox_changes WHERE recipient LIKE 'nolock-%' OR recipients && ARRAY['nolock-a', 'nolock-b']`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if locks != 0 || rows != 4 {
		t.Fatalf("%d advisory locks held, %d log rows; want none and 4 (created, 2 updated, deleted)", locks, rows)
	}
}
