package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
)

// runMailLatency is the commit → email scenario: n notifications, each an
// immediate email to one recipient, sent at rate per second by one
// application goroutine (each in a transaction of its own); each latency is
// from the return of COMMIT to the moment the SMTP sink accepted the message
// (the end of DATA), so it covers fan-out, the send job's claim, rendering,
// the SMTP conversation and nothing after.
func runMailLatency(ctx context.Context, h *harness, n int, rate float64) []Result {
	const p50Row, p99Row = "commit → email accepted p50", "commit → email accepted p99"
	lat, m, err := measureMailLatency(ctx, h, n, rate)
	if err != nil {
		return []Result{errorResult(p99Row, "ms", "<=", mailLatencyTarget, "absolute", err)}
	}
	p50, p99 := quantile(lat, 0.50), quantile(lat, 0.99)
	fmt.Printf("  commit → email accepted: p50 %.1f ms, p99 %.1f ms (%s)\n", p50, p99, m.note)
	r50 := annotate(absoluteResult(p50Row, "ms", p50, "<=", mailLatencyTarget), n, m, nil)
	r50.TargetKind, r50.Pass = "info", nil
	return []Result{r50, annotate(absoluteResult(p99Row, "ms", p99, "<=", mailLatencyTarget), n, m, nil)}
}

// mailLatencyTarget is the commit → email row's target: p99 at most this
// many milliseconds.
const mailLatencyTarget = 500

func measureMailLatency(ctx context.Context, h *harness, n int, rate float64) ([]time.Duration, measurement, error) {
	arrivals := &matcher{committed: map[string]time.Time{}, arrived: map[string]time.Time{}}
	sc, err := startEmailScenario(ctx, h, "maillatency", n, smtpcapture.WithAccepted(func(to []string) {
		at := time.Now()
		for _, addr := range to {
			arrivals.arrive(strings.ToLower(addr), at)
		}
	}))
	if err != nil {
		return nil, measurement{}, err
	}
	defer sc.close()
	sink, db, pool, client := sc.sink, sc.db, sc.pool, sc.client

	// The warm-up opens the pooled SMTP connections and leaves the tables
	// as a running daemon has them: the first email of a cold daemon
	// measures start-up, and plans made on empty tables measure those.
	if err := sc.warmUp(ctx, n, true); err != nil {
		return nil, measurement{}, err
	}
	arrivals.reset()
	h.waitQuiet(ctx)

	stopProf := h.prof.start(ctx, "maillatency", db.Name, n, "send")
	defer stopProf()
	cpu0 := h.cpu()
	sending, err := paced(ctx, n, rate, func(i int) error {
		_, committed, err := sendCommitted(ctx, pool, client, notifyd.Notification{Notifier: notifierEmail,
			Key: fmt.Sprintf("mail-latency-%05d", i), Recipients: []notifyd.Recipient{{ID: recipientID(i + 1)}},
			Params: benchParams}, nil)
		if err == nil {
			arrivals.commit(fmt.Sprintf("user%d@bench.test", i+1), committed)
		}
		return err
	})
	if err != nil {
		return nil, measurement{}, err
	}
	if _, err := waitUntil(ctx, 10*time.Millisecond, time.Minute, func() (bool, error) {
		return arrivals.matched() >= n, nil
	}); err != nil {
		return nil, measurement{}, fmt.Errorf("%d of %d emails arrived: %w", arrivals.matched(), n, err)
	}
	cpu := h.cpu().sub(cpu0)
	lat := arrivals.latencies()
	slices.Sort(lat)
	note := fmt.Sprintf("%d sends at %.0f/s (achieved %.0f/s), max %.1f ms, %d SMTP connections, %s", n, rate,
		float64(n)/sending.Seconds(), float64(lat[len(lat)-1])/float64(time.Millisecond), sink.Connections(), cpu)
	if trace, err := traceMailLatency(ctx, pool, arrivals, n); err != nil {
		fmt.Fprintf(os.Stderr, "bench: commit → email trace: %v\n", err)
	} else {
		fmt.Printf("  where the time goes (p50 / p99 of each step, ms): %s\n", trace)
		note += "; steps (p50/p99 ms): " + trace
	}
	return lat, measurement{seconds: sending.Seconds(), cpu: cpu, note: note}, nil
}

// mailTraceSQL reads, for each notification of the commit → email scenario,
// when River started its fan-out job (for a small notification, which the
// fan-out claimer takes with others and has no job: when the claim's
// transaction started, the time it marked the notification fanned out), when the fan-out inserted the send job
// of its delivery (in the fan-out's transaction), and when River started
// that send job. The send job's args pack its delivery ids 16 bytes each
// (jobs.SendArgs), unpacked here to find the job of each delivery.
const mailTraceSQL = `
WITH sends AS (
    SELECT j.created_at, j.attempted_at,
           encode(substr(decode(j.args->>'ids', 'base64'), 1 + 16 * g, 16), 'hex')::uuid AS delivery_id
    FROM river_job j,
         generate_series(0, length(decode(j.args->>'ids', 'base64')) / 16 - 1) AS g
    WHERE j.kind = 'notify.send' AND j.args ? 'ids'
)
SELECT n.key, coalesce(f.attempted_at, n.updated_at), s.created_at, s.attempted_at
FROM notify_notifications n
LEFT JOIN river_job f ON f.kind = 'notify.fanout' AND f.args->>'notification_id' = n.id::text
JOIN notify_deliveries d ON d.notification_id = n.id
JOIN sends s ON s.delivery_id = d.id
WHERE n.key LIKE 'mail-latency-%'`

// traceMailLatency breaks each measured send down into its steps: commit →
// fan-out job started (the fan-out queue's wait), → send job inserted (the
// fan-out), → send job started (the send queue's wait), → accepted by the
// sink (claim, rendering, SMTP), and returns the p50 and p99 of each.
func traceMailLatency(ctx context.Context, pool *pgxpool.Pool, m *matcher, n int) (string, error) {
	rows, err := pool.Query(ctx, mailTraceSQL)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var steps [4][]time.Duration
	m.mu.Lock()
	defer m.mu.Unlock()
	for rows.Next() {
		var key string
		var fanoutStart, sendInsert, sendStart *time.Time
		if err := rows.Scan(&key, &fanoutStart, &sendInsert, &sendStart); err != nil {
			return "", err
		}
		var i int
		if _, err := fmt.Sscanf(key, "mail-latency-%d", &i); err != nil || fanoutStart == nil || sendStart == nil {
			continue
		}
		addr := fmt.Sprintf("user%d@bench.test", i+1)
		committed, ok1 := m.committed[addr]
		accepted, ok2 := m.arrived[addr]
		if !ok1 || !ok2 {
			continue
		}
		at := []time.Time{committed, *fanoutStart, *sendInsert, *sendStart, accepted}
		for k := range steps {
			steps[k] = append(steps[k], at[k+1].Sub(at[k]))
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	if len(steps[0]) < n/2 {
		return "", fmt.Errorf("traced %d of %d sends", len(steps[0]), n)
	}
	names := []string{"commit → fan-out started", "→ send job inserted", "→ send job started", "→ accepted"}
	var parts []string
	for k, d := range steps {
		slices.Sort(d)
		parts = append(parts, fmt.Sprintf("%s %.1f / %.1f", names[k], quantile(d, 0.5), quantile(d, 0.99)))
	}
	return strings.Join(parts, ", "), nil
}

// matcher pairs commit times with arrival times by a key, in whichever order
// the two are recorded.
type matcher struct {
	mu        sync.Mutex
	committed map[string]time.Time
	arrived   map[string]time.Time
}

func (m *matcher) commit(key string, t time.Time) {
	m.mu.Lock()
	m.committed[key] = t
	m.mu.Unlock()
}

func (m *matcher) arrive(key string, t time.Time) {
	m.mu.Lock()
	if _, ok := m.arrived[key]; !ok {
		m.arrived[key] = t
	}
	m.mu.Unlock()
}

func (m *matcher) reset() {
	m.mu.Lock()
	clear(m.committed)
	clear(m.arrived)
	m.mu.Unlock()
}

func (m *matcher) matched() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k := range m.arrived {
		if _, ok := m.committed[k]; ok {
			n++
		}
	}
	return n
}

func (m *matcher) latencies() []time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []time.Duration
	for k, a := range m.arrived {
		if c, ok := m.committed[k]; ok {
			out = append(out, a.Sub(c))
		}
	}
	return out
}
