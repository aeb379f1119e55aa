package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

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
	lat, m, err := measureMailLatency(ctx, h, n, rate)
	if err != nil {
		return []Result{
			errorResult("commit → email accepted p50", "ms", "<=", 1000, "absolute", err),
			errorResult("commit → email accepted p99", "ms", "<=", 1000, "absolute", err),
		}
	}
	p50, p99 := quantile(lat, 0.50), quantile(lat, 0.99)
	fmt.Printf("  commit → email accepted: p50 %.1f ms, p99 %.1f ms (%s)\n", p50, p99, m.note)
	return []Result{
		annotate(absoluteResult("commit → email accepted p50", "ms", p50, "<=", 1000), n, m, nil),
		annotate(absoluteResult("commit → email accepted p99", "ms", p99, "<=", 1000), n, m, nil),
	}
}

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

	stopProf := h.prof.start(ctx, "maillatency", db.Name)
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
	return lat, measurement{seconds: sending.Seconds(), cpu: cpu, note: note}, nil
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
