package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notifyd/notifyd"
)

// Soak scenario settings. The duration is -soak (default defaultSoak, at
// most maxSoak); everything else scales with it.
const (
	defaultSoak = 4 * time.Minute
	maxSoak     = 10 * time.Minute
	// soakRecipients get every notification; soakStreams of them keep an
	// inbox stream open (reconnecting when their daemon dies).
	soakRecipients = 50
	soakStreams    = 10
	// soakSendEvery is the pace of notifications (in_app + email to every
	// recipient); every soakMarkEvery one, each recipient marks its inbox
	// read.
	soakSendEvery = 250 * time.Millisecond
	soakMarkEvery = 4
	// soakKillEvery is how often daemon b is SIGKILLed and restarted;
	// daemon a lives for the whole run, so its RSS tells a leak.
	soakKillEvery = 40 * time.Second
)

// runSoak: steady sends, marks and streams for the soak duration on two
// daemons, with daemon b SIGKILLed every soakKillEvery and PostgreSQL
// restarted once half way. At the end nothing is lost, duplicates stay within
// the kills' and the restart's crash windows, and daemon a's RSS and the
// database's connections are about as high in the last minute as in the
// first (reported; a growth beyond the bounds fails).
func runSoak(ctx context.Context, e *env, r *result, seed uint64) error {
	c, err := e.startCluster(ctx, "soak")
	if err != nil {
		return err
	}
	s, err := newStage(ctx, e, r, "soak", c, seed)
	if err != nil {
		return err
	}
	defer s.close()
	dur := e.opts.soak
	cfg := daemonConfig{fanoutChunk: 100, send: chaosSend, sendBatch: chaosSendBatch}
	a, err := s.addSlot(ctx, "a", cfg)
	if err != nil {
		return err
	}
	b, err := s.addSlot(ctx, "b", cfg)
	if err != nil {
		return err
	}
	if err := s.profiles(ctx, soakRecipients, nil); err != nil {
		return err
	}
	for _, sl := range []*slot{a, b} {
		if err := s.start(ctx, sl); err != nil {
			return err
		}
	}
	recipients := ids(0, soakRecipients)

	// Samples, once a second: daemon a's RSS and the database's connections.
	var samples soakSamples
	sctx, stopSampling := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { // on every path: stop the samplers and streams, then wait for them
		stopSampling()
		bg.Wait()
	}()
	bg.Go(func() { samples.run(sctx, s, a) })
	// Streams: each reconnects to a live daemon when its connection ends.
	var events atomic.Int64
	for i := range soakStreams {
		bg.Go(func() { soakStream(sctx, []*slot{a, b}[i%2], recipients[i], &events) })
	}

	start := time.Now()
	var keys []string
	var kills, marks, sendErrors int
	lastKill, restarted := start, false
	tick := time.NewTicker(soakSendEvery)
	for time.Since(start) < dur && ctx.Err() == nil {
		<-tick.C
		// Sends go through a, which is never killed; b works on them too.
		key := fmt.Sprintf("soak-%d", len(keys))
		if _, err := s.send(ctx, a, key, recipients); err != nil {
			// PostgreSQL restarting: the API answers 5xx for a moment.
			sendErrors++
			continue
		}
		keys = append(keys, key)
		if len(keys)%soakMarkEvery == 0 {
			for _, rcp := range recipients[:soakRecipients/2] {
				tok, _ := notifyd.RecipientToken(tokenSecret, rcp, time.Hour)
				if st, _, err := call(ctx, http.MethodPost, "http://"+a.addr+"/v1/inbox/read", tok, []byte(`{"all":true}`)); err == nil && st == http.StatusOK {
					marks++
				}
			}
		}
		if time.Since(lastKill) >= soakKillEvery {
			s.kill(b)
			kills++
			if err := s.start(ctx, b); err != nil {
				return err
			}
			lastKill = time.Now()
		}
		if !restarted && time.Since(start) >= dur/2 {
			t := time.Now()
			if err := c.Restart(ctx); err != nil {
				return err
			}
			restarted = true
			r.note("PostgreSQL restarted at %s (took %s)", time.Since(start).Round(time.Second), time.Since(t).Round(time.Millisecond))
		}
	}
	tick.Stop()
	r.note("%s: %d notifications to %d recipients (in_app + email), %d inbox marks, %d streams (%d events), %d SIGKILLs of b, %d sends refused during the restart",
		time.Since(start).Round(time.Second), len(keys), soakRecipients, marks, soakStreams, events.Load(), kills, sendErrors)

	// Settled: every notification fanned out and every delivery terminal.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var left int
		err := s.db.pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM notify_notifications WHERE status NOT IN ('fanned_out', 'cancelled', 'rejected'))
  + (SELECT count(*) FROM notify_deliveries WHERE status NOT IN ('sent', 'refused', 'expired', 'unavailable', 'cancelled', 'skipped'))`).Scan(&left)
		if err == nil && left == 0 {
			break
		}
		if time.Now().After(deadline) || !sleep(ctx, 500*time.Millisecond) {
			r.fail("not settled 2 minutes after the last send (%d left, %v)", left, err)
			break
		}
	}
	stopSampling()
	bg.Wait()
	samples.report(r)
	s.report(ctx)
	s.stopAll()

	snaps := map[string]*snapshot{}
	inbox := map[string]int{}
	wctx := context.WithoutCancel(ctx)
	for _, key := range keys {
		var id string
		if err := s.db.pool.QueryRow(wctx, `SELECT id::text FROM notify_notifications WHERE notifier = $1 AND key = $2`,
			notifierName, key).Scan(&id); err != nil {
			return fmt.Errorf("notification %s: %w", key, err)
		}
		snap, err := s.db.snapshot(wctx, id, key)
		if err != nil {
			return err
		}
		snaps[key], inbox[key] = snap, soakRecipients
	}
	crashes := kills + 1 // the kills and the restart
	verify(r, snaps, s.mail.receipts(), expectation{
		inbox:        inbox,
		mustArrive:   func(row ledgerRow) bool { return row.channel == "email" },
		arrivals:     len(keys) * soakRecipients,
		strictWindow: true,
		dupBound:     crashes * lanesBound(1),
		boundWhy:     fmt.Sprintf("(%d kills + 1 restart) × %d lanes sending email", kills, lanesBound(1)),
	})
	return nil
}

// soakStream keeps recipient's inbox stream open on sl's daemon, counting
// the events it reads, until ctx ends; a connection that ends (its daemon
// was killed, PostgreSQL restarted) is made again after a moment.
func soakStream(ctx context.Context, sl *slot, recipient string, events *atomic.Int64) {
	for ctx.Err() == nil {
		tok, _ := notifyd.RecipientToken(tokenSecret, recipient, time.Hour)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+sl.addr+"/v1/inbox/stream", nil)
		if err == nil {
			req.Header.Set("Authorization", "Bearer "+tok)
			// No client timeout: the stream lives until the daemon or ctx ends it.
			var resp *http.Response
			if resp, err = http.DefaultClient.Do(req); err == nil {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "event:") {
						events.Add(1)
					}
				}
				resp.Body.Close()
			}
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return
		}
	}
}

// soakSamples are the per-second samples of a soak run.
type soakSamples struct {
	mu    sync.Mutex
	at    []time.Duration
	rss   []int64 // daemon a's resident set, KiB
	conns []int   // connections to the scenario's database
}

func (m *soakSamples) run(ctx context.Context, s *stage, a *slot) {
	start := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		p := a.proc
		s.mu.Unlock()
		rss := rssKiB(p.cmd.Process.Pid)
		var conns int
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		err := s.db.pool.QueryRow(qctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&conns)
		cancel()
		if rss <= 0 || err != nil {
			continue // PostgreSQL restarting: no sample
		}
		m.mu.Lock()
		m.at, m.rss, m.conns = append(m.at, time.Since(start)), append(m.rss, rss), append(m.conns, conns)
		m.mu.Unlock()
	}
}

// report notes daemon a's RSS and the connections, first minute against
// last, and fails a growth past the bounds: RSS more than 1.5× and 64 MiB
// more, connections more than 1.5× and 10 more. With a run shorter than two
// minutes the windows are its first and last thirds.
func (m *soakSamples) report(r *result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.at) < 6 {
		r.fail("soak: only %d samples of RSS and connections", len(m.at))
		return
	}
	total := m.at[len(m.at)-1]
	window := min(time.Minute, total/3)
	var rssFirst, rssLast, connFirst, connLast []float64
	for i, at := range m.at {
		switch {
		case at <= window:
			rssFirst, connFirst = append(rssFirst, float64(m.rss[i])), append(connFirst, float64(m.conns[i]))
		case at >= total-window:
			rssLast, connLast = append(rssLast, float64(m.rss[i])), append(connLast, float64(m.conns[i]))
		}
	}
	rf, rl, cf, cl := mean(rssFirst)/1024, mean(rssLast)/1024, mean(connFirst), mean(connLast)
	r.note("daemon a RSS %.0f MiB in the first %s, %.0f MiB in the last; database connections %.1f, then %.1f",
		rf, window.Round(time.Second), rl, cf, cl)
	if rl > 1.5*rf && rl-rf > 64 {
		r.fail("daemon a's RSS grew from %.0f to %.0f MiB", rf, rl)
	}
	if cl > 1.5*cf && cl-cf > 10 {
		r.fail("database connections grew from %.1f to %.1f", cf, cl)
	}
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var t float64
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

// rssKiB reads a process's resident set size (VmRSS) from /proc; 0 where
// there is no /proc or the process is gone.
func rssKiB(pid int) int64 {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}
