package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/server"
)

// appRows is the size of the application table the enqueue transactions
// update; consecutive transactions update consecutive rows, so concurrent
// ones do not wait on each other's row locks.
const appRows = 1000

// enqueueWarmup transactions run before each timed run and are not counted.
const enqueueWarmup = 200

// enqueueRounds is how many times each variant is measured, alternating
// (the baseline, SendTx, notify_send, then again): each row reports the best
// run of its variant and the best of the baseline, the ones least disturbed
// by other work on a shared machine (every run is printed). Measured once
// each in sequence, a machine that sped up or slowed down over the half
// minute moved the ratios by a tenth either way.
const enqueueRounds = 2

// runEnqueue is scenario 3: application transactions/s, each an UPDATE of an
// application row plus an enqueue, vs the same UPDATE plus a bare River
// InsertTx of a trivial job, from conc goroutines, n transactions each run.
// The enqueue is notifyd's SendTx (target 0.9x the baseline), then the SQL
// function notify_send as another language would call it (target 0.8x). No
// workers run: this is the cost of enqueueing.
func runEnqueue(ctx context.Context, h *harness, n, conc int) []Result {
	type variant struct {
		variant, name, label string
		target               float64
	}
	variants := []variant{
		{"river", "", "River InsertTx", 0},
		{"sendtx", "enqueue: UPDATE+SendTx vs UPDATE+InsertTx", "SendTx", 0.9},
		{"notify_send", "enqueue: UPDATE+notify_send vs UPDATE+InsertTx", "notify_send", 0.8},
	}
	best := map[string]measurement{}
	errs := map[string]error{}
	for round := 1; round <= enqueueRounds; round++ {
		for _, v := range variants {
			if errs[v.variant] != nil {
				continue
			}
			m, err := measureEnqueue(ctx, h, v.variant, n, conc)
			if err != nil {
				errs[v.variant] = err
				continue
			}
			fmt.Printf("  round %d: UPDATE + %s: %s tx/s (%s)\n", round, v.label, formatNumber(m.rate), m.note)
			if m.rate > best[v.variant].rate {
				best[v.variant] = m
			}
		}
	}
	base, baseErr := best["river"], errs["river"]
	var results []Result
	for _, v := range variants[1:] {
		const unit = "tx/s"
		switch {
		case errs[v.variant] != nil:
			results = append(results, errorResult(v.name, unit, ">=", v.target, "ratio", errs[v.variant]))
		case baseErr != nil:
			results = append(results, errorResult(v.name, unit, ">=", v.target, "ratio", fmt.Errorf("baseline: %w", baseErr)))
		default:
			m := best[v.variant]
			r := ratioResult(v.name, unit, m.rate, base.rate, "River InsertTx", "tx/s", ">=", v.target)
			r = annotate(r, n, m, &base)
			r.Notes = fmt.Sprintf("best of %d alternating runs each; ", enqueueRounds) + r.Notes
			results = append(results, r)
		}
	}
	return results
}

func measureEnqueue(ctx context.Context, h *harness, variant string, n, conc int) (measurement, error) {
	db, pool, closeDB, err := h.openDB(ctx, "enqueue_"+variant, int32(conc+2))
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_app (id int PRIMARY KEY, counter bigint NOT NULL DEFAULT 0)`); err != nil {
		return measurement{}, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO bench_app (id) SELECT g FROM generate_series(1, $1) g`, appRows); err != nil {
		return measurement{}, err
	}
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return measurement{}, err
	}
	var enqueue func(ctx context.Context, tx pgx.Tx, i int) error
	switch variant {
	case "sendtx":
		// With the config, SendTx validates the notifier and the params
		// schema, as an application's client would.
		client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
		enqueue = func(ctx context.Context, tx pgx.Tx, i int) error {
			_, err := client.SendTx(ctx, tx, notifyd.Notification{Notifier: notifierInApp, Key: fmt.Sprintf("enqueue-%d", i),
				Recipients: []notifyd.Recipient{{ID: recipientID(i%appRows + 1)}}, Params: benchParams})
			return err
		}
	case "notify_send":
		// The one statement an application in another language runs, with
		// the recipients and params encoded as JSON per call as it would.
		if err := server.PublishCatalog(ctx, pool, cfg, nil); err != nil {
			return measurement{}, err
		}
		enqueue = func(ctx context.Context, tx pgx.Tx, i int) error {
			recipients, err := json.Marshal([]string{recipientID(i%appRows + 1)})
			if err != nil {
				return err
			}
			params, err := json.Marshal(benchParams)
			if err != nil {
				return err
			}
			var id string
			var duplicate bool
			return tx.QueryRow(ctx, `SELECT id::text, duplicate FROM notify_send($1, $2, $3::jsonb, $4::jsonb)`,
				notifierInApp, fmt.Sprintf("enqueue-%d", i), recipients, params).Scan(&id, &duplicate)
		}
	case "river":
		// An insert-only client: the application side of River.
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
		if err != nil {
			return measurement{}, err
		}
		enqueue = func(ctx context.Context, tx pgx.Tx, i int) error {
			_, err := client.InsertTx(ctx, tx, noopArgs{Seq: i}, nil)
			return err
		}
	default:
		return measurement{}, fmt.Errorf("unknown enqueue variant %q", variant)
	}
	if _, err := appTransactions(ctx, pool, enqueue, 0, enqueueWarmup, conc); err != nil {
		return measurement{}, err
	}
	h.waitQuiet(ctx)
	cpu0 := h.cpu()
	elapsed, err := appTransactions(ctx, pool, enqueue, enqueueWarmup, n, conc)
	if err != nil {
		return measurement{}, err
	}
	cpu := h.cpu().sub(cpu0)
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d tx, %d goroutines, %.2fs, %s", n, conc, elapsed.Seconds(), cpu)}, nil
}

// appTransactions runs n transactions numbered from first, from conc
// goroutines, and returns how long they took.
func appTransactions(ctx context.Context, pool *pgxpool.Pool, enqueue func(context.Context, pgx.Tx, int) error, first, n, conc int) (time.Duration, error) {
	var next atomic.Int64
	next.Store(int64(first))
	end := int64(first + n)
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= end {
					return
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `UPDATE bench_app SET counter = counter + 1 WHERE id = $1`, i%appRows+1); err != nil {
						return err
					}
					return enqueue(ctx, tx, int(i))
				})
				if err != nil {
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
