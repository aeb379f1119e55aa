package stores_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// utcDay is the start of the UTC day d days from today.
func utcDay(d int) time.Time {
	now := time.Now().UTC()
	return time.Date(now.Year(), now.Month(), now.Day()+d, 0, 0, 0, 0, time.UTC)
}

// fillChangeDay creates the change log's partition for the day starting at
// day (as notify_inbox_changes_extend names them) and n rows in it, seq
// first+1..first+n, each a created change of its own recipient.
func fillChangeDay(t *testing.T, pool *pgxpool.Pool, day time.Time, first, n int) {
	t.Helper()
	ctx := t.Context()
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE notify_inbox_changes_%s PARTITION OF notify_inbox_changes
		FOR VALUES FROM ('%s') TO ('%s')`, day.Format("20060102"), day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339))); err != nil {
		t.Fatal(err)
	}
	insertChangeRows(t, pool, day.Add(time.Hour), first, n)
}

func insertChangeRows(t *testing.T, pool *pgxpool.Pool, at time.Time, first, n int) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `
		INSERT INTO notify_inbox_changes (seq, recipient, kind, item_ids, created_at)
		SELECT $1::bigint + g, 'part-' || g, 'created', ARRAY[gen_random_uuid()], $3::timestamptz + g * interval '1 ms'
		FROM generate_series(1, $2) g`, first, n, at); err != nil {
		t.Fatal(err)
	}
}

// walOf runs sql (with args) under EXPLAIN (ANALYZE, WAL) on one connection
// and returns the WAL bytes that backend wrote for it, the function bodies it
// calls included. Cluster-wide WAL positions would count what the other tests
// running beside this one write.
func walOf(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) float64 {
	t.Helper()
	var plan []struct {
		Plan struct {
			WALBytes float64 `json:"WAL Bytes"`
		}
	}
	var raw []byte
	if err := pool.QueryRow(t.Context(), `EXPLAIN (ANALYZE, WAL, FORMAT JSON) `+sql, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("explain output %s: %v", raw, err)
	}
	return plan[0].Plan.WALBytes
}

func countChanges(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestChangeLogPartitionsAreMadeAhead(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	// The migration made yesterday through a week ahead; a second call
	// makes nothing new.
	for d := -1; d <= stores.ChangeLogAhead; d++ {
		var reg *string
		name := "notify_inbox_changes_" + utcDay(d).Format("20060102")
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1)::text`, name).Scan(&reg); err != nil || reg == nil {
			t.Fatalf("partition %s: %v, %v", name, reg, err)
		}
	}
	if n, err := stores.ExtendChangeLog(ctx, pool); err != nil || n != 0 {
		t.Fatalf("ExtendChangeLog again: %d, %v; want 0 new partitions", n, err)
	}
	// A row of today lands in today's partition, not the default one.
	chgCreate(t, pool, "today", "part-today")
	if n := countChanges(t, pool, "notify_inbox_changes_"+utcDay(0).Format("20060102")); n != 1 {
		t.Fatalf("today's partition holds %d rows, want 1", n)
	}
	if n := countChanges(t, pool, "notify_inbox_changes_default"); n != 0 {
		t.Fatalf("default partition holds %d rows, want 0", n)
	}
	// A day whose rows are already in the default partition is left there.
	insertChangeRows(t, pool, utcDay(-30).Add(time.Hour), 100, 3)
	if _, err := pool.Exec(ctx, `DROP TABLE notify_inbox_changes_`+utcDay(-1).Format("20060102")); err != nil {
		t.Fatal(err)
	}
	insertChangeRows(t, pool, utcDay(-1).Add(time.Hour), 200, 2)
	if n, err := stores.ExtendChangeLog(ctx, pool); err != nil || n != 0 {
		t.Fatalf("ExtendChangeLog over a day in the default partition: %d, %v; want 0", n, err)
	}
	if n := countChanges(t, pool, "notify_inbox_changes_default"); n != 5 {
		t.Fatalf("default partition holds %d rows, want 5", n)
	}
}

// Retention drops whole days: its WAL (and so its work) stays flat however
// many rows a day holds, where deleting the same rows grows with them.
func TestChangeLogRetentionStaysFlatAsTheLogGrows(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	const small, large = 1_000, 50_000
	fillChangeDay(t, pool, utcDay(-12), 0, small)
	fillChangeDay(t, pool, utcDay(-11), 1_000_000, large)
	fillChangeDay(t, pool, utcDay(-10), 2_000_000, 10)

	// Each drop is measured as the statement DropChangeLogDays runs, then
	// the Go function itself is checked on the next day.
	const dropSQL = `SELECT * FROM notify_inbox_changes_drop_before($1)`
	walSmall := walOf(t, pool, dropSQL, utcDay(-11))
	walLarge := walOf(t, pool, dropSQL, utcDay(-10))
	if n := countChanges(t, pool, "notify_inbox_changes"); n != 10 {
		t.Fatalf("%d rows left after dropping two days, want the third day's 10", n)
	}
	// The cutoff falls inside day -10: that day stays, whole.
	dropped, oldest, err := stores.DropChangeLogDays(ctx, pool, utcDay(-10).Add(12*time.Hour))
	if err != nil || dropped != 0 || !oldest.Equal(utcDay(-10)) {
		t.Fatalf("cutoff inside day -10: %d dropped, oldest kept %s, %v; want 0 and day -10", dropped, oldest, err)
	}
	through, err := stores.TrimmedThrough(ctx, pool)
	if err != nil || through != 1_000_000+large {
		t.Fatalf("trimmed through %d, %v; want the newest dropped seq %d", through, err, 1_000_000+large)
	}
	if n := countChanges(t, pool, "notify_inbox_changes"); n != 10 {
		t.Fatalf("%d rows left, want the 10 of the day the cutoff falls in", n)
	}

	// The same number of rows deleted as rows (the default partition's way,
	// the statement of DeleteChangesBefore without its batch bound).
	insertChangeRows(t, pool, utcDay(-40), 100, large) // below every other seq: the oldest rows
	walDelete := walOf(t, pool, `DELETE FROM notify_inbox_changes WHERE created_at < $1`, utcDay(-30))
	if n, err := stores.DeleteChangesBefore(ctx, pool, utcDay(-30), 5000); err != nil || n != 0 {
		t.Fatalf("DeleteChangesBefore after the delete: %d, %v; want nothing left to delete", n, err)
	}
	t.Logf("retention WAL: drop a day of %d rows %.0f B, of %d rows %.0f B; delete %d rows %.0f B",
		small, walSmall, large, walLarge, large, walDelete)
	if walLarge > 2*walSmall+16<<10 {
		t.Errorf("dropping a day of %d rows wrote %.0f B of WAL, a day of %d rows %.0f B: not flat", large, walLarge, small, walSmall)
	}
	if walDelete < 10*walLarge {
		t.Errorf("deleting %d rows wrote %.0f B of WAL, dropping them %.0f B: the comparison shows nothing", large, walDelete, walLarge)
	}
}
