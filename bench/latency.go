package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/server"
)

// latencyRecipient is the one recipient whose stream is watched.
const latencyRecipient = "latency-user"

// runLatency is scenario 4: the daemon runs in this process with its HTTP API
// on 127.0.0.1; an SSE client follows /v1/inbox/stream for one recipient while
// n notifications to that recipient are sent at rate per second; each latency
// is from the return of COMMIT (SendTx's transaction) to the arrival of the
// item's inbox.created event.
func runLatency(ctx context.Context, h *harness, n int, rate float64) []Result {
	lat, m, err := measureLatency(ctx, h, n, rate)
	if err != nil {
		return []Result{
			errorResult("stream latency p50", "ms", "<=", 20, "absolute", err),
			errorResult("stream latency p99", "ms", "<=", 100, "absolute", err),
		}
	}
	p50, p99 := quantile(lat, 0.50), quantile(lat, 0.99)
	fmt.Printf("  commit → inbox.created: p50 %.1f ms, p99 %.1f ms (%s)\n", p50, p99, m.note)
	return []Result{
		annotate(absoluteResult("stream latency p50", "ms", p50, "<=", 20), n, m, nil),
		annotate(absoluteResult("stream latency p99", "ms", p99, "<=", 100), n, m, nil),
	}
}

// quantile returns the q-quantile of sorted latencies, in milliseconds.
func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(q*float64(len(sorted)-1)+0.5)]) / float64(time.Millisecond)
}

func measureLatency(ctx context.Context, h *harness, n int, rate float64) ([]time.Duration, measurement, error) {
	db, pool, closeDB, err := h.openDB(ctx, "latency", 4)
	if err != nil {
		return nil, measurement{}, err
	}
	defer closeDB()
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return nil, measurement{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, measurement{}, err
	}
	d, err := startDaemon(ctx, cfg, server.Options{Listener: ln}, h.logger)
	if err != nil {
		ln.Close()
		return nil, measurement{}, err
	}
	defer d.stop()
	base := "http://" + d.Addr()
	token, err := notifyd.RecipientToken(tokenSecret, latencyRecipient, time.Hour)
	if err != nil {
		return nil, measurement{}, err
	}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &latencyStream{matcher: matcher{committed: map[string]time.Time{}, arrived: map[string]time.Time{}}, ready: make(chan struct{})}
	streamErr := make(chan error, 1)
	go func() { streamErr <- st.follow(sctx, base+"/v1/inbox/stream", token) }()
	select {
	case <-st.ready:
	case err := <-streamErr:
		return nil, measurement{}, fmt.Errorf("stream: %w", err)
	case <-time.After(30 * time.Second):
		return nil, measurement{}, fmt.Errorf("stream: no counts event within 30s")
	}
	time.Sleep(300 * time.Millisecond)

	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	h.waitQuiet(ctx)
	stopProf := h.prof.start(ctx, "latency", db.Name, n, "send")
	defer stopProf()
	cpu0 := h.cpu()
	sending, err := paced(ctx, n, rate, func(i int) error {
		key := fmt.Sprintf("latency-%05d", i)
		_, committed, err := sendCommitted(ctx, pool, client, notifyd.Notification{Notifier: notifierInApp, Key: key,
			Recipients: []notifyd.Recipient{{ID: latencyRecipient}}, Params: benchParams}, nil)
		if err == nil {
			st.commit(key, committed)
		}
		return err
	})
	if err != nil {
		return nil, measurement{}, err
	}
	if _, err := waitUntil(ctx, 10*time.Millisecond, 30*time.Second, func() (bool, error) {
		select {
		case err := <-streamErr:
			return false, fmt.Errorf("stream ended: %w", err)
		default:
		}
		return st.matched() >= n, nil
	}); err != nil {
		return nil, measurement{}, fmt.Errorf("%d of %d events arrived: %w", st.matched(), n, err)
	}
	cpu := h.cpu().sub(cpu0)
	lat := st.latencies()
	slices.Sort(lat)
	note := fmt.Sprintf("%d sends at %.0f/s over %.1fs, max %.1f ms, %s", n, rate, sending.Seconds(),
		float64(lat[len(lat)-1])/float64(time.Millisecond), cpu)
	return lat, measurement{seconds: sending.Seconds(), cpu: cpu, note: note}, nil
}

// latencyStream follows one SSE stream and matches inbox.created events to
// commits by notification key, in whichever order the two are recorded.
type latencyStream struct {
	ready     chan struct{}
	readyOnce sync.Once

	matcher // commits and arrivals by notification key
}

// follow reads the stream until ctx ends.
func (s *latencyStream) follow(ctx context.Context, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			s.dispatch(event, data)
			event, data = "", ""
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	return sc.Err()
}

func (s *latencyStream) dispatch(event, data string) {
	now := time.Now()
	switch event {
	case "counts":
		s.readyOnce.Do(func() { close(s.ready) })
	case "inbox.created":
		var item struct {
			Key string `json:"key"`
		}
		if json.Unmarshal([]byte(data), &item) != nil {
			return
		}
		s.arrive(item.Key, now)
	}
}
