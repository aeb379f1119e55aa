package stores_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// The send claim and the settles must reach their rows through the primary
// key (deliveries) or the digest-in-flight index (digests), whatever the
// statistics say. The
// state that once misled the planner: notify_deliveries analyzed while
// nothing was in flight, then thousands of rows in flight (an email burst).
// With a plain `status = 'sending'` the generic plan read every row in
// flight through notify_deliveries_retry_idx for a settle of a few.
func TestSettlePlansIgnoreStaleStatistics(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	const nid = "01900000-0000-7000-8000-00000000d001"
	exec(t, pool, `INSERT INTO notify_notifications (id, notifier, key, status, normalized) VALUES ($1, 'n', 'k', 'fanned_out', true)`, nid)
	exec(t, pool, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, digest_id)
		SELECT ('01900000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, $1, 'n', 'k', 'u' || i,
		       CASE WHEN i % 2 = 0 THEN 'email' ELSE 'webhook' END, CASE WHEN i % 3 = 0 THEN 'digest' ELSE 'immediate' END,
		       CASE WHEN i % 3 = 0 THEN 'digest_sent' ELSE 'sent' END,
		       CASE WHEN i % 3 = 0 THEN gen_random_uuid() END
		FROM generate_series(1, 6000) i`, nid)
	exec(t, pool, `ANALYZE notify_deliveries`)
	exec(t, pool, `UPDATE notify_deliveries SET claimed_at = now(),
		status = CASE WHEN mode = 'digest' THEN 'digest_sending' ELSE 'sending' END`)

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	deliveries, deliveriesRetry, digests := stores.SettleSQLs()
	attempts, attemptsRetry := stores.SettleAttemptsSQLs()
	// A generic plan, as a prepared statement gets after its fifth run.
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	ids := `'{01900000-0000-7000-8000-000000000001,01900000-0000-7000-8000-000000000002}'`
	times := `'{2026-01-01T00:00:00Z,2026-01-01T00:00:00Z}'`
	for _, c := range []struct {
		name, sql, args, want string
	}{
		// The claim and the settles run on their generic plans always
		// (stores.genericBatch).
		{"claimSQL", stores.ClaimSQL(),
			fmt.Sprintf(`%s, '{sent,cancelled}', now(), '{email}', '{email}', 'client'`, ids),
			"notify_deliveries_legacy_pkey"},
		{"settleSQL", deliveries,
			fmt.Sprintf(`%s, %s, '{sent,sent}', '{"",""}', '{NULL,NULL}', '{f,f}', now(), '{t,t}', '{"",""}', '{f,f}', '{"",""}'`, ids, times),
			"notify_deliveries_legacy_pkey"},
		{"settleAttemptsSQL", attempts,
			fmt.Sprintf(`%s, %s, '{refused,sent}', '{"550",""}', '{NULL,NULL}', '{f,f}', now(), '{t,t}', '{"a","b"}', '{t,f}', '{"",""}'`, ids, times),
			"notify_deliveries_legacy_pkey"},
		{"settleRetryAttemptsSQL", attemptsRetry,
			fmt.Sprintf(`%s, %s, '{failed,sent}', '{"451",""}', '{2026-01-01T00:00:00Z,NULL}', '{f,f}', now(), '{f,t}', '{"a","b"}', '{t,f}', '{"",""}'`, ids, times),
			"notify_deliveries_legacy_pkey"},
		{"settleRetrySQL", deliveriesRetry,
			fmt.Sprintf(`%s, %s, '{failed,sent}', '{"451",""}', '{2026-01-01T00:00:00Z,NULL}', '{f,f}', now(), '{f,t}', '{"",""}', '{f,f}', '{"",""}'`, ids, times),
			"notify_deliveries_legacy_pkey"},
		{"settleDigestsSQL", digests,
			fmt.Sprintf(`%s, %s, '{digest_sent,digest_sent}', '{"",""}', now(), '{"",""}', '{f,f}'`, ids, times),
			"notify_deliveries_legacy_digest_flight_idx"},
	} {
		p := explainPrepared(t, conn, c.name, c.sql, c.args)
		// The ledger is partitioned (00018_partition_inbox_ledger.sql): the
		// rows are in the legacy partition (their notification's id is of
		// 2024); the empty month partitions are read as they please.
		if !strings.Contains(p, c.want) || strings.Contains(p, "_retry_idx") || strings.Contains(p, "Seq Scan on notify_deliveries_legacy") {
			t.Errorf("%s: the generic plan should reach the rows through %s only:\n%s", c.name, c.want, p)
		}
	}
}

// The claim and the settle ask for their generic plans for themselves only:
// inside an application's or a job's transaction, the statements after them
// get the session's plan_cache_mode back.
func TestGenericPlansEndWithTheirStatement(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	setting := func() string {
		t.Helper()
		var s string
		if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := setting()
	id := "01900000-0000-7000-8000-0000000000aa"
	if _, err := stores.ClaimDeliveries(ctx, tx, []string{id}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := setting(); got != before {
		t.Fatalf("after the claim plan_cache_mode is %q, want %q", got, before)
	}
	if _, err := stores.SettleDeliveries(ctx, tx, []stores.Settlement{{ID: id, ClaimedAt: time.Now(), Status: "sent", Terminal: true}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := setting(); got != before {
		t.Fatalf("after the settle plan_cache_mode is %q, want %q", got, before)
	}
}

// Outside a transaction the claim and the settle run as a pipelined batch in
// PostgreSQL's implicit transaction: the generic plan applies to the
// statement after the setting, lasts no longer than the batch, and draws no
// WARNING (SET LOCAL there drew one per call, to the client and the server
// log). The claim and a settle on the same connection draw no notice either.
func TestGenericPlansOutsideATransaction(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	cfg := pool.Config().ConnConfig.Copy()
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Severity+": "+n.Message) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	setting := func() string {
		t.Helper()
		var s string
		if err := conn.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := setting()
	got, err := stores.GenericBatch(ctx, conn, `SELECT current_setting('plan_cache_mode')`)
	if err != nil {
		t.Fatal(err)
	}
	if got != "force_generic_plan" {
		t.Errorf("inside the batch plan_cache_mode is %q, want force_generic_plan", got)
	}
	if after := setting(); after != before {
		t.Errorf("after the batch plan_cache_mode is %q, want %q", after, before)
	}
	id := "01900000-0000-7000-8000-0000000000ab"
	if _, err := stores.ClaimDeliveries(ctx, conn, []string{id}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.SettleDeliveries(ctx, conn, []stores.Settlement{{ID: id, ClaimedAt: time.Now(), Status: "sent", Terminal: true}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if len(notices) > 0 {
		t.Errorf("the batches drew notices: %q", notices)
	}
}

// explainPrepared prepares sql on conn, explains its execution with args (a
// comma-separated SQL list) under conn's plan_cache_mode, and returns the plan.
func explainPrepared(t *testing.T, conn *pgxpool.Conn, name, sql, args string) string {
	t.Helper()
	ctx := t.Context()
	if _, err := conn.Exec(ctx, `PREPARE plan_test AS `+sql); err != nil {
		t.Fatalf("%s: prepare: %v", name, err)
	}
	defer func() {
		if _, err := conn.Exec(ctx, `DEALLOCATE plan_test`); err != nil {
			t.Fatal(err)
		}
	}()
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE plan_test(`+args+`)`)
	if err != nil {
		t.Fatalf("%s: explain: %v", name, err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: explain: %v", name, err)
	}
	return plan.String()
}

// The claim's generic plan is made on every pooled connection, and again
// after each ANALYZE of a table it reads; planning the partitioned ledger
// costs per reference (every partition, every index). The claim names the
// ledger twice: one read of its rows and the UPDATE.
func TestClaimPlansTheLedgerTwice(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	p := explainPrepared(t, conn, "claimSQL", stores.ClaimSQL(),
		`'{01900000-0000-7000-8000-000000000001}', '{sent,cancelled}', now(), '{email}', '{email}', 'client'`)
	// Each reference scans the legacy partition once (an Update also lists
	// it as its result relation: not a scan).
	scans := 0
	for _, line := range strings.Split(p, "\n") {
		if strings.Contains(line, " on notify_deliveries_legacy ") && !strings.Contains(line, "Update on") {
			scans++
		}
	}
	if scans > 2 {
		t.Errorf("the claim's plan reads the ledger %d times, want 2:\n%s", scans, p)
	}
}
