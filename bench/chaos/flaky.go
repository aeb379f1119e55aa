package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"time"
)

// runFlaky: the daemon reaches PostgreSQL through a TCP proxy the scenario
// controls. During a 4,000-recipient in_app + email fan-out every read is
// delayed 5 ms, then every connection is reset mid-transaction (twice), then
// nothing moves for 10 s. Afterwards: nothing lost (one inbox item each, every
// delivery terminal, every email received), duplicates bounded by the
// messages in flight at each break, the same process ready within 5 s of the
// network coming back.
func runFlaky(ctx context.Context, e *env, r *result, seed uint64) error {
	c, err := e.startCluster(ctx, "pg-flaky")
	if err != nil {
		return err
	}
	s, err := newStage(ctx, e, r, "flaky", c, seed)
	if err != nil {
		return err
	}
	defer s.close()
	// The proxy forwards to the server's Unix socket, named by its URL.
	u, err := url.Parse(s.db.url)
	if err != nil {
		return err
	}
	q := u.Query()
	proxy, err := newNetProxy(filepath.Join(q.Get("host"), ".s.PGSQL."+q.Get("port")))
	if err != nil {
		return err
	}
	defer proxy.Close()
	via := url.URL{Scheme: "postgres", User: u.User, Host: "127.0.0.1:" + strconv.Itoa(proxy.Addr().Port),
		Path: u.Path, RawQuery: "sslmode=disable"}

	n := scaled(e, 4000)
	sl, err := s.oneDaemon(ctx, daemonConfig{dbURL: via.String(), fanoutChunk: 250, send: chaosSend, sendBatch: chaosSendBatch}, n)
	if err != nil {
		return err
	}
	daemon := sl.proc
	const key = "flaky-1"
	proxy.SetDelay(5 * time.Millisecond)
	id, err := s.send(ctx, sl, key, ids(0, n))
	if err != nil {
		return err
	}

	// waitState polls the database directly (not through the proxy).
	waitState := func(what string, cond func(*snapshot) bool) error {
		deadline := time.Now().Add(90 * time.Second)
		for {
			if snap, err := s.db.snapshot(ctx, id, key); err == nil && cond(snap) {
				s.logf("%s: notification=%s inbox=%d ledger: %s; mail accepted=%d", what, snap.status,
					snap.inbox, snap.statuses(), s.mail.Count())
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: the state never came within 90 s (mail accepted=%d)", what, s.mail.Count())
			}
			if !sleep(ctx, 20*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	if err := waitState("reset #1 (fan-out writing)", func(snap *snapshot) bool { return len(snap.rows) >= n/5 }); err != nil {
		return err
	}
	r.note("reset #1 while the fan-out writes: %d connections reset", proxy.ResetAll())
	if err := waitState("reset #2 (emails going out)", func(*snapshot) bool { return s.mail.Count() >= n/4 }); err != nil {
		return err
	}
	r.note("reset #2 while emails go out: %d connections reset", proxy.ResetAll())
	if err := waitState("pause (emails going out)", func(*snapshot) bool { return s.mail.Count() >= n/2 }); err != nil {
		return err
	}
	proxy.Pause()
	atPause := s.mail.Count()
	if !sleep(ctx, 10*time.Second) { // the outage itself: its length is the scenario
		return ctx.Err()
	}
	proxy.SetDelay(0)
	proxy.Resume()
	back := time.Now()
	// Ready again: /readyz answers 200 and emails flow again.
	var readyIn time.Duration
	for readyIn == 0 {
		status, _, err := call(ctx, http.MethodGet, "http://"+sl.addr+"/readyz", "", nil)
		if err == nil && status == http.StatusOK && s.mail.Count() > atPause {
			readyIn = time.Since(back)
			break
		}
		if time.Since(back) > 60*time.Second {
			break
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	switch {
	case readyIn == 0:
		r.fail("the daemon was not ready and sending within 60 s of the network coming back")
	case readyIn > 5*time.Second:
		r.fail("ready and sending %s after the network came back, want within 5 s", readyIn.Round(time.Millisecond))
	default:
		r.note("ready and sending %s after the 10 s pause ended", readyIn.Round(time.Millisecond))
	}

	snap, ok := s.waitFor(ctx, id, key, verifyReserve, func(snap *snapshot) bool {
		return snap.final() && snap.nonTerminal == 0 && len(snap.rows) == n && snap.inboxIDs == n
	})
	if !ok {
		r.fail("not settled within the time budget")
	}
	if !daemon.alive() {
		r.fail("the daemon exited (%v) instead of reconnecting; see %s", daemon.err, filepath.Join(s.dir, "daemon-a.log"))
	}
	s.report(ctx)
	s.stopAll()
	if snap == nil {
		return fmt.Errorf("no snapshot of %s", id)
	}
	if snap, err = s.db.snapshot(context.WithoutCancel(ctx), id, key); err != nil {
		return err
	}
	verify(r, map[string]*snapshot{key: snap}, s.mail.receipts(), expectation{
		inbox:        map[string]int{key: n},
		mustArrive:   func(row ledgerRow) bool { return row.channel == "email" },
		arrivals:     n,
		strictWindow: true,
		dupBound:     3 * lanesBound(1),
		boundWhy:     fmt.Sprintf("2 resets and a pause × %d lanes sending email (queues.send)", lanesBound(1)),
	})
	return nil
}
