package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server"
)

// The small notifications ladder: one-recipient notifications (in_app +
// email) sent by SendTx, each in a transaction of its own, from
// pacedSenders connections on an open-loop schedule, at each rate for
// smallStep; a rate is kept up with when commit → email accepted has p99 ≤
// smallP99 and every email of the step has arrived smallDrain after its last
// commit. The baseline is the same ladder for River alone: InsertTx of a
// no-op job, commit → job completed.
const (
	smallStep   = 10 * time.Second
	smallP99    = 250 * time.Millisecond
	smallDrain  = time.Second
	smallTarget = 0.5
)

// smallRates is the ladder, doubling.
var smallRates = []float64{100, 200, 400, 800, 1600, 3200}

// ladderStep is what one rate of a ladder measured.
type ladderStep struct {
	rate     float64
	n        int
	p50, p99 time.Duration
	late     int // not arrived smallDrain after the last commit
	cpu      cpuTimes
	wal      int64 // WAL bytes the step wrote (the whole cluster's)
	err      error
}

func (s ladderStep) kept() bool { return s.err == nil && s.late == 0 && s.p99 <= smallP99 }

func (s ladderStep) String() string {
	if s.err != nil {
		return fmt.Sprintf("%.0f/s: %v", s.rate, s.err)
	}
	return fmt.Sprintf("%.0f/s: p50 %.1f ms, p99 %.1f ms, %d late, PostgreSQL %.0f µs and Go %.0f µs CPU and %d B of WAL a unit, others %.2f cores",
		s.rate, ms(s.p50), ms(s.p99), s.late, perUnit(s.cpu.PG, s.n), perUnit(s.cpu.Go, s.n), s.wal/int64(max(s.n, 1)),
		s.cpu.others().Seconds()/smallStep.Seconds())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func perUnit(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}

// ladder runs step at each rate until one is not kept up with, and returns
// every step run.
func ladder(ctx context.Context, h *harness, label string, step func(rate float64, base int) ladderStep) []ladderStep {
	var out []ladderStep
	base := 0
	for _, rate := range smallRates {
		h.waitQuiet(ctx)
		s := step(rate, base)
		base += int(rate * smallStep.Seconds())
		fmt.Printf("  %s %s\n", label, s)
		out = append(out, s)
		if !s.kept() || ctx.Err() != nil {
			break
		}
	}
	return out
}

// highest is the highest rate kept up with (0: none).
func highest(steps []ladderStep) float64 {
	best := 0.0
	for _, s := range steps {
		if s.kept() {
			best = s.rate
		}
	}
	return best
}

func runSmall(ctx context.Context, h *harness) []Result {
	const name = "small notifications: highest rate kept up"
	daemon, dm, err := measureSmallLadder(ctx, h)
	if err != nil {
		return []Result{errorResult(name, "notifications/s", ">=", smallTarget, "ratio", err)}
	}
	river, rm, err := measureRiverLadder(ctx, h)
	if err != nil {
		return []Result{errorResult(name, "notifications/s", ">=", smallTarget, "ratio", err)}
	}
	hd, hr := highest(daemon), highest(river)
	fmt.Printf("  small notifications: %.0f/s kept up with, River alone %.0f/s\n", hd, hr)
	var r Result
	if hr == 0 {
		r = naResult(name, "notifications/s", ">=", smallTarget, "ratio", "River alone kept up with no rate")
	} else {
		r = ratioResult(name, "notifications/s", hd, hr, "River InsertTx + no-op job", "jobs/s", ">=", smallTarget)
	}
	r = annotate(r, dm.n, dm.measurement, &rm.measurement)
	results := []Result{r}
	// CPU per notification at each rate the daemon ran, for information.
	for _, s := range daemon {
		if s.err != nil {
			continue
		}
		c := absoluteResult(fmt.Sprintf("small notifications at %.0f/s: p99", s.rate), "ms", ms(s.p99), "<=", ms(smallP99))
		c.TargetKind, c.Pass = "info", nil
		c = annotate(c, s.n, measurement{seconds: smallStep.Seconds(), cpu: s.cpu, note: s.String()}, nil)
		results = append(results, c)
	}
	return results
}

// ladderMeasurement sums a ladder for the results file.
type ladderMeasurement struct {
	measurement
	n int
}

func summarize(steps []ladderStep) ladderMeasurement {
	var m ladderMeasurement
	var notes []string
	for _, s := range steps {
		m.n += s.n
		m.seconds += smallStep.Seconds()
		m.cpu = cpuTimes{Go: m.cpu.Go + s.cpu.Go, PG: m.cpu.PG + s.cpu.PG, Machine: m.cpu.Machine + s.cpu.Machine}
		notes = append(notes, s.String())
	}
	m.rate = highest(steps)
	m.note = strings.Join(notes, "; ")
	return m
}

// measureSmallLadder is the daemon's side: one scenario database and daemon
// for the whole ladder, recipient i (1-based, counted across the steps) with
// its own address, so each arrival names its notification.
func measureSmallLadder(ctx context.Context, h *harness) ([]ladderStep, ladderMeasurement, error) {
	total := 0
	for _, r := range smallRates {
		total += int(r * smallStep.Seconds())
	}
	arrivals := &matcher{committed: map[string]time.Time{}, arrived: map[string]time.Time{}}
	sc, err := startEmailScenario(ctx, h, "small", total, smtpcapture.WithAccepted(func(to []string) {
		at := time.Now()
		for _, addr := range to {
			arrivals.arrive(strings.ToLower(addr), at)
		}
	}))
	if err != nil {
		return nil, ladderMeasurement{}, err
	}
	defer sc.close()
	senders, err := sc.db.pool(ctx, pacedSenders)
	if err != nil {
		return nil, ladderMeasurement{}, err
	}
	defer senders.Close()
	if err := sc.warmUp(ctx, 1000, true); err != nil {
		return nil, ladderMeasurement{}, err
	}
	arrivals.reset()
	steps := ladder(ctx, h, "daemon", func(rate float64, base int) ladderStep {
		n := int(rate * smallStep.Seconds())
		s := ladderStep{rate: rate, n: n}
		key := func(i int) string { return fmt.Sprintf("user%d@bench.test", base+i+1) }
		wal0 := walPosition(ctx, sc.pool)
		cpu0 := h.cpu()
		_, err := paced(ctx, n, rate, func(i int) error {
			_, committed, err := sendCommitted(ctx, senders, sc.client, notifyd.Notification{Notifier: notifierBoth,
				Key: fmt.Sprintf("small-%07d", base+i), Recipients: []notifyd.Recipient{{ID: recipientID(base + i + 1)}},
				Params: benchParams}, nil)
			if err == nil {
				arrivals.commit(key(i), committed)
			}
			return err
		})
		if err != nil {
			s.err = err
			return s
		}
		s.late, s.p50, s.p99 = settle(ctx, arrivals, n, key)
		s.cpu = h.cpu().sub(cpu0)
		s.wal = walPosition(ctx, sc.pool) - wal0
		return s
	})
	return steps, summarize(steps), nil
}

// settle waits smallDrain after a step's last commit, counts what has not
// arrived by then, waits (up to a minute) for the rest so that the next step
// starts on an empty queue, and returns the late count and the step's p50
// and p99 (a missing arrival counts as the longest wait).
func settle(ctx context.Context, m *matcher, n int, key func(i int) string) (late int, p50, p99 time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(smallDrain):
	}
	arrived := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		k := 0
		for i := range n {
			if _, ok := m.arrived[key(i)]; ok {
				k++
			}
		}
		return k
	}
	late = n - arrived()
	_, _ = waitUntil(ctx, 20*time.Millisecond, time.Minute, func() (bool, error) { return arrived() == n, nil })
	m.mu.Lock()
	lat := make([]time.Duration, 0, n)
	for i := range n {
		c, ok1 := m.committed[key(i)]
		a, ok2 := m.arrived[key(i)]
		if ok1 && ok2 {
			lat = append(lat, a.Sub(c))
		} else {
			lat = append(lat, time.Hour)
		}
	}
	m.mu.Unlock()
	slices.Sort(lat)
	return late, time.Duration(quantile(lat, 0.50) * float64(time.Millisecond)),
		time.Duration(quantile(lat, 0.99) * float64(time.Millisecond))
}

// measureRiverLadder is the baseline: a River client with the send queue's
// settings working no-op jobs, each inserted by InsertTx in a transaction of
// its own from pacedSenders connections, commit → completion event.
func measureRiverLadder(ctx context.Context, h *harness) ([]ladderStep, ladderMeasurement, error) {
	db, err := h.freshDB(ctx, "small_river")
	if err != nil {
		return nil, ladderMeasurement{}, err
	}
	defer db.drop()
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return nil, ladderMeasurement{}, err
	}
	pool, err := server.OpenPool(ctx, cfg)
	if err != nil {
		return nil, ladderMeasurement{}, err
	}
	defer pool.Close()
	senders, err := db.pool(ctx, pacedSenders)
	if err != nil {
		return nil, ladderMeasurement{}, err
	}
	defer senders.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), sameQueueSettings(cfg, jobs.QueueSend, workers))
	if err != nil {
		return nil, ladderMeasurement{}, err
	}
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted},
		ChanSize: 100000})
	defer cancelSub()
	if err := client.Start(ctx); err != nil {
		return nil, ladderMeasurement{}, err
	}
	defer stopRiver(client)
	m := &matcher{committed: map[string]time.Time{}, arrived: map[string]time.Time{}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			var ev *river.Event
			select {
			case <-stop:
				return
			case ev = <-events:
			}
			if ev == nil || ev.Job == nil {
				continue
			}
			var seq struct {
				Seq int `json:"seq"`
			}
			if err := json.Unmarshal(ev.Job.EncodedArgs, &seq); err == nil {
				m.arrive(fmt.Sprint(seq.Seq), time.Now())
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	insert := func(seq int) (time.Time, error) {
		tx, err := senders.Begin(ctx)
		if err != nil {
			return time.Time{}, err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if _, err := client.InsertTx(ctx, tx, noopArgs{Seq: seq}, &river.InsertOpts{Queue: jobs.QueueSend}); err != nil {
			return time.Time{}, err
		}
		if err := tx.Commit(ctx); err != nil {
			return time.Time{}, err
		}
		return time.Now(), nil
	}
	// The same warm-up as the daemon's: a thousand jobs worked, the tables
	// analyzed.
	for i := range 1000 {
		if _, err := insert(-1 - i); err != nil {
			return nil, ladderMeasurement{}, err
		}
	}
	if _, err := waitUntil(ctx, 10*time.Millisecond, time.Minute, func() (bool, error) {
		var open int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state <> 'completed'`).Scan(&open)
		return open == 0, err
	}); err != nil {
		return nil, ladderMeasurement{}, fmt.Errorf("warm-up of River: %w", err)
	}
	if err := analyzeAll(ctx, pool); err != nil {
		return nil, ladderMeasurement{}, err
	}
	steps := ladder(ctx, h, "River alone", func(rate float64, base int) ladderStep {
		n := int(rate * smallStep.Seconds())
		s := ladderStep{rate: rate, n: n}
		key := func(i int) string { return fmt.Sprint(base + i) }
		wal0 := walPosition(ctx, pool)
		cpu0 := h.cpu()
		_, err := paced(ctx, n, rate, func(i int) error {
			committed, err := insert(base + i)
			if err == nil {
				m.commit(key(i), committed)
			}
			return err
		})
		if err != nil {
			s.err = err
			return s
		}
		s.late, s.p50, s.p99 = settle(ctx, m, n, key)
		s.cpu = h.cpu().sub(cpu0)
		s.wal = walPosition(ctx, pool) - wal0
		return s
	})
	return steps, summarize(steps), nil
}

// walPosition is the cluster's current WAL position in bytes (0 when it
// cannot be read).
func walPosition(ctx context.Context, pool *pgxpool.Pool) int64 {
	var lsn int64
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&lsn); err != nil {
		return 0
	}
	return lsn
}
