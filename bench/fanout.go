package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// benchTopic is the topic of the topic fan-out.
const benchTopic = "bench-topic"

// fanoutTimeout bounds one fan-out measurement.
const fanoutTimeout = 10 * time.Minute

// runFanout is scenario 1: in_app fan-out to n recipients, inline and via a
// topic, against (a) the raw INSERT … SELECT of the same rows and (b) the
// naive one-job-per-recipient design.
func runFanout(ctx context.Context, h *harness, n, naiveN int) []Result {
	const unit = "recip/s"
	var out []Result
	raw, rawErr := measureRawInsert(ctx, h, n)
	if rawErr == nil {
		fmt.Printf("  raw INSERT … SELECT: %s rows/s (%s)\n", formatNumber(raw.rate), raw.note)
	}
	naive, naiveErr := measureNaive(ctx, h, naiveN)
	if naiveErr == nil {
		fmt.Printf("  naive job per recipient: %s rows/s (%s)\n", formatNumber(naive.rate), naive.note)
	}
	var inline measurement
	var inlineErr error
	for _, mode := range []string{"inline", "topic"} {
		name := "fanout." + mode
		m, err := measureFanout(ctx, h, mode, n)
		if err == nil {
			fmt.Printf("  %s: %s recipients/s (%s)\n", name, formatNumber(m.rate), m.note)
		}
		if mode == "inline" {
			inline, inlineErr = m, err
		}
		for _, base := range []struct {
			row, label string
			m          measurement
			err        error
			target     float64
		}{
			{name + " vs raw", "raw INSERT…SELECT", raw, rawErr, 0.8},
			{name + " vs naive", "naive job/recipient", naive, naiveErr, 10},
		} {
			switch {
			case err != nil:
				out = append(out, errorResult(base.row, unit, ">=", base.target, "ratio", err))
			case base.err != nil:
				out = append(out, errorResult(base.row, unit, ">=", base.target, "ratio", fmt.Errorf("baseline: %w", base.err)))
			default:
				r := ratioResult(base.row, unit, m.rate, base.m.rate, base.label, "rows/s", ">=", base.target)
				out = append(out, annotate(r, n, m, &base.m))
			}
		}
	}
	// The same inline fan-out for a tenant with default rules, every
	// recipient with a rule scoped to it: the two preference layers read in
	// the candidates statement, against the fan-out without a tenant.
	const tenantRow = "fanout.tenant vs inline"
	m, err := measureFanout(ctx, h, "tenant", n)
	switch {
	case err != nil:
		out = append(out, errorResult(tenantRow, unit, ">=", 0.8, "ratio", err))
	case inlineErr != nil:
		out = append(out, errorResult(tenantRow, unit, ">=", 0.8, "ratio", fmt.Errorf("baseline: %w", inlineErr)))
	default:
		fmt.Printf("  fanout.tenant: %s recipients/s (%s)\n", formatNumber(m.rate), m.note)
		r := ratioResult(tenantRow, unit, m.rate, inline.rate, "fan-out without a tenant", "recip/s", ">=", 0.8)
		out = append(out, annotate(r, n, m, &inline))
	}
	return out
}

// measureFanout times one in_app fan-out to n recipients by the real daemon,
// from the COMMIT of SendTx to the notification's status fanned_out.
func measureFanout(ctx context.Context, h *harness, mode string, n int) (measurement, error) {
	db, pool, closeDB, err := h.openDB(ctx, "fanout_"+mode, 4)
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	// Profiles exist in a real deployment: the candidates query joins them.
	if err := insertRecipients(ctx, pool, n); err != nil {
		return measurement{}, err
	}
	note := fmt.Sprintf("%d inline recipients", n)
	nf := notifyd.Notification{Notifier: notifierInApp, Key: "fanout-" + mode, Params: benchParams}
	switch mode {
	case "topic":
		if err := insertSubscribers(ctx, pool, benchTopic, n); err != nil {
			return measurement{}, err
		}
		nf.Topics = []string{benchTopic}
		note = fmt.Sprintf("topic with %d subscribers", n)
	case "tenant":
		if _, err := pool.Exec(ctx, `
WITH t AS (
    INSERT INTO notify_tenants (id, name, preferences)
    VALUES ('bench-tenant', 'Bench', '[{"scope": "*", "channel": "in_app", "mode": "immediate"}]')
)
INSERT INTO notify_tenant_preferences (recipient, tenant, scope, channel, mode)
SELECT `+recipientSQL+`, 'bench-tenant', '*', '*', 'immediate' FROM generate_series(1, $1) g`, n); err != nil {
			return measurement{}, fmt.Errorf("tenant and %d scoped rules: %w", n, err)
		}
		nf.Recipients, nf.Tenant = inlineRecipients(n), "bench-tenant"
		note = fmt.Sprintf("%d inline recipients of a tenant with default rules, each with a rule scoped to it", n)
	default:
		nf.Recipients = inlineRecipients(n)
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

	// Best of two, as the raw baseline: each run fans out a notification of
	// its own into an empty inbox and change log (the raw insert's table is
	// truncated before each of its runs too). The first run is profiled.
	var best measurement
	for run := 0; run < 2; run++ {
		if _, err := pool.Exec(ctx, `TRUNCATE notify_inbox, notify_inbox_changes`); err != nil {
			return measurement{}, err
		}
		nf.Key = fmt.Sprintf("fanout-%s-%d", mode, run)
		m, err := fanoutOnce(ctx, h, pool, client, nf, n, run == 0, "fanout."+mode, db.Name)
		if err != nil {
			return measurement{}, err
		}
		if best.rate == 0 || m.rate > best.rate {
			best = m
		}
	}
	best.note = fmt.Sprintf("%s, %.2fs, best of 2, %s", note, best.seconds, best.cpu)
	return best, nil
}

// fanoutOnce times one fan-out of nf to n recipients, from the COMMIT of
// SendTx to the notification's status fanned_out, and checks its inbox items
// and change-log entries.
func fanoutOnce(ctx context.Context, h *harness, pool *pgxpool.Pool, client *notifyd.Client, nf notifyd.Notification,
	n int, profile bool, name, dbName string) (measurement, error) {
	h.waitQuiet(ctx)
	var cpu0 cpuTimes
	stopProf := func() {}
	if profile {
		// Started before the transaction that enqueues: a connection idle in
		// a transaction holds back its statistics, the setup's writes too.
		stopProf = h.prof.start(ctx, name, dbName, n, "recipient")
	}
	wal0 := walPosition(ctx, pool)
	id, committed, err := sendCommitted(ctx, pool, client, nf, func() { cpu0 = h.cpu() })
	if err != nil {
		stopProf()
		return measurement{}, err
	}
	done, err := waitFannedOut(ctx, pool, id, fanoutTimeout)
	cpu := h.cpu().sub(cpu0)
	wal := walPosition(ctx, pool) - wal0
	stopProf()
	if err != nil {
		return measurement{}, err
	}
	elapsed := done.Sub(committed)
	inbox, err := count(ctx, pool, `SELECT count(*) FROM notify_inbox WHERE notification_id = $1`, id)
	if err != nil {
		return measurement{}, err
	}
	changes, err := count(ctx, pool, `SELECT coalesce(sum(cardinality(item_ids)), 0) FROM notify_inbox_changes WHERE kind = 'created'`)
	if err != nil {
		return measurement{}, err
	}
	if inbox != n || changes != n {
		return measurement{}, fmt.Errorf("fanned out, but %d inbox items and %d change-log entries for %d recipients", inbox, changes, n)
	}
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu, wal: wal}, nil
}

// rawInsertSQL writes n inbox rows shaped exactly like the fan-out's (same
// columns and values, time-ordered UUIDs like uuidv7, one notification id,
// recipients in id order)
// into a copy of notify_inbox with the indexes of its partitions, in one
// statement.
const rawInsertSQL = `
INSERT INTO bench_inbox (id, notification_id, recipient, notifier, key, category, reason, actor, title, body, url, params)
SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || '7000' || '8'
        || lpad(to_hex(g), 15, '0'))::uuid, '0190b8a4-0000-7000-8000-00000000fa12',
       ` + recipientSQL + `, 'bench.inapp', 'fanout-raw', 'bench', 'direct', NULL, $2, $3, $4, $5::jsonb
FROM generate_series(1, $1) g`

// measureRawInsert is baseline (a): the raw Postgres limit for n inbox rows.
// It runs twice (truncating between) and keeps the faster run.
func measureRawInsert(ctx context.Context, h *harness, n int) (measurement, error) {
	_, pool, closeDB, err := h.openDB(ctx, "raw_insert", 2)
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	// The indexes of a partition of notify_inbox, the table the fan-out
	// writes: the partitioned table's own (LIKE copies those) and the
	// primary key on id that each partition has and the partitioned table
	// has not.
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_inbox (LIKE notify_inbox INCLUDING ALL, PRIMARY KEY (id))`); err != nil {
		return measurement{}, err
	}
	best := time.Duration(0)
	var bestCPU cpuTimes
	for run := 0; run < 2; run++ {
		if _, err := pool.Exec(ctx, `TRUNCATE bench_inbox`); err != nil {
			return measurement{}, err
		}
		h.waitQuiet(ctx)
		cpu0 := h.cpu()
		start := time.Now()
		tag, err := pool.Exec(ctx, rawInsertSQL, n, benchTitle, benchBody, benchURL, benchJSON)
		elapsed := time.Since(start)
		if err != nil {
			return measurement{}, fmt.Errorf("raw insert: %w", err)
		}
		if int(tag.RowsAffected()) != n {
			return measurement{}, fmt.Errorf("raw insert wrote %d rows, want %d", tag.RowsAffected(), n)
		}
		if best == 0 || elapsed < best {
			best, bestCPU = elapsed, h.cpu().sub(cpu0)
		}
	}
	return measurement{rate: float64(n) / best.Seconds(), seconds: best.Seconds(), cpu: bestCPU,
		note: fmt.Sprintf("%d rows in %.2fs, one statement, best of 2, %s", n, best.Seconds(), bestCPU)}, nil
}

// naiveArgs is baseline (b)'s job: one per recipient.
type naiveArgs struct {
	Recipient string `json:"recipient"`
}

func (naiveArgs) Kind() string { return "bench.naive_inbox" }

// naiveWorker inserts one inbox row per job: the design notifyd replaces.
type naiveWorker struct {
	river.WorkerDefaults[naiveArgs]
	exec func(ctx context.Context, recipient string) error
	done atomic.Int64
	want int64
	last chan struct{}
}

func (w *naiveWorker) Work(ctx context.Context, job *river.Job[naiveArgs]) error {
	if err := w.exec(ctx, job.Args.Recipient); err != nil {
		return err
	}
	if w.done.Add(1) == w.want {
		close(w.last)
	}
	return nil
}

// naiveInsertSQL is the naive job's statement: the same row the fan-out
// writes, one at a time.
const naiveInsertSQL = `
INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, category, reason, title, body, url, params)
VALUES ($1, '0190b8a4-0000-7000-8000-00000000fa11', $2, 'bench.inapp', 'fanout-naive', 'bench', 'direct', $3, $4, $5, $6::jsonb)
ON CONFLICT (notification_id, recipient) DO NOTHING`

// measureNaive is baseline (b): n jobs enqueued with InsertManyFast before
// the client starts, worked by a River client with notifyd's default queue
// settings (the send queue's MaxWorkers, the fetch cooldown and poll
// interval, the daemon's pool size), timed from Start to the n-th row.
func measureNaive(ctx context.Context, h *harness, n int) (measurement, error) {
	db, err := h.freshDB(ctx, "naive")
	if err != nil {
		return measurement{}, err
	}
	defer db.drop()
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return measurement{}, err
	}
	pool, err := server.OpenPool(ctx, cfg) // the daemon's pool sizing
	if err != nil {
		return measurement{}, err
	}
	defer pool.Close()
	w := &naiveWorker{want: int64(n), last: make(chan struct{})}
	w.exec = func(ctx context.Context, recipient string) error {
		_, err := pool.Exec(ctx, naiveInsertSQL, uuidv7.String(), recipient, benchTitle, benchBody, benchURL, benchJSON)
		return err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(pool), sameQueueSettings(cfg, jobs.QueueSend, workers))
	if err != nil {
		return measurement{}, err
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: naiveArgs{Recipient: recipientID(i + 1)},
			InsertOpts: &river.InsertOpts{Queue: jobs.QueueSend}}
	}
	if _, err := client.InsertManyFast(ctx, params); err != nil {
		return measurement{}, err
	}
	if err := analyze(ctx, pool); err != nil {
		return measurement{}, err
	}
	h.waitQuiet(ctx)
	cpu0 := h.cpu()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return measurement{}, err
	}
	defer stopRiver(client)
	select {
	case <-w.last:
	case <-time.After(fanoutTimeout):
		return measurement{}, fmt.Errorf("naive baseline: %d of %d rows after %s", w.done.Load(), n, fanoutTimeout)
	}
	elapsed := time.Since(start)
	cpu := h.cpu().sub(cpu0)
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d jobs, %d workers, %.2fs, %s", n, cfg.Queues.Send, elapsed.Seconds(), cpu)}, nil
}

// sameQueueSettings is a River config with one queue configured as notifyd
// configures queue (jobs.RiverConfig): its MaxWorkers, and the fetch cooldown
// and poll interval from config.
func sameQueueSettings(cfg *config.Config, queue string, workers *river.Workers) *river.Config {
	rc := jobs.RiverConfig(&jobs.Deps{Config: cfg}, river.NewWorkers())
	return &river.Config{
		Logger:            rc.Logger,
		FetchCooldown:     rc.FetchCooldown,
		FetchPollInterval: rc.FetchPollInterval,
		Queues:            map[string]river.QueueConfig{queue: rc.Queues[queue]},
		Workers:           workers,
	}
}

func stopRiver(c *river.Client[pgx.Tx]) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		_ = c.StopAndCancel(ctx)
	}
}
