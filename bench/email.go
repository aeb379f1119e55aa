package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server"
)

// emailTimeout bounds one email measurement.
const emailTimeout = 10 * time.Minute

// The immediate email rows' targets.
const (
	// emailChannelTarget: deliveries/s at least this fraction of the email
	// channel's own limit (the same messages, sink and lanes, no database).
	emailChannelTarget = 0.5
	// emailPGTarget: PostgreSQL CPU per delivery at most this multiple of
	// PostgreSQL CPU per River no-op job.
	emailPGTarget = 1.0
)

// runEmail is scenario 2: n immediate emails to an in-process SMTP sink,
// against (a) the email channel's own limit (measureEmailChannel) and, as
// information, River working n no-op jobs with the send queue's settings,
// and (b) PostgreSQL's CPU per delivery against its CPU per no-op job, both
// from the same run's CPU accounting. It also returns the measured
// deliveries/s, the baseline of the rows measured against immediate email.
func runEmail(ctx context.Context, h *harness, n int) ([]Result, *measurement) {
	const unit = "deliveries/s"
	const (
		rowChannel = "email.immediate vs channel limit"
		rowNoop    = "email.immediate vs no-op jobs"
		rowPG      = "email: PostgreSQL CPU per delivery vs per no-op job"
	)
	noop, noopErr := measureNoop(ctx, h, n)
	if noopErr == nil {
		fmt.Printf("  River no-op jobs: %s jobs/s (%s)\n", formatNumber(noop.rate), noop.note)
	}
	limit, limitErr := measureEmailChannel(ctx, h, n)
	if limitErr == nil {
		fmt.Printf("  email channel alone: %s messages/s (%s)\n", formatNumber(limit.rate), limit.note)
	}
	m, err := measureEmail(ctx, h, n)
	if err != nil {
		return []Result{errorResult(rowChannel, unit, ">=", emailChannelTarget, "ratio", err),
			errorResult(rowPG, "µs", "<=", emailPGTarget, "ratio", err)}, nil
	}
	fmt.Printf("  immediate email: %s deliveries/s (%s)\n", formatNumber(m.rate), m.note)
	var out []Result
	if limitErr != nil {
		out = append(out, errorResult(rowChannel, unit, ">=", emailChannelTarget, "ratio", fmt.Errorf("baseline: %w", limitErr)))
	} else {
		r := ratioResult(rowChannel, unit, m.rate, limit.rate, "email channel alone", "messages/s", ">=", emailChannelTarget)
		out = append(out, annotate(r, n, m, &limit))
	}
	if noopErr != nil {
		return append(out, errorResult(rowPG, "µs", "<=", emailPGTarget, "ratio", fmt.Errorf("baseline: %w", noopErr))), &m
	}
	r := ratioResult(rowNoop, unit, m.rate, noop.rate, "River no-op jobs", "jobs/s", ">=", 0)
	r.TargetKind, r.Pass = "info", nil
	out = append(out, annotate(r, n, m, &noop))
	perDelivery := float64(m.cpu.PG.Microseconds()) / float64(n)
	perJob := float64(noop.cpu.PG.Microseconds()) / float64(n)
	fmt.Printf("  PostgreSQL CPU: %.0f µs per delivery, %.0f µs per no-op job\n", perDelivery, perJob)
	r = ratioResult(rowPG, "µs/delivery", perDelivery, perJob, "per River no-op job", "µs/job", "<=", emailPGTarget)
	return append(out, annotate(r, n, m, &noop)), &m
}

// measureEmail times n immediate emails through the real daemon: from the
// COMMIT of SendTx to every delivery row `sent` (fan-out, send jobs, SMTP
// conversations with the pooled connections, settles).
func measureEmail(ctx context.Context, h *harness, n int) (measurement, error) {
	sc, err := startEmailScenario(ctx, h, "email", n)
	if err != nil {
		return measurement{}, err
	}
	defer sc.close()
	sink, db, pool, client := sc.sink, sc.db, sc.pool, sc.client
	if err := sc.warmUp(ctx, n, false); err != nil {
		return measurement{}, err
	}
	nf := notifyd.Notification{Notifier: notifierEmail, Key: "email-1", Recipients: inlineRecipients(n), Params: benchParams}
	h.waitQuiet(ctx)

	var fannedOut time.Time
	run, err := timeSend(ctx, h, pool, client, db.Name, "email", nf, n, sink.Count, func(id string) error {
		if !fannedOut.IsZero() {
			return nil
		}
		status, _, err := notificationStatus(ctx, pool, id)
		if status == string(notifyd.NotificationFannedOut) {
			fannedOut = time.Now()
		}
		return err
	})
	if err != nil {
		return measurement{}, fmt.Errorf("email: %w", err)
	}
	committed, done, cpu := run.committed, run.done, run.cpu
	if fannedOut.IsZero() {
		fannedOut = done // its last chunk committed before its sends ran
	}
	elapsed := done.Sub(committed)
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d emails, %.2fs (fanned out after %.2fs), %d SMTP connections, %s", n, elapsed.Seconds(),
			fannedOut.Sub(committed).Seconds(), sink.Connections(), cpu)}, nil
}

// timedRun is what timeSend measured.
type timedRun struct {
	committed, done time.Time // COMMIT returned; the ledger had every row sent
	cpu             cpuTimes
}

// timeSend is the timed part of the rows that send one notification to n
// recipients through the daemon (immediate email, web push): nf's COMMIT
// (the CPU counters start just before it, the profile before the
// transaction), the wait until arrived — the sink's count of messages — has
// grown by n, calling tick, when
// set, on every poll, then the wait for the ledger to settle every row, all
// of them sent. The sink is watched first and the ledger only after: polling
// the ledger all along would take database time from the daemon measured.
func timeSend(ctx context.Context, h *harness, pool *pgxpool.Pool, client *notifyd.Client, dbName, scenario string,
	nf notifyd.Notification, n int, arrived func() int, tick func(id string) error) (timedRun, error) {
	before := arrived()
	var run timedRun
	// The profile starts before the transaction that enqueues: a connection
	// idle in a transaction holds back its statistics, the setup's writes
	// too, which would then count in the window.
	stopProf := h.prof.start(ctx, scenario, dbName, n, "delivery")
	defer stopProf()
	id, committed, err := sendCommitted(ctx, pool, client, nf, func() { run.cpu = h.cpu() })
	if err != nil {
		return run, err
	}
	run.committed = committed
	if _, err := waitUntil(ctx, 5*time.Millisecond, emailTimeout, func() (bool, error) {
		if tick != nil {
			if err := tick(id); err != nil {
				return false, err
			}
		}
		return arrived()-before >= n, nil
	}); err != nil {
		return run, fmt.Errorf("%d of %d messages received: %w", arrived()-before, n, err)
	}
	var last [2]int
	run.done, err = waitUntil(ctx, 5*time.Millisecond, time.Minute, func() (bool, error) {
		var sent, terminal int
		err := pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE status = 'sent'),
       count(*) FILTER (WHERE status NOT IN ('pending', 'sending', 'failed', 'rate_limited'))
FROM notify_deliveries WHERE notification_id = $1`, id).Scan(&sent, &terminal)
		last = [2]int{sent, terminal}
		return terminal >= n, err
	})
	run.cpu = h.cpu().sub(run.cpu)
	if err != nil {
		return run, fmt.Errorf("ledger: %d sent, %d terminal of %d: %w", last[0], last[1], n, err)
	}
	if last[0] != n {
		return run, fmt.Errorf("only %d of %d deliveries sent", last[0], n)
	}
	return run, nil
}

// vsImmediate is a row of a scenario measured against immediate email:
// measure's rate over scenario 2's (immediate, or n emails measured now when
// that scenario did not run), with label naming the measured side in the
// output.
func vsImmediate(ctx context.Context, h *harness, name, label string, target float64, n int, immediate *measurement,
	measure func() (measurement, error)) []Result {
	const unit = "deliveries/s"
	m, err := measure()
	if err != nil {
		return []Result{errorResult(name, unit, ">=", target, "ratio", err)}
	}
	fmt.Printf("  %s: %s deliveries/s (%s)\n", label, formatNumber(m.rate), m.note)
	if immediate == nil {
		e, err := measureEmail(ctx, h, n)
		if err != nil {
			return []Result{errorResult(name, unit, ">=", target, "ratio", fmt.Errorf("baseline: %w", err))}
		}
		fmt.Printf("  immediate email (baseline): %s deliveries/s (%s)\n", formatNumber(e.rate), e.note)
		immediate = &e
	}
	r := ratioResult(name, unit, m.rate, immediate.rate, "immediate email", "deliveries/s", ">=", target)
	return []Result{annotate(r, n, m, immediate)}
}

// noopArgs is the trivial job of the no-op and enqueue baselines.
type noopArgs struct {
	Seq int `json:"seq"`
}

func (noopArgs) Kind() string { return "bench.noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	worked atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.worked.Add(1)
	return nil
}

// measureNoop is the email baseline: a River client with the send queue's
// settings (MaxWorkers, fetch cooldown and poll interval, the daemon's pool
// size) working n no-op jobs, from the COMMIT that inserts them to the n-th
// completion recorded in river_job.
func measureNoop(ctx context.Context, h *harness, n int) (measurement, error) {
	db, err := h.freshDB(ctx, "noop")
	if err != nil {
		return measurement{}, err
	}
	defer db.drop()
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return measurement{}, err
	}
	pool, err := server.OpenPool(ctx, cfg)
	if err != nil {
		return measurement{}, err
	}
	defer pool.Close()
	w := &noopWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(pool), sameQueueSettings(cfg, jobs.QueueSend, workers))
	if err != nil {
		return measurement{}, err
	}
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted},
		ChanSize: n + 1000})
	defer cancelSub()
	if err := client.Start(ctx); err != nil {
		return measurement{}, err
	}
	defer stopRiver(client)
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{Seq: i}, InsertOpts: &river.InsertOpts{Queue: jobs.QueueSend}}
	}
	// The same warm-up as the email side (emailScenario.warmUp): n jobs
	// worked and the tables analyzed before the measured n.
	if _, err := client.InsertMany(ctx, params); err != nil {
		return measurement{}, err
	}
	if err := waitEvents(events, n); err != nil {
		return measurement{}, fmt.Errorf("no-op warm-up: %w", err)
	}
	if err := analyzeAll(ctx, pool); err != nil {
		return measurement{}, err
	}
	h.waitQuiet(ctx)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return measurement{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := client.InsertManyFastTx(ctx, tx, params); err != nil {
		return measurement{}, err
	}
	stopProf := h.prof.start(ctx, "email.noop", db.Name, n, "job")
	cpu0 := h.cpu()
	if err := tx.Commit(ctx); err != nil {
		stopProf()
		return measurement{}, err
	}
	start := time.Now()
	if err := waitEvents(events, n); err != nil {
		stopProf()
		return measurement{}, fmt.Errorf("no-op baseline: %w", err)
	}
	elapsed := time.Since(start)
	cpu := h.cpu().sub(cpu0)
	stopProf()
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d jobs, %d workers, %.2fs, %s", n, cfg.Queues.Send, elapsed.Seconds(), cpu)}, nil
}

// waitEvents waits for n events, at most emailTimeout.
func waitEvents(events <-chan *river.Event, n int) error {
	timeout := time.After(emailTimeout)
	for completed := 0; completed < n; completed++ {
		select {
		case <-events:
		case <-timeout:
			return fmt.Errorf("%d of %d completed", completed, n)
		}
	}
	return nil
}
