package stores_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// EnvLedgerRows sets how many deliveries TestLedgerViewPlans writes (default
// 100,000; docs/console.md quotes a run with 1,000,000).
const EnvLedgerRows = "NOTIFYD_LEDGER_ROWS"

// TestLedgerViewPlans: on a ledger of many rows, spread over months of
// notifications, channels and statuses, and analyzed, every statement of the
// operator's ledger views reads notify_deliveries through its (channel,
// status, updated_at, id) index only, never by a sequential scan, and
// reads about the rows it returns: the failed emails of the last hour, not
// the ledger. EXPLAIN ANALYZE's actual rows of the index scans are summed.
func TestLedgerViewPlans(t *testing.T) {
	t.Parallel()
	rows := 100000
	if v := os.Getenv(EnvLedgerRows); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		rows = n
	}
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	now := time.Now().UTC()
	// Notifications over six weeks around now (ids carry their time, so the
	// deliveries land in the legacy partition and in month partitions);
	// deliveries changed over the last 30 days, one in 4,000 of them a failed
	// email of the last hour.
	start := time.Now()
	exec(t, pool, `CREATE FUNCTION pg_temp.nid(i int, t timestamptz) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
		SELECT (lpad(to_hex((extract(epoch FROM t + (i - 20000) * interval '1 minute') * 1000)::bigint), 12, '0')
		        || '7000800000000000' || lpad(to_hex(i), 4, '0'))::uuid $$`)
	exec(t, pool, `INSERT INTO notify_notifications (id, notifier, key, status, normalized)
		SELECT pg_temp.nid(i, $1), 'n', 'k' || i, 'fanned_out', true FROM generate_series(0, 59999) i`, now)
	exec(t, pool, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, updated_at)
		SELECT gen_random_uuid(), pg_temp.nid(i % 60000, $1), 'n', 'k' || (i % 60000), 'u' || i,
		       (ARRAY['email', 'webhook', 'slack', 'sms'])[1 + i % 4], 'immediate',
		       CASE WHEN i % 4000 = 0 THEN 'failed' WHEN i % 97 = 0 THEN 'refused' WHEN i % 13 = 0 THEN 'failed' ELSE 'sent' END,
		       CASE WHEN i % 4000 = 0 THEN $1::timestamptz - (i % 3600) * interval '1 second'
		            ELSE $1::timestamptz - interval '2 hours' - (i::bigint * 2592000 / $2 % 2592000) * interval '1 second' END
		FROM generate_series(1, $2::int) i`, now, rows)
	exec(t, pool, `VACUUM (ANALYZE) notify_deliveries`) // as autovacuum leaves it
	t.Logf("%d deliveries written and analyzed in %s", rows, time.Since(start).Round(time.Millisecond))
	var parts int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT tableoid) FROM notify_deliveries`).Scan(&parts); err != nil || parts < 2 {
		t.Fatalf("the deliveries are in %d partitions (%v), want several", parts, err)
	}

	list, redrive, hours, counts := stores.LedgerViewSQLs()
	hour := fmt.Sprintf("'%s'", now.Add(-time.Hour).Format(time.RFC3339Nano))
	day := fmt.Sprintf("'%s'", now.Add(-24*time.Hour).Format(time.RFC3339Nano))
	wantFailed := rows / 4000
	for _, c := range []struct {
		name, sql, args string
		maxRows         int // the most rows the index scans may return, all partitions together
	}{
		{"list: failed email, last hour", list,
			`'{failed}', 'email', ` + hour + `, 'infinity', 'infinity', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '', '', 51, 5000, ''`,
			wantFailed + 60},
		{"list: any status, email, a page of 50", list,
			`'{}', 'email', '-infinity', 'infinity', 'infinity', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '', '', 51, 5000, ''`,
			3 * 51},
		{"list: failed, recipient filter", list,
			`'{failed}', '', ` + hour + `, 'infinity', 'infinity', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '', 'u4000', 51, 5000, ''`,
			wantFailed + 60},
		{"redrive: failed email, last hour", redrive,
			`'{failed}', 'email', ` + hour + `, 'infinity', '', '', 10000, 100000, now(), ''`,
			2*wantFailed + 60},
		{"hours: the last 24 hours", hours, `'{}', '', ` + day, rows/30 + wantFailed + 500},
	} {
		plan := explainAnalyze(t, pool, c.name, c.sql, c.args)
		if seqScan(plan) {
			t.Errorf("%s reads the ledger sequentially:\n%s", c.name, plan)
			continue
		}
		if !strings.Contains(plan, "channel_status") {
			t.Errorf("%s does not use the (channel, status, updated_at, id) index:\n%s", c.name, plan)
			continue
		}
		// A merge of partitions reads the head of each one more, and the
		// loose index scan over the pairs one row per pair and partition.
		if n := indexRows(plan); n > c.maxRows+2*12*(parts+3) {
			t.Errorf("%s: the index scans returned %d rows, want at most %d:\n%s", c.name, n, c.maxRows, plan)
		} else {
			t.Logf("%s: %d rows from the index, %s", c.name, n, planTime(plan))
			if os.Getenv("NOTIFYD_PLANS") != "" {
				t.Log(plan)
			}
		}
	}
	// The list's counts: the identity index of each notification's partition.
	plan := explainAnalyze(t, pool, "counts", counts, `(SELECT array_agg(id::text) FROM (SELECT id FROM notify_notifications LIMIT 50) x), 'in_app', 10000`)
	if seqScan(plan) {
		t.Errorf("the list's counts read the ledger sequentially:\n%s", plan)
	}
}

// explainAnalyze runs EXPLAIN ANALYZE of a statement with its arguments
// written out, as a prepared statement on its generic plan would not be: the
// views' statements run with their values (pgx's unnamed statements).
func explainAnalyze(t *testing.T, db stores.DB, name, sql, args string) string {
	t.Helper()
	for i := 20; i >= 1; i-- {
		if i <= countArgs(args) {
			sql = strings.ReplaceAll(sql, fmt.Sprintf("$%d", i), fmt.Sprintf("(%s)", splitArgs(args)[i-1]))
		}
	}
	rows, err := db.Query(t.Context(), `EXPLAIN (ANALYZE, BUFFERS) `+sql)
	if err != nil {
		t.Fatalf("%s: explain: %v", name, err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: explain: %v", name, err)
	}
	return b.String()
}

// splitArgs splits a list of SQL literals at the commas outside quotes,
// brackets and parentheses.
func splitArgs(s string) []string {
	var out []string
	depth, quoted, from := 0, false, 0
	for i, c := range s {
		switch {
		case c == '\'':
			quoted = !quoted
		case quoted:
		case c == '(' || c == '{':
			depth++
		case c == ')' || c == '}':
			depth--
		case c == ',' && depth == 0:
			out = append(out, strings.TrimSpace(s[from:i]))
			from = i + 1
		}
	}
	if strings.TrimSpace(s[from:]) != "" {
		out = append(out, strings.TrimSpace(s[from:]))
	}
	return out
}

func countArgs(s string) int { return len(splitArgs(s)) }

var indexRowsRE = regexp.MustCompile(`(?:Index (?:Only )?Scan (?:Backward )?using|Bitmap Index Scan on) \S*channel_status\S* .*actual time=\S+ rows=(\d+) loops=(\d+)`)

// indexRows sums the rows the (status, channel, ...) index scans returned.
func indexRows(plan string) int {
	n := 0
	for _, m := range indexRowsRE.FindAllStringSubmatch(plan, -1) {
		r, _ := strconv.Atoi(m[1])
		l, _ := strconv.Atoi(m[2])
		n += r * l
	}
	return n
}

var seqScanRE = regexp.MustCompile(`Seq Scan on notify_deliveries\S* \S+ +\(cost=\S+\.\.(\S+) `)

// seqScan reports whether plan reads a ledger partition sequentially; an
// empty partition (a month ahead, the default one), which the planner knows
// has no pages, does not count.
func seqScan(plan string) bool {
	for _, m := range seqScanRE.FindAllStringSubmatch(plan, -1) {
		if m[1] != "0.00" {
			return true
		}
	}
	return false
}

var execTimeRE = regexp.MustCompile(`Execution Time: (\S+ ms)`)

func planTime(plan string) string {
	if m := execTimeRE.FindStringSubmatch(plan); m != nil {
		return m[1]
	}
	return "?"
}
