package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/pgcluster"
	"github.com/notifyd/notifyd/stores"
)

// marksRecipientsPerConn is how many recipients each connection of the marks
// scenario marks items of; no two connections share a recipient.
const marksRecipientsPerConn = 4

// marksWarmup transactions per connection run before each timed run.
const marksWarmup = 20

// plainMarkSQL is the UPDATE of stores.MarkInbox for one item read (the
// statement behind POST /v1/inbox/read), without the change-log row.
const plainMarkSQL = `
WITH changed AS (
    UPDATE notify_inbox
    SET read_at = $3, seen_at = coalesce(seen_at, $3)
    WHERE recipient = $1 AND id = ANY($2::text[]::uuid[]) AND read_at IS NULL
    RETURNING id
)
SELECT coalesce(array_agg(id::text ORDER BY id), '{}') FROM changed`

// runMarks is the inbox-marks scenario: conc connections, each marking items
// of its own recipients read one transaction at a time (stores.MarkInbox,
// what POST /v1/inbox/read runs: the UPDATE and its change-log row), vs the
// same UPDATEs on notify_inbox with no change log. It runs on the bench's
// fast cluster and, with durable, again on a second private cluster with
// PostgreSQL's default, durable settings (fsync, synchronous_commit and
// full_page_writes on), where every commit waits for its WAL flush and a
// serialised commit path shows.
func runMarks(ctx context.Context, h *harness, n, conc int, durable bool) []Result {
	results := []Result{marksRow(ctx, h, n, conc, "fast")}
	if !durable || ctx.Err() != nil {
		return results
	}
	dh, err := startDurableHarness(ctx, h)
	if err != nil {
		return append(results, errorResult(marksName(conc, "durable"), "tx/s", ">=", 0.7, "ratio", err))
	}
	defer dh.close()
	fmt.Printf("  durable cluster: %s\n", dh.cluster.Settings())
	results = append(results, marksRow(ctx, dh, n, conc, "durable"))
	h.quietBudget, h.quietWaited = dh.quietBudget, dh.quietWaited
	return results
}

func marksName(conc int, label string) string {
	return fmt.Sprintf("inbox marks, %d conns (%s)", conc, label)
}

// marksRounds is how many times each variant is measured, alternating: the
// row reports the best run of each, the one least disturbed by other work on
// a shared machine (every run is printed).
const marksRounds = 3

// marksRow measures both variants on h's cluster.
func marksRow(ctx context.Context, h *harness, n, conc int, label string) Result {
	name, unit := marksName(conc, label), "tx/s"
	var base, m measurement
	for round := 1; round <= marksRounds; round++ {
		b, err := measureMarks(ctx, h, "plain", n, conc)
		if err != nil {
			return errorResult(name, unit, ">=", 0.7, "ratio", fmt.Errorf("baseline: %w", err))
		}
		fmt.Printf("  %s, round %d: UPDATE alone: %s tx/s (%s)\n", label, round, formatNumber(b.rate), b.note)
		l, err := measureMarks(ctx, h, "log", n, conc)
		if err != nil {
			return errorResult(name, unit, ">=", 0.7, "ratio", err)
		}
		fmt.Printf("  %s, round %d: MarkInbox (UPDATE + change log): %s tx/s (%s)\n", label, round, formatNumber(l.rate), l.note)
		if b.rate > base.rate {
			base = b
		}
		if l.rate > m.rate {
			m = l
		}
	}
	r := ratioResult(name, unit, m.rate, base.rate, "UPDATE, no log", "tx/s", ">=", 0.7)
	r = annotate(r, conc*((n+conc-1)/conc), m, &base)
	r.Notes = fmt.Sprintf("best of %d alternating runs each; ", marksRounds) + r.Notes
	return r
}

// startDurableHarness starts a second private cluster, under h's directory,
// with PostgreSQL's default settings, and builds its template. It inherits
// what is left of h's quiet budget.
func startDurableHarness(ctx context.Context, h *harness) (*harness, error) {
	dir := filepath.Join(h.dir, "durable")
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Logger: h.logger})
	if err != nil {
		return nil, err
	}
	dh := &harness{cluster: c, dir: dir, logger: h.logger, quietBudget: h.quietBudget, quietWaited: h.quietWaited}
	if dh.admin, err = pgxpool.New(ctx, c.URL("postgres")); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if err := dh.buildTemplate(ctx); err != nil {
		dh.close()
		return nil, err
	}
	return dh, nil
}

// measureMarks runs n marks (plus a warm-up) from conc connections in a
// fresh database and returns their rate. variant "log" runs
// stores.MarkInbox, "plain" the same UPDATE alone.
func measureMarks(ctx context.Context, h *harness, variant string, n, conc int) (measurement, error) {
	_, pool, closeDB, err := h.openDB(ctx, "marks_"+variant, int32(conc+2))
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	perConn := (n+conc-1)/conc + marksWarmup
	items, err := marksSetUp(ctx, pool, conc, perConn)
	if err != nil {
		return measurement{}, err
	}
	mark := func(ctx context.Context, tx pgx.Tx, recipient, id string) error {
		_, err := stores.MarkInbox(ctx, tx, stores.InboxMark{Recipient: recipient, Op: stores.InboxOpRead,
			IDs: []string{id}, At: time.Now()})
		return err
	}
	if variant == "plain" {
		mark = func(ctx context.Context, tx pgx.Tx, recipient, id string) error {
			var changed []string
			return tx.QueryRow(ctx, plainMarkSQL, recipient, []string{id}, time.Now().UTC()).Scan(&changed)
		}
	}
	if _, err := markTransactions(ctx, pool, items, 0, marksWarmup, mark); err != nil {
		return measurement{}, err
	}
	h.waitQuiet(ctx)
	cpu0 := h.cpu()
	elapsed, err := markTransactions(ctx, pool, items, marksWarmup, perConn, mark)
	if err != nil {
		return measurement{}, err
	}
	cpu := h.cpu().sub(cpu0)
	done := conc * (perConn - marksWarmup)
	return measurement{rate: float64(done) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d tx, %d conns, %.2fs, %s", done, conc, elapsed.Seconds(), cpu)}, nil
}

// markItem is one unread item and its recipient.
type markItem struct{ recipient, id string }

// marksSetUp gives each of conc connections marksRecipientsPerConn recipients
// with perConn unread items between them, and returns each connection's
// items in the order it marks them (its recipients in turn).
func marksSetUp(ctx context.Context, pool *pgxpool.Pool, conc, perConn int) ([][]markItem, error) {
	perRecipient := (perConn + marksRecipientsPerConn - 1) / marksRecipientsPerConn
	if _, err := pool.Exec(ctx, `
		INSERT INTO notify_inbox (id, recipient, notifier, key, category, reason, title, body, url, params, created_at)
		SELECT gen_random_uuid(), 'marks-' || r, $3, 'k-' || r || '-' || i, 'bench', 'subscribed',
		       $4, $5, $6, $7::jsonb, now() - make_interval(secs => i)
		FROM generate_series(1, $1) r, generate_series(1, $2) i`,
		conc*marksRecipientsPerConn, perRecipient, notifierInApp, benchTitle, benchBody, benchURL, benchJSON); err != nil {
		return nil, err
	}
	if err := analyze(ctx, pool); err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT recipient, id::text FROM notify_inbox ORDER BY created_at, recipient`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byRecipient := map[string][]string{}
	for rows.Next() {
		var r, id string
		if err := rows.Scan(&r, &id); err != nil {
			return nil, err
		}
		byRecipient[r] = append(byRecipient[r], id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	items := make([][]markItem, conc)
	for c := range conc {
		for i := range perConn {
			r := fmt.Sprintf("marks-%d", c*marksRecipientsPerConn+i%marksRecipientsPerConn+1)
			ids := byRecipient[r]
			if i/marksRecipientsPerConn >= len(ids) {
				return nil, fmt.Errorf("marks: recipient %s has %d items, want %d", r, len(ids), perRecipient)
			}
			items[c] = append(items[c], markItem{recipient: r, id: ids[i/marksRecipientsPerConn]})
		}
	}
	return items, nil
}

// markTransactions runs, on every connection at once, one transaction per
// item of items[c][from:to], and returns how long they took.
func markTransactions(ctx context.Context, pool *pgxpool.Pool, items [][]markItem, from, to int,
	mark func(ctx context.Context, tx pgx.Tx, recipient, id string) error) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make(chan error, len(items))
	start := time.Now()
	for _, mine := range items {
		wg.Go(func() {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			for _, it := range mine[from:to] {
				if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return mark(ctx, tx, it.recipient, it.id) }); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return elapsed, nil
}
