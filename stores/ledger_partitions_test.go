package stores_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// The inbox and the ledger are partitioned by UTC month of notification id
// (sql/migrations/00018_partition_inbox_ledger.sql).

// idAt is a UUIDv7 of instant at, told apart by n.
func idAt(at time.Time, n int) string {
	ms := at.UnixMilli()
	return fmt.Sprintf("%08x-%04x-7000-8000-%012x", ms>>16, ms&0xffff, n)
}

// utcMonth is the start of the UTC month m months from the current one.
func utcMonth(m int) time.Time {
	now := time.Now().UTC()
	return time.Date(now.Year(), now.Month()+time.Month(m), 1, 0, 0, 0, 0, time.UTC)
}

func monthPart(table string, m time.Time) string { return table + "_p" + m.Format("200601") }

var ledgerTables = []string{"notify_inbox", "notify_deliveries", "notify_delivery_attempts"}

// pastMonths replaces the (empty) legacy partitions of a test database with
// month partitions for the given past months, as a database migrated months
// ago has them (made as notify_ledger_extend makes them).
func pastMonths(t *testing.T, pool *pgxpool.Pool, months ...int) {
	t.Helper()
	for _, table := range ledgerTables {
		exec(t, pool, `DROP TABLE `+table+`_legacy`)
		for _, m := range months {
			exec(t, pool, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
				monthPart(table, utcMonth(m)), table, uuidv7.Floor(utcMonth(m)), uuidv7.Floor(utcMonth(m+1))))
			if table != "notify_delivery_attempts" {
				exec(t, pool, `ALTER TABLE `+monthPart(table, utcMonth(m))+` ADD PRIMARY KEY (id)`)
			}
		}
	}
}

func exists(t *testing.T, pool *pgxpool.Pool, table string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// ledgerChunk is a fan-out chunk of notification nid: an inbox item and a
// pending email delivery for each recipient, with fresh row ids (a replay
// makes new ones).
func ledgerChunk(nid string, recipients ...string) *stores.Chunk {
	c := &stores.Chunk{NotificationID: nid, Notifier: "part", Key: nid, Title: "t", Lane: -1}
	for _, r := range recipients {
		c.InboxIDs = append(c.InboxIDs, uuidv7.String())
		c.InboxRecipients = append(c.InboxRecipients, r)
		c.InboxReasons = append(c.InboxReasons, "direct")
		c.DeliveryIDs = append(c.DeliveryIDs, uuidv7.String())
		c.DeliveryRecipients = append(c.DeliveryRecipients, r)
		c.DeliveryChannels = append(c.DeliveryChannels, "email")
		c.DeliveryReasons = append(c.DeliveryReasons, "direct")
		c.DeliveryModes = append(c.DeliveryModes, "immediate")
		c.DeliveryStatuses = append(c.DeliveryStatuses, "pending")
		c.DeliveryErrors = append(c.DeliveryErrors, "")
	}
	return c
}

// A notification's rows go to the partition of its id, whenever they are
// written: replays of its chunks meet the rows written before in the same
// partition, on either side of a month boundary, and write nothing twice.
func TestLedgerFanoutReplayAcrossMonthsIsExactlyOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	boundary := utcMonth(1)
	for _, c := range []struct {
		nid   string
		month time.Time
	}{
		{idAt(boundary.Add(-time.Millisecond), 1), utcMonth(0)}, // the last millisecond of this month
		{idAt(boundary, 2), utcMonth(1)},                        // the first of the next
	} {
		exec(t, pool, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1::uuid, 'part', $1::text, 'pending', true)`, c.nid)
		first, err := stores.WriteChunk(ctx, pool, ledgerChunk(c.nid, "u1", "u2", "u3"), true)
		if err != nil || len(first.InboxIDs) != 3 || len(first.PendingIDs) != 3 {
			t.Fatalf("first write of %s: %+v, %v", c.nid, first, err)
		}
		// The replay: the same chunk with new row ids, guarded, then unguarded.
		again, err := stores.WriteChunk(ctx, pool, ledgerChunk(c.nid, "u1", "u2", "u3", "u4"), true)
		if err != nil || len(again.InboxIDs) != 1 || again.InboxRecipients[0] != "u4" || len(again.PendingIDs) != 1 {
			t.Fatalf("guarded replay of %s: %+v, %v; want only u4's rows new", c.nid, again, err)
		}
		if _, err := stores.WriteChunk(ctx, pool, ledgerChunk(c.nid, "u1"), false); !errors.Is(err, stores.ErrChunkConflict) {
			t.Fatalf("unguarded replay of %s: %v, want ErrChunkConflict", c.nid, err)
		}
		for _, table := range []string{"notify_inbox", "notify_deliveries"} {
			if n := countRows(t, pool, `SELECT count(*) FROM `+monthPart(table, c.month)+` WHERE notification_id = $1`, c.nid); n != 4 {
				t.Errorf("%s: %d rows of %s, want 4 (one per recipient)", monthPart(table, c.month), n, c.nid)
			}
		}
	}
	for _, table := range []string{"notify_inbox_default", "notify_deliveries_default"} {
		if n := countRows(t, pool, `SELECT count(*) FROM `+table); n != 0 {
			t.Errorf("%s holds %d rows, want 0", table, n)
		}
	}
}

// Retention drops a month whose newest row is past the retention, with its
// deliveries' attempts, and trims the rest row by row: a month with a late
// row, the default partition, unsettled deliveries stay as they must.
func TestLedgerRetentionDropsWholeMonths(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	pastMonths(t, pool, -4, -3)
	now := time.Now()
	old := now.AddDate(0, 0, -120)
	m4, m3 := utcMonth(-4).Add(time.Hour), utcMonth(-3).Add(time.Hour)
	future := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	item := func(nid string, n int, at time.Time) {
		t.Helper()
		exec(t, pool, `INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, created_at)
			SELECT gen_random_uuid(), $1::uuid, 'r' || $2::int || '-' || g, 'part', $1::text, $3 FROM generate_series(1, $2) g`, nid, n, at)
	}
	item(idAt(m4, 1), 20, old)    // a month past retention: dropped
	item(idAt(m3, 2), 10, old)    // old rows of a month ...
	item(idAt(m3, 3), 1, now)     // ... with a late one (send_at): trimmed
	item(idAt(future, 4), 2, old) // the default partition: trimmed
	item(idAt(future, 5), 1, now) // kept
	item(uuidv7.String(), 1, now) // this month: kept
	delivery := func(nid, status string, n int, at time.Time, attempts bool) {
		t.Helper()
		exec(t, pool, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, created_at)
			SELECT ('`+idAt(at, 0)[:24]+`' || lpad(to_hex(g + $5::int * 1000), 12, '0'))::uuid, $1::uuid, 'part', $1::text, 'r' || g, 'email', 'immediate', $2, $4
			FROM generate_series(1, $3) g`, nid, status, n, at, len(status))
		if attempts {
			exec(t, pool, `INSERT INTO notify_delivery_attempts (delivery_id, notification_id, attempt, at, error)
				SELECT id, notification_id, 1, now(), 'refused' FROM notify_deliveries WHERE notification_id = $1`, nid)
		}
	}
	delivery(idAt(m4, 11), "sent", 5, old, true)     // dropped with its attempts
	delivery(idAt(m3, 12), "sent", 3, old, true)     // trimmed with their attempts
	delivery(idAt(m3, 13), "failed", 1, old, true)   // unsettled: keeps its month and its attempts
	delivery(uuidv7.String(), "sent", 1, now, false) // this month: kept

	inbox, deliveries, err := stores.DropLedgerMonths(ctx, pool, now.AddDate(0, 0, -90), now.AddDate(0, 0, -30))
	if err != nil || inbox != 1 || deliveries != 1 {
		t.Fatalf("DropLedgerMonths: %d inbox and %d ledger partitions, %v; want 1 and 1", inbox, deliveries, err)
	}
	for _, table := range ledgerTables {
		if exists(t, pool, monthPart(table, utcMonth(-4))) {
			t.Errorf("%s is still there", monthPart(table, utcMonth(-4)))
		}
		if !exists(t, pool, monthPart(table, utcMonth(-3))) {
			t.Errorf("%s was dropped: it holds a recent or unsettled row", monthPart(table, utcMonth(-3)))
		}
	}
	total := stores.RetentionResult{}
	for {
		r, err := stores.DeleteExpired(ctx, pool, stores.RetentionCutoffs{Inbox: now.AddDate(0, 0, -90),
			Deliveries: now.AddDate(0, 0, -30), Changes: now.AddDate(0, 0, -7)}, 4)
		if err != nil {
			t.Fatal(err)
		}
		total.Inbox += r.Inbox
		total.Deliveries += r.Deliveries
		if r.Inbox == 0 && r.Deliveries == 0 {
			break
		}
	}
	if total.Inbox != 12 || total.Deliveries != 3 {
		t.Fatalf("batched deletes: %+v, want the 12 old items and the 3 old settled deliveries left outside dropped months", total)
	}
	for _, c := range []struct {
		sql  string
		want int
	}{
		{`SELECT count(*) FROM ` + monthPart("notify_inbox", utcMonth(-3)), 1},
		{`SELECT count(*) FROM notify_inbox_default`, 1},
		{`SELECT count(*) FROM notify_inbox`, 3},
		{`SELECT count(*) FROM notify_deliveries WHERE status = 'failed'`, 1},
		{`SELECT count(*) FROM notify_deliveries`, 2},
		{`SELECT count(*) FROM notify_delivery_attempts`, 1}, // the failed delivery's
	} {
		if n := countRows(t, pool, c.sql); n != c.want {
			t.Errorf("%s = %d, want %d", c.sql, n, c.want)
		}
	}
	if inbox, deliveries, err := stores.DropLedgerMonths(ctx, pool, now.AddDate(0, 0, -90), now.AddDate(0, 0, -30)); err != nil || inbox+deliveries != 0 {
		t.Fatalf("DropLedgerMonths again: %d, %d, %v; want nothing", inbox, deliveries, err)
	}
	// The months ahead are there, and a second extend makes none.
	for m := 0; m <= stores.LedgerAhead; m++ {
		for _, table := range ledgerTables {
			if !exists(t, pool, monthPart(table, utcMonth(m))) {
				t.Errorf("%s was not made ahead", monthPart(table, utcMonth(m)))
			}
		}
	}
	if n, err := stores.ExtendLedger(ctx, pool); err != nil || n != 0 {
		t.Fatalf("ExtendLedger again: %d, %v; want 0", n, err)
	}
}

// Dropping a month costs the same however many rows it holds; deleting the
// same rows costs in proportion to them.
func TestLedgerRetentionStaysFlatAsTheTablesGrow(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	const small, large = 1_000, 50_000
	pastMonths(t, pool, -7, -6, -5)
	// A month of n inbox items and n delivery rows, written at at (a
	// delivery's id is made with the row: of at too).
	fill := func(m int, n int, at time.Time) {
		t.Helper()
		nid := idAt(utcMonth(m).Add(time.Hour), m+100)
		exec(t, pool, `INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, title, body, params, created_at)
			SELECT gen_random_uuid(), $1::uuid, 'r' || g, 'part', $1::text, 'A title of some length', 'A body of some more length than the title',
			       '{"post":"p","n":1}', $3 FROM generate_series(1, $2) g`, nid, n, at)
		exec(t, pool, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, created_at)
			SELECT ($4 || right(gen_random_uuid()::text, 12))::uuid, $1::uuid, 'part', $1::text, 'r' || g, 'email', 'immediate', 'sent', $3
			FROM generate_series(1, $2) g`, nid, n, at, idAt(at, 0)[:24])
	}
	now := time.Now()
	fill(-7, small, now.AddDate(0, 0, -300))
	fill(-6, large, now.AddDate(0, 0, -250))
	fill(-5, large, now.AddDate(0, 0, -200))
	exec(t, pool, `VACUUM ANALYZE notify_inbox, notify_deliveries`)

	// Each drop is measured as the statement DropLedgerMonths runs: the
	// first takes month -7 (inbox and ledger), the second month -6.
	const dropSQL = `SELECT * FROM notify_ledger_drop_before($1, $2)`
	measure := func(sql string, args ...any) (float64, time.Duration) {
		start := time.Now()
		wal := walOf(t, pool, sql, args...)
		return wal, time.Since(start)
	}
	walSmall, tSmall := measure(dropSQL, now.AddDate(0, 0, -275), now.AddDate(0, 0, -275))
	walLarge, tLarge := measure(dropSQL, now.AddDate(0, 0, -225), now.AddDate(0, 0, -225))
	for _, table := range ledgerTables {
		if exists(t, pool, monthPart(table, utcMonth(-6))) || !exists(t, pool, monthPart(table, utcMonth(-5))) {
			t.Fatalf("the drops did not take months -7 and -6 of %s only", table)
		}
	}
	// The same rows deleted as rows (the statements of DeleteExpired without
	// their batch bound).
	walInbox, tInbox := measure(`DELETE FROM notify_inbox WHERE created_at < $1`, now.AddDate(0, 0, -150))
	walLedger, tLedger := measure(`DELETE FROM notify_deliveries WHERE created_at < $1`, now.AddDate(0, 0, -150))
	walDelete, tDelete := walInbox+walLedger, tInbox+tLedger
	t.Logf("retention of a month of inbox items and delivery rows: drop %d+%d rows %.0f B of WAL in %s, %d+%d rows %.0f B in %s; "+
		"delete %d+%d rows %.0f B (inbox %.0f B, ledger %.0f B) in %s",
		small, small, walSmall, tSmall.Round(time.Millisecond), large, large, walLarge, tLarge.Round(time.Millisecond),
		large, large, walDelete, walInbox, walLedger, tDelete.Round(time.Millisecond))
	if walLarge > 2*walSmall+16<<10 {
		t.Errorf("dropping a month of %d rows wrote %.0f B of WAL, of %d rows %.0f B: not flat", large, walLarge, small, walSmall)
	}
	if walDelete < 10*walLarge {
		t.Errorf("deleting %d rows wrote %.0f B of WAL, dropping them %.0f B: the comparison shows nothing", large, walDelete, walLarge)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM notify_inbox`) + countRows(t, pool, `SELECT count(*) FROM notify_deliveries`); n != 0 {
		t.Fatalf("%d rows left", n)
	}
}

// The migration converts a database at 00017 with rows in it: every row stays
// readable through the stores, rows written after it go to the month
// partitions, and the way down puts everything back in plain tables.
func TestLedgerMigrationKeepsRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	if err := stores.MigrateTo(ctx, pool, 17); err != nil {
		t.Fatalf("down to 00017: %v", err)
	}
	pool.Reset() // statements prepared against the partitioned tables
	nid := uuidv7.String()
	ahead := idAt(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), 9) // a clock far ahead
	exec(t, pool, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES
		($1, 'part', 'k', 'fanned_out', true), ($2, 'part', 'ahead', 'fanned_out', true)`, nid, ahead)
	exec(t, pool, `INSERT INTO notify_inbox (id, recipient, notifier, key, title) VALUES
		($1, 'u1', 'part', 'k', 'one'), ($2, 'u2', 'part', 'k', 'two'),
		($3, 'u1', 'gone', 'k', 'orphan'), ($4, 'u1', 'gone', 'k2', 'orphan 2'), ($5, 'u3', 'part', 'ahead', 'ahead')`,
		uuidv7.String(), uuidv7.String(), uuidv7.String(), uuidv7.String(), uuidv7.String())
	failed := uuidv7.String()
	exec(t, pool, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, attempts) VALUES
		($1, $2, 'part', 'k', 'u1', 'email', 'immediate', 'refused', 2), ($3, $2, 'part', 'k', 'u2', 'email', 'immediate', 'sent', 1),
		($4, $5, 'part', 'ahead', 'u3', 'email', 'immediate', 'sent', 1)`, failed, nid, uuidv7.String(), uuidv7.String(), ahead)
	exec(t, pool, `INSERT INTO notify_delivery_attempts (delivery_id, attempt, at, error) VALUES ($1, 1, now(), 'a'), ($1, 2, now(), 'b')`, failed)

	// Up to 00018 and on to the latest: the stores read and write the
	// current schema (columns later migrations add among them).
	if err := stores.MigrateTo(ctx, pool, latestMigration(t)); err != nil {
		t.Fatalf("up from 00017: %v", err)
	}
	pool.Reset()
	page, err := stores.ListInbox(ctx, pool, "u1", stores.InboxAll, nil, 10)
	if err != nil || len(page.Items) != 3 {
		t.Fatalf("u1's inbox after the migration: %+v, %v; want 3 items", page, err)
	}
	d, err := stores.GetDelivery(ctx, pool, failed)
	if err != nil || len(d.FailedAttempts) != 2 {
		t.Fatalf("the failed delivery after the migration: %+v, %v; want its 2 attempts", d, err)
	}
	for _, c := range []struct {
		sql  string
		want int
	}{
		{`SELECT count(*) FROM notify_inbox_legacy`, 4},
		{`SELECT count(*) FROM notify_inbox_legacy WHERE notification_id = '` + nid + `'`, 2},
		{`SELECT count(DISTINCT notification_id) FROM notify_inbox_legacy WHERE notifier = 'gone'`, 2},
		{`SELECT count(*) FROM notify_inbox_default WHERE notification_id = '` + ahead + `'`, 1},
		{`SELECT count(*) FROM notify_deliveries_legacy`, 2},
		{`SELECT count(*) FROM notify_deliveries_default`, 1},
		{`SELECT count(*) FROM notify_delivery_attempts_legacy WHERE notification_id = '` + nid + `'`, 2},
	} {
		if n := countRows(t, pool, c.sql); n != c.want {
			t.Errorf("%s = %d, want %d", c.sql, n, c.want)
		}
	}
	// A replay of the old notification still meets its rows; a new one
	// writes the current month's partition.
	if r, err := stores.WriteChunk(ctx, pool, ledgerChunk(nid, "u1"), true); err != nil || len(r.InboxIDs) != 0 {
		t.Fatalf("replay of a migrated notification: %+v, %v; want nothing new", r, err)
	}
	fresh := uuidv7.String()
	exec(t, pool, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1::uuid, 'part', $1::text, 'pending', true)`, fresh)
	if _, err := stores.WriteChunk(ctx, pool, ledgerChunk(fresh, "u1"), true); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM `+monthPart("notify_inbox", utcMonth(0))+` WHERE notification_id = $1`, fresh); n != 1 {
		t.Fatalf("the new notification's item is not in this month's partition (%d)", n)
	}

	if err := stores.MigrateTo(ctx, pool, 17); err != nil {
		t.Fatalf("down to 00017 again: %v", err)
	}
	pool.Reset()
	if n := countRows(t, pool, `SELECT count(*) FROM notify_inbox`); n != 6 {
		t.Fatalf("%d inbox items after the way down, want 6", n)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM notify_delivery_attempts a JOIN notify_deliveries d ON d.id = a.delivery_id`); n != 2 {
		t.Fatalf("%d attempts after the way down, want 2", n)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'notify_inbox'::regclass`); n != 0 {
		t.Fatal("notify_inbox is still partitioned")
	}
	if err := stores.MigrateTo(ctx, pool, 18); err != nil {
		t.Fatalf("up to 00018 again: %v", err)
	}
	pool.Reset()
	// Once its newest row is past the retention, the legacy partition goes
	// whole (the ledger's with its attempts); the row of the clock far ahead
	// is in the default partition and stays.
	soon := time.Now().Add(time.Hour)
	if inbox, deliveries, err := stores.DropLedgerMonths(ctx, pool, soon, soon); err != nil || inbox != 1 || deliveries != 0 {
		t.Fatalf("dropping the legacy partitions: %d, %d, %v; want the inbox's only (the new notification's delivery is pending)", inbox, deliveries, err)
	}
	exec(t, pool, `UPDATE notify_deliveries SET status = 'sent' WHERE status = 'pending'`)
	if inbox, deliveries, err := stores.DropLedgerMonths(ctx, pool, soon, soon); err != nil || inbox != 0 || deliveries != 1 {
		t.Fatalf("dropping the ledger's legacy partition: %d, %d, %v; want it dropped", inbox, deliveries, err)
	}
	for _, table := range ledgerTables {
		if exists(t, pool, table+"_legacy") {
			t.Errorf("%s_legacy is still there", table)
		}
	}
	if n := countRows(t, pool, `SELECT count(*) FROM notify_inbox`) + countRows(t, pool, `SELECT count(*) FROM notify_deliveries`); n != 2 {
		t.Fatalf("%d rows left, want the 2 of the clock far ahead", n)
	}
}

// A notification's inbox items are found by notification_id, in the one
// partition it names, by the unique (notification_id, recipient) index: the
// console's delivery list and progress on their generic plans, and
// notify_cancel, which deletes the items of the cancelled notification only.
// (The inbox has no (notifier, key) index since migration 00021.)
func TestInboxItemsAreFoundByTheirNotification(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	pastMonths(t, pool, -2, -1)
	old, recent := idAt(utcMonth(-2).Add(time.Hour), 1), idAt(utcMonth(-1).Add(time.Hour), 2)
	for _, nid := range []string{old, recent} {
		exec(t, pool, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1::uuid, 'part', $1::text, 'fanned_out', true)`, nid)
		exec(t, pool, `INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key)
			SELECT gen_random_uuid(), $1::uuid, 'r' || g, 'part', $1::text FROM generate_series(1, 3) g`, nid)
	}
	// The month's other notifications, an item each.
	exec(t, pool, `INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key)
		SELECT gen_random_uuid(), ($1 || lpad(to_hex(g + 100), 12, '0'))::uuid, 'r1', 'part', 'other-' || g
		FROM generate_series(1, 2000) g`, old[:24])
	exec(t, pool, `ANALYZE notify_inbox`)

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	list, progress := stores.InboxByNotificationSQLs()
	for name, c := range map[string]struct{ sql, args string }{
		"list":     {list, fmt.Sprintf(`'%s', 100, 'inbox'`, old)},
		"progress": {progress, fmt.Sprintf(`'%s', 'inbox'`, old)},
	} {
		p := explainPrepared(t, conn, name, c.sql, c.args)
		want := monthPart("notify_inbox", utcMonth(-2)) + "_notification_id_recipient_key"
		if !strings.Contains(p, want) || strings.Contains(p, monthPart("notify_inbox", utcMonth(-1))) ||
			strings.Contains(p, "Seq Scan on notify_inbox") {
			t.Errorf("%s: the items should be read from %s through %s only:\n%s", name, monthPart("notify_inbox", utcMonth(-2)), want, p)
		}
	}

	n, err := stores.GetNotification(ctx, pool, old, 100, "inbox")
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Deliveries) != 3 {
		t.Fatalf("the delivery list shows %d items, want 3", len(n.Deliveries))
	}
	pr, err := stores.NotificationProgress(ctx, pool, old, "inbox")
	if err != nil {
		t.Fatal(err)
	}
	if pr.Audience != 3 || pr.ByStatus["inbox"]["sent"] != 3 {
		t.Fatalf("progress: audience %d, inbox %v; want 3 and 3 sent", pr.Audience, pr.ByStatus["inbox"])
	}
	withdrawn, err := stores.CancelNotification(ctx, pool, "", "part", old)
	if err != nil {
		t.Fatal(err)
	}
	if withdrawn != 3 {
		t.Fatalf("the cancel withdrew %d, want its 3 items", withdrawn)
	}
	if left := countRows(t, pool, `SELECT count(*) FROM notify_inbox WHERE notification_id = '`+old+`'`); left != 0 {
		t.Fatalf("%d items of the cancelled notification left", left)
	}
	if kept := countRows(t, pool, `SELECT count(*) FROM notify_inbox WHERE notification_id = '`+recent+`'`); kept != 3 {
		t.Fatalf("%d items of the other notification kept, want 3", kept)
	}
}
