package stores_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// A list SendTx marked sorted is kept as written and counted and split by
// position; the same list unmarked, with an id twice, or with the actor in it
// (notify_actor off) is normalised in full: sorted, one entry per id with its
// strongest reason, the actor taken out. Both paths agree on the audience.
func TestNormalizeInlineList(t *testing.T) {
	t.Parallel()
	reasons := []string{"assigned", "author", "mentioned"}
	const n = 1000
	ids := make([]string, n)
	why := make([]string, n)
	for i := range ids {
		ids[i], why[i] = fmt.Sprintf("u%04d", i), "mentioned"
	}
	type want struct {
		ids, reasons []string
		bounds       []string
	}
	all := want{ids: ids, reasons: why, bounds: []string{"u0250", "u0500", "u0750"}}
	cases := []struct {
		name        string
		sorted      bool
		actor       string
		notifyActor bool
		ids, why    []string
		topics      []string
		want        want
	}{
		{name: "marked sorted", sorted: true, ids: ids, why: why, want: all},
		{name: "unmarked", ids: ids, why: why, want: all},
		// The mark is SendTx's promise and is not checked: a marked list
		// is not read, let alone sorted.
		{name: "marked, trusted as written", sorted: true, ids: append([]string{"u0999"}, ids[:999]...), why: why,
			want: want{ids: append([]string{"u0999"}, ids[:999]...), reasons: why, bounds: []string{"u0249", "u0499", "u0749"}}},
		{name: "marked, actor notified", sorted: true, actor: "u0003", notifyActor: true, ids: ids, why: why, want: all},
		{name: "marked, actor listed", sorted: true, actor: "u0003", ids: ids, why: why,
			want: want{ids: slices.Delete(slices.Clone(ids), 3, 4), reasons: why[1:], bounds: all.bounds}},
		{name: "marked, actor not listed", sorted: true, actor: "x", ids: ids, why: why, want: all},
		{name: "unsorted with a duplicate", ids: append([]string{"u0999", "u0007"}, ids...),
			why:  append([]string{"mentioned", "assigned"}, why...),
			want: want{ids: ids, reasons: slices.Concat(why[:7], []string{"assigned"}, why[8:]), bounds: all.bounds}},
		{name: "marked, with a topic", sorted: true, ids: ids[:500], why: why[:500], topics: []string{"t"},
			// A mixed audience is split by percentile_disc over the union.
			want: want{ids: ids[:500], reasons: why[:500], bounds: []string{"u0249", "u0499", "u0749"}}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			tx := pgtest.Tx(t)
			nid := fmt.Sprintf("01900000-0000-7000-8000-%012d", 0xe100+i)
			if _, err := tx.Exec(ctx, `
INSERT INTO notify_notifications (id, notifier, key, actor, recipients, reasons, topics, status, inline_sorted)
VALUES ($1, 'n', $7, nullif($2, ''), $3, $4, $5, 'pending', $6)`, nid, c.actor, c.ids, c.why, append([]string{}, c.topics...), c.sorted, c.name); err != nil {
				t.Fatal(err)
			}
			if len(c.topics) > 0 {
				// The topic brings the second half of the audience and one
				// recipient already listed.
				if _, err := tx.Exec(ctx, `
INSERT INTO notify_subscriptions (topic, recipient, reason)
SELECT 't', r, 'subscribed' FROM unnest($1::text[]) r`, append([]string{"u0001"}, ids[500:]...)); err != nil {
					t.Fatal(err)
				}
			}
			a, err := stores.NormalizeAudience(ctx, tx, nid, reasons, c.notifyActor, 4, false)
			if err != nil {
				t.Fatal(err)
			}
			wantSize := len(c.want.ids)
			if len(c.topics) > 0 {
				wantSize = n
			}
			if a.Size != wantSize || !slices.Equal(a.Bounds, c.want.bounds) {
				t.Fatalf("audience %d, bounds %v; want %d, %v", a.Size, a.Bounds, wantSize, c.want.bounds)
			}
			var gotIDs, gotWhy []string
			var normalized bool
			if err := tx.QueryRow(ctx, `SELECT recipients, reasons, normalized FROM notify_notifications WHERE id = $1`, nid).
				Scan(&gotIDs, &gotWhy, &normalized); err != nil {
				t.Fatal(err)
			}
			if !normalized || !slices.Equal(gotIDs, c.want.ids) || !slices.Equal(gotWhy, c.want.reasons) {
				t.Fatalf("stored list (normalized %v):\n%v\n%v\nwant\n%v\n%v", normalized, gotIDs, gotWhy, c.want.ids, c.want.reasons)
			}
			if !slices.IsSorted(gotIDs) {
				return // positions in a list that is not sorted mean nothing
			}
			// The lanes' inline windows: the entries before each bound. A
			// bound is an entry of the list, except for the mixed audience's
			// last one (u0749, a subscriber), which is counted.
			if err := stores.CreateLanes(ctx, tx, nid, a.Bounds); err != nil {
				t.Fatal(err)
			}
			before := func(bound string) int {
				n, _ := slices.BinarySearch(gotIDs, bound)
				return n
			}
			var got, want [][2]int
			for i := 0; i <= len(a.Bounds); i++ {
				w := [2]int{0, len(gotIDs)}
				if i > 0 {
					w[0] = before(a.Bounds[i-1])
				}
				if i < len(a.Bounds) {
					w[1] = before(a.Bounds[i])
				}
				want = append(want, w)
			}
			rows, err := tx.Query(ctx, `SELECT inline_pos, inline_end FROM notify_fanout_lanes WHERE notification_id = $1 ORDER BY lane`, nid)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var w [2]int
				if err := rows.Scan(&w[0], &w[1]); err != nil {
					t.Fatal(err)
				}
				got = append(got, w)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("lane windows %v, want %v (bounds %v)", got, want, a.Bounds)
			}
		})
	}
}
