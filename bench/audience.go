package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/server"
)

// notifierAudience is in_app only, its recipients the watchers of the item in
// its params: the audience query audienceQuery.
const notifierAudience = "bench.audience"

// audienceQuery is the bench audience: the application's own table of
// watchers, one row per (item, user).
const audienceQuery = `SELECT user_id AS id, 'watching' AS reason FROM watchers WHERE item = $1`

// audienceYAML is the audience key of notifierAudience.
const audienceYAML = "    audience:\n      query: \"" + audienceQuery + "\"\n      args: [item]\n"

// insertWatchers creates the application's watchers table and makes
// recipients 1..n watchers of the bench item (and as many of another item,
// which the query must not read).
func insertWatchers(ctx context.Context, pool *pgxpool.Pool, n int) error {
	_, err := pool.Exec(ctx, `
CREATE TABLE watchers (item text NOT NULL, user_id text NOT NULL, since timestamptz NOT NULL DEFAULT now(),
                       PRIMARY KEY (item, user_id));
INSERT INTO watchers (item, user_id)
SELECT it, `+recipientSQL+` FROM generate_series(1, `+fmt.Sprint(n)+`) g, unnest(ARRAY['post-9', 'post-8']) it`)
	if err != nil {
		return fmt.Errorf("insert %d watchers: %w", n, err)
	}
	return nil
}

// rawAudienceSQL is the audience scenario's baseline: the inbox rows the
// fan-out writes (same columns and values as rawInsertSQL), read from the
// same query, in one INSERT … SELECT.
const rawAudienceSQL = `
INSERT INTO bench_inbox (id, notification_id, recipient, notifier, key, category, reason, actor, title, body, url, params)
SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || '7000' || '8'
        || lpad(to_hex(row_number() OVER ()), 15, '0'))::uuid, '0190b8a4-0000-7000-8000-00000000fa12',
       q.id, 'bench.audience', 'fanout-raw', 'bench', q.reason, NULL, $2, $3, $4, $5::jsonb
FROM (` + audienceQuery + `) q`

// runAudience is the audience scenario: an in_app fan-out whose n
// recipients an audience query reads from the application's table, against
// the raw INSERT … SELECT of the same inbox rows from the same query.
func runAudience(ctx context.Context, h *harness, n int) []Result {
	const name, unit = "fanout.audience vs raw", "recip/s"
	raw, err := measureRawAudience(ctx, h, n)
	if err != nil {
		return []Result{errorResult(name, unit, ">=", 0.8, "ratio", fmt.Errorf("baseline: %w", err))}
	}
	fmt.Printf("  raw INSERT … SELECT from the query: %s rows/s (%s)\n", formatNumber(raw.rate), raw.note)
	m, err := measureAudienceFanout(ctx, h, n)
	if err != nil {
		return []Result{errorResult(name, unit, ">=", 0.8, "ratio", err)}
	}
	fmt.Printf("  fanout.audience: %s recipients/s (%s)\n", formatNumber(m.rate), m.note)
	r := ratioResult(name, unit, m.rate, raw.rate, "raw INSERT…SELECT from the query", "rows/s", ">=", 0.8)
	return []Result{annotate(r, n, m, &raw)}
}

func measureRawAudience(ctx context.Context, h *harness, n int) (measurement, error) {
	_, pool, closeDB, err := h.openDB(ctx, "raw_audience", 2)
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	if err := insertWatchers(ctx, pool, n); err != nil {
		return measurement{}, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_inbox (LIKE notify_inbox INCLUDING ALL, PRIMARY KEY (id))`); err != nil {
		return measurement{}, err
	}
	if err := analyze(ctx, pool); err != nil {
		return measurement{}, err
	}
	best := time.Duration(0)
	var bestCPU cpuTimes
	var bestWAL int64
	for run := 0; run < 2; run++ {
		if _, err := pool.Exec(ctx, `TRUNCATE bench_inbox`); err != nil {
			return measurement{}, err
		}
		h.waitQuiet(ctx)
		cpu0 := h.cpu()
		wal0 := walPosition(ctx, pool)
		start := time.Now()
		tag, err := pool.Exec(ctx, rawAudienceSQL, "post-9", benchTitle, benchBody, benchURL, benchJSON)
		elapsed := time.Since(start)
		wal := walPosition(ctx, pool) - wal0
		if err != nil {
			return measurement{}, fmt.Errorf("raw insert from the audience query: %w", err)
		}
		if int(tag.RowsAffected()) != n {
			return measurement{}, fmt.Errorf("raw insert wrote %d rows, want %d", tag.RowsAffected(), n)
		}
		if best == 0 || elapsed < best {
			best, bestCPU, bestWAL = elapsed, h.cpu().sub(cpu0), wal
		}
	}
	return measurement{rate: float64(n) / best.Seconds(), seconds: best.Seconds(), cpu: bestCPU, wal: bestWAL,
		note: fmt.Sprintf("%d rows in %.2fs, one statement, best of 2, %s, WAL %.0f B/row", n, best.Seconds(), bestCPU,
			float64(bestWAL)/float64(n))}, nil
}

// measureAudienceFanout times the in_app fan-out of one notification of
// notifierAudience (no inline recipients, no topics) by the real daemon,
// from the COMMIT of SendTx to fanned_out, best of 2.
func measureAudienceFanout(ctx context.Context, h *harness, n int) (measurement, error) {
	db, pool, closeDB, err := h.openDB(ctx, "fanout_audience", 4)
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	if err := insertRecipients(ctx, pool, n); err != nil {
		return measurement{}, err
	}
	if err := insertWatchers(ctx, pool, n); err != nil {
		return measurement{}, err
	}
	if err := analyze(ctx, pool); err != nil {
		return measurement{}, err
	}
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return measurement{}, err
	}
	d, err := startDaemon(ctx, cfg, server.Options{NoHTTP: true}, h.logger)
	if err != nil {
		return measurement{}, err
	}
	defer d.stop()
	time.Sleep(300 * time.Millisecond) // let River elect a leader and run its start-up sweeps
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	var best measurement
	for run := 0; run < 2; run++ {
		if _, err := pool.Exec(ctx, `TRUNCATE notify_inbox, notify_inbox_changes`); err != nil {
			return measurement{}, err
		}
		nf := notifyd.Notification{Notifier: notifierAudience, Key: fmt.Sprintf("fanout-audience-%d", run), Params: benchParams}
		m, err := fanoutOnce(ctx, h, pool, client, nf, n, run == 0, "fanout.audience", db.Name)
		if err != nil {
			return measurement{}, err
		}
		if best.rate == 0 || m.rate > best.rate {
			best = m
		}
	}
	best.note = fmt.Sprintf("audience query over %d watchers of the item (of %d rows), %.2fs, best of 2, %s, WAL %.0f B/recipient",
		n, 2*n, best.seconds, best.cpu, float64(best.wal)/float64(n))
	return best, nil
}
