package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/notifyd/notifyd/internal/wire"
)

// insertItems writes n inbox items for recipient, all created at createdAt,
// keyed prefix-1..prefix-n, and returns their ids.
func insertItems(t *testing.T, pool *pgxpool.Pool, recipient, prefix string, n int, createdAt time.Time) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		INSERT INTO notify_inbox (id, recipient, notifier, key, category, reason, title, params, created_at)
		SELECT gen_random_uuid(), $1, 'comment.created', $2 || '-' || g, 'comments', 'direct', 'item ' || g,
		       jsonb_build_object('n', g), $3
		FROM generate_series(1, $4) g
		RETURNING id::text`, recipient, prefix, createdAt, n)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// inboxPage is a decoded /v1/inbox response.
type inboxPage struct {
	Items []struct {
		ID         string          `json:"id"`
		Notifier   string          `json:"notifier"`
		Key        string          `json:"key"`
		Category   string          `json:"category"`
		Reason     string          `json:"reason"`
		Actor      *string         `json:"actor"`
		Title      string          `json:"title"`
		Body       string          `json:"body"`
		URL        string          `json:"url"`
		Params     json.RawMessage `json:"params"`
		CreatedAt  time.Time       `json:"created_at"`
		SeenAt     *time.Time      `json:"seen_at"`
		ReadAt     *time.Time      `json:"read_at"`
		ArchivedAt *time.Time      `json:"archived_at"`
	} `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func (b *bundle) inbox(t *testing.T, path, token string) inboxPage {
	t.Helper()
	r := b.do(t, "GET", path, token, nil)
	expect(t, r, 200, "")
	var p inboxPage
	if err := json.Unmarshal(r.raw, &p); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.body["next_cursor"]; !ok {
		t.Fatalf("no next_cursor key: %s", r.raw)
	}
	return p
}

// allIDs pages through path (which has a query string) and returns the ids
// in the order served.
func (b *bundle) allIDs(t *testing.T, path, token string, limit int) (ids []string, pages int) {
	t.Helper()
	cursor := ""
	for {
		p := path + "&limit=" + fmt.Sprint(limit)
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		page := b.inbox(t, p, token)
		pages++
		if len(page.Items) > limit {
			t.Fatalf("page of %d items, limit %d", len(page.Items), limit)
		}
		for _, it := range page.Items {
			ids = append(ids, it.ID)
		}
		if page.NextCursor == nil {
			return ids, pages
		}
		cursor = *page.NextCursor
		if pages > 100 {
			t.Fatal("paging does not end")
		}
	}
}

func TestInboxPaginationTies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := recipientToken(t, "pager")
	same := time.Date(2029, 5, 6, 7, 8, 9, 0, time.UTC)
	ids := insertItems(t, b.pool, "pager", "tie", 120, same)

	got, pages := b.allIDs(t, "/v1/inbox?filter=all", tok, 50)
	if pages != 3 {
		t.Fatalf("%d pages, want 3 (50+50+20)", pages)
	}
	want := slices.Clone(ids)
	slices.Sort(want) // equal created_at: id ascending
	if !slices.Equal(got, want) {
		t.Fatalf("paged ids (%d) differ from the %d items in total order", len(got), len(want))
	}
}

func TestInboxPaginationOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := recipientToken(t, "pager")
	base := time.Date(2029, 5, 6, 7, 8, 9, 0, time.UTC)
	// Groups of ties at several instants, inserted out of order, some a
	// microsecond apart.
	var all []string
	for _, off := range []time.Duration{3 * time.Second, 0, time.Microsecond, 2 * time.Hour, 5 * time.Second} {
		all = append(all, insertItems(t, b.pool, "pager", fmt.Sprint("g", off), 7, base.Add(off))...)
	}
	insertItems(t, b.pool, "someone-else", "other", 5, base.Add(time.Second))

	got, _ := b.allIDs(t, "/v1/inbox?x=1", tok, 4)
	if len(got) != len(all) {
		t.Fatalf("%d items paged, want %d", len(got), len(all))
	}
	// Check the order against the database's (created_at DESC, id ASC).
	rows, err := b.pool.Query(t.Context(), `SELECT id::text FROM notify_inbox WHERE recipient = 'pager' ORDER BY created_at DESC, id ASC`)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		want = append(want, id)
	}
	rows.Close()
	if !slices.Equal(got, want) {
		t.Fatal("paged order is not (created_at desc, id asc)")
	}
	// The default page is 50 and the first page has everything here.
	p := b.inbox(t, "/v1/inbox", tok)
	if len(p.Items) != len(all) || p.NextCursor != nil {
		t.Fatalf("default page: %d items, next %v", len(p.Items), p.NextCursor)
	}
	if !strings.HasPrefix(p.Items[0].Key, fmt.Sprint("g", 2*time.Hour)+"-") {
		t.Fatalf("newest first: first item is %s", p.Items[0].Key)
	}
}

func TestInboxBadQuery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := recipientToken(t, "q")
	insertItems(t, b.pool, "q", "k", 3, time.Now())
	for _, q := range []string{"limit=0", "limit=-1", "limit=201", "limit=abc", "limit=99999999999999999999", "filter=read"} {
		expect(t, b.do(t, "GET", "/v1/inbox?"+q, tok, nil), 400, wire.CodeBadRequest)
	}
	expect(t, b.do(t, "GET", "/v1/inbox?limit=200", tok, nil), 200, "")

	page := b.inbox(t, "/v1/inbox?limit=1", tok)
	if page.NextCursor == nil {
		t.Fatal("no cursor after the first of 3 items")
	}
	good := *page.NextCursor
	raw, err := base64.RawURLEncoding.DecodeString(good)
	if err != nil {
		t.Fatalf("cursor is not base64url: %v", err)
	}
	raw[5] ^= 0x01
	tampered := base64.RawURLEncoding.EncodeToString(raw)
	for _, c := range []string{tampered, "garbage", good[:len(good)-2], good + "AA", "!!!!"} {
		expect(t, b.do(t, "GET", "/v1/inbox?limit=1&cursor="+url.QueryEscape(c), tok, nil), 400, wire.CodeBadCursor)
	}
	expect(t, b.do(t, "GET", "/v1/inbox?limit=1&cursor="+good, tok, nil), 200, "")
}

func TestInboxIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)
	aIDs := insertItems(t, b.pool, "alice", "a", 2, now)
	bIDs := insertItems(t, b.pool, "bob", "b", 3, now)
	alice := recipientToken(t, "alice")

	page := b.inbox(t, "/v1/inbox", alice)
	if len(page.Items) != 2 {
		t.Fatalf("alice sees %d items, want her 2", len(page.Items))
	}
	for _, it := range page.Items {
		if !slices.Contains(aIDs, it.ID) {
			t.Fatalf("alice sees %s, not hers", it.ID)
		}
	}
	r := b.do(t, "GET", "/v1/inbox/counts", alice, nil)
	expect(t, r, 200, "")
	if r.body["unread"] != float64(2) || r.body["unseen"] != float64(2) {
		t.Fatalf("alice counts %s, want 2/2", r.raw)
	}

	// Alice names bob's items: nothing is marked, nothing changes.
	for _, op := range []string{"read", "seen", "archive"} {
		r := b.do(t, "POST", "/v1/inbox/"+op, alice, map[string]any{"ids": bIDs})
		expect(t, r, 200, "")
		if r.body["marked"] != float64(0) {
			t.Fatalf("alice %s bob's ids: %s", op, r.raw)
		}
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient = 'bob'
		AND read_at IS NULL AND seen_at IS NULL AND archived_at IS NULL`); n != 3 {
		t.Fatalf("bob has %d untouched items, want 3", n)
	}
	// Bob's read item stays read when alice marks it unread.
	if _, err := b.pool.Exec(t.Context(), `UPDATE notify_inbox SET read_at = now() WHERE id = $1`, bIDs[0]); err != nil {
		t.Fatal(err)
	}
	r = b.do(t, "POST", "/v1/inbox/unread", alice, map[string]any{"ids": bIDs})
	if r.body["marked"] != float64(0) {
		t.Fatalf("alice unread bob's: %s", r.raw)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE id = $1 AND read_at IS NOT NULL`, bIDs[0]); n != 1 {
		t.Fatal("bob's item was un-read by alice")
	}
	// Read-all and seen-all reach only alice's items.
	r = b.do(t, "POST", "/v1/inbox/read", alice, map[string]any{"all": true})
	if r.body["marked"] != float64(2) {
		t.Fatalf("alice read all: %s", r.raw)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient = 'bob' AND read_at IS NULL`); n != 2 {
		t.Fatalf("bob has %d unread after alice's read-all, want 2", n)
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_inbox_changes WHERE recipient = 'bob'`); n != 0 {
		t.Fatalf("%d change-log rows for bob", n)
	}
	// The admin view of bob's inbox shows bob's.
	page = b.inbox(t, "/v1/recipients/bob/inbox", adminToken)
	if len(page.Items) != 3 {
		t.Fatalf("admin sees %d of bob's items, want 3", len(page.Items))
	}
}

type change struct {
	Kind string
	IDs  []string
	Data map[string]any
}

func changes(t *testing.T, pool *pgxpool.Pool, recipient string) []change {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT kind, item_ids::text[], data FROM notify_inbox_changes
		WHERE recipient = $1 ORDER BY seq`, recipient)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []change
	for rows.Next() {
		var c change
		if err := rows.Scan(&c.Kind, &c.IDs, &c.Data); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func TestInboxMarks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := recipientToken(t, "m")
	base := time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 5 {
		ids = append(ids, insertItems(t, b.pool, "m", fmt.Sprint("k", i), 1, base.Add(time.Duration(i)*time.Minute))...)
	}
	counts := func() (unread, unseen float64) {
		r := b.do(t, "GET", "/v1/inbox/counts", tok, nil)
		expect(t, r, 200, "")
		return r.body["unread"].(float64), r.body["unseen"].(float64)
	}
	mark := func(op string, body any, want int) {
		t.Helper()
		r := b.do(t, "POST", "/v1/inbox/"+op, tok, body)
		expect(t, r, 200, "")
		if r.body["marked"] != float64(want) {
			t.Fatalf("%s %v: %s, want marked %d", op, body, r.raw, want)
		}
	}
	stamp := fixedNow.Format(time.RFC3339Nano)

	if u, s := counts(); u != 5 || s != 5 {
		t.Fatalf("counts %v/%v, want 5/5", u, s)
	}
	mark("read", map[string]any{"ids": []string{ids[0], ids[1], ids[1]}}, 2)
	mark("read", map[string]any{"ids": []string{ids[0]}}, 0) // already read: no change, no log row
	if u, s := counts(); u != 3 || s != 3 {
		t.Fatalf("after read: %v/%v, want 3/3 (reading marks seen)", u, s)
	}
	mark("seen", map[string]any{"ids": []string{ids[2]}}, 1)
	if u, s := counts(); u != 3 || s != 2 {
		t.Fatalf("after seen: %v/%v, want 3/2", u, s)
	}
	mark("unread", map[string]any{"ids": []string{ids[0]}}, 1)
	if u, s := counts(); u != 4 || s != 2 {
		t.Fatalf("after unread: %v/%v, want 4/2 (unread keeps seen)", u, s)
	}
	mark("archive", map[string]any{"ids": []string{ids[4]}}, 1)
	if u, s := counts(); u != 3 || s != 1 {
		t.Fatalf("after archive: %v/%v, want 3/1 (archived counts nowhere)", u, s)
	}
	mark("seen", "", 1) // all unseen: only ids[3] is left
	mark("seen", map[string]any{}, 0)
	if u, s := counts(); u != 3 || s != 0 {
		t.Fatalf("after seen all: %v/%v, want 3/0", u, s)
	}
	mark("read", map[string]any{"all": true}, 3)
	if u, s := counts(); u != 0 || s != 0 {
		t.Fatalf("after read all: %v/%v, want 0/0", u, s)
	}
	mark("read", map[string]any{"ids": []string{}}, 0)

	// Filters.
	if p := b.inbox(t, "/v1/inbox?filter=archived", tok); len(p.Items) != 1 || p.Items[0].ID != ids[4] ||
		p.Items[0].ArchivedAt == nil || !p.Items[0].ArchivedAt.Equal(fixedNow) {
		t.Fatalf("archived filter: %+v", p.Items)
	}
	if p := b.inbox(t, "/v1/inbox", tok); len(p.Items) != 4 {
		t.Fatalf("all filter: %d items, want the 4 unarchived", len(p.Items))
	}
	mark("unread", map[string]any{"ids": []string{ids[1]}}, 1)
	if p := b.inbox(t, "/v1/inbox?filter=unread", tok); len(p.Items) != 1 || p.Items[0].ID != ids[1] || p.Items[0].ReadAt != nil || p.Items[0].SeenAt == nil {
		t.Fatalf("unread filter: %+v", p.Items)
	}

	// The change log: one row per request that changed something, in order.
	sorted := func(s ...string) []string { s = slices.Clone(s); slices.Sort(s); return s }
	rest := sorted(ids[0], ids[2], ids[3])
	want := []change{
		{"updated", sorted(ids[0], ids[1]), map[string]any{"read_at": stamp}},
		{"updated", []string{ids[2]}, map[string]any{"seen_at": stamp}},
		{"updated", []string{ids[0]}, map[string]any{"read_at": nil}},
		{"updated", []string{ids[4]}, map[string]any{"archived_at": stamp}},
		{"updated", []string{ids[3]}, map[string]any{"seen_at": stamp}},
		{"updated", rest, map[string]any{"read_at": stamp}},
		{"updated", []string{ids[1]}, map[string]any{"read_at": nil}},
	}
	got := changes(t, b.pool, "m")
	if len(got) != len(want) {
		t.Fatalf("%d change-log rows, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].Kind != want[i].Kind || !slices.Equal(got[i].IDs, want[i].IDs) || fmt.Sprint(got[i].Data) != fmt.Sprint(want[i].Data) {
			t.Errorf("change %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	// Item fields as stored.
	p := b.inbox(t, "/v1/inbox?filter=all&limit=1", tok)
	it := p.Items[0]
	if it.Notifier != "comment.created" || it.Category != "comments" || it.Reason != "direct" || it.Actor != nil ||
		!strings.HasPrefix(it.Title, "item ") || string(it.Params) != `{"n": 1}` && string(it.Params) != `{"n":1}` {
		t.Fatalf("item %+v params %s", it, it.Params)
	}
}

func TestInboxMarkBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tok := recipientToken(t, "bad")
	ids := make([]string, 1001)
	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-7000-8000-%012d", i)
	}
	tests := []struct {
		op   string
		body any
	}{
		{"read", map[string]any{"ids": []string{"nope"}}},
		{"read", map[string]any{"ids": ids}},
		{"read", map[string]any{}},
		{"read", map[string]any{"all": true, "ids": []string{}}},
		{"read", map[string]any{"ids": "x"}},
		{"read", map[string]any{"ids": []any{1}}},
		{"read", map[string]any{"what": true}},
		{"read", ""},
		{"unread", map[string]any{"all": true}},
		{"unread", map[string]any{}},
		{"archive", map[string]any{"all": true}},
		{"archive", map[string]any{"ids": []string{"00000000-0000-0000-0000-00000000000g"}}},
		{"seen", map[string]any{"ids": []string{"x"}}},
	}
	for _, tt := range tests {
		r := b.do(t, "POST", "/v1/inbox/"+tt.op, tok, tt.body)
		if r.status != 400 || r.errCode() != wire.CodeBadRequest {
			t.Errorf("%s %v: %d %s, want 400 bad_request", tt.op, tt.body, r.status, r.raw)
		}
	}
}
