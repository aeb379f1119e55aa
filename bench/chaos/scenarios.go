package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"time"

	"github.com/notifyd/notifyd"
)

// scenarios, in table order.
var scenarios = []scenario{
	{name: "kill", base: 6 * time.Minute, run: runKill,
		what: "SIGKILL the daemon every 1-3 s during a 20k-recipient in_app + email fan-out"},
	{name: "pgrestart", base: 5 * time.Minute, run: runPGRestart,
		what: "restart PostgreSQL twice mid-run; the daemon is never restarted"},
	{name: "smtpdown", base: 5 * time.Minute, run: runSMTPDown,
		what: "SMTP sink down for 60 s then back; then one address answering 550"},
	{name: "replicas", base: 6 * time.Minute, run: runReplicas,
		what: "two daemons on one database, SIGKILLed and restarted alternately; email, webhooks and digests"},
	{name: "cancel", base: 3 * time.Minute, run: runCancel,
		what: "DELETE the notification mid fan-out; nothing sent after the cancel commits"},
	{name: "slow", base: 4 * time.Minute, run: runSlowTargets,
		what: "slow targets: three webhook URLs that never answer in a 1k-recipient email + webhook notification"},
	{name: "workflows", base: 5 * time.Minute, run: runWorkflows,
		what: "two daemons SIGKILLed alternately while batches and delayed emails are open"},
	{name: "flaky", base: 5 * time.Minute, run: runFlaky,
		what: "the network to PostgreSQL through a TCP proxy: 5 ms a read, every connection reset twice, a 10 s pause"},
	{name: "failover", base: 5 * time.Minute, run: runFailover,
		what: "primary stopped and its synchronous standby promoted mid-run; the daemon goes on through a multi-host URL"},
	{name: "upgrade", base: 6 * time.Minute, run: runUpgrade,
		what: "rolling upgrade under load: the previous release migrated by this one, restarted, side by side with it, then drained"},
	{name: "headofline", base: 6 * time.Minute, run: runHeadOfLine,
		what: "one-recipient notifications at 50/s beside a 1M-recipient in_app + email fan-out: commit → email p99 ≤ 1 s"},
	{name: "soak", base: maxSoak + 4*time.Minute, run: runSoak,
		what: "steady sends, marks and streams on two daemons (-soak long), one SIGKILLed every 40 s, PostgreSQL restarted once"},
}

// verifyReserve is the time kept back from a scenario's budget for draining
// the daemons and checking the result.
const verifyReserve = 45 * time.Second

// Send concurrency and batch of the chaos daemons. A send job sends one lane
// per target of its batch and settles each message before the lane's next,
// so a kill can duplicate at most one message per lane that was sending:
// queues.send lanes per target (queues.send_per_host, default 8, caps the
// lanes in a provider call, not those settling). The bound of the old
// batch-end settle, kills × send × batch, is printed beside it.
const (
	chaosSend      = 8
	chaosSendBatch = 10
)

// lanesBound is the most lanes of one daemon that can be between a
// provider's acceptance and the settle at once: one per send job and target.
func lanesBound(targets int) int { return chaosSend * targets }

// perKill attributes the duplicated deliveries of rec to the kills: a
// duplicate counts for the first kill at or after its first acceptance,
// marks being how many messages the sink had accepted at each kill. The last
// element counts duplicates first accepted after the last kill (zero unless
// something other than a kill duplicates).
func perKill(rec receipts, marks []int) []int {
	out := make([]int, len(marks)+1)
	first := map[string]int{}
	seen := map[string]int{}
	for i, id := range rec.order {
		if _, ok := first[id]; !ok {
			first[id] = i
		}
		seen[id]++
	}
	for id, n := range seen {
		if n < 2 {
			continue
		}
		k := sort.SearchInts(marks, first[id]+1) // the first mark past its acceptance
		out[k] += n - 1
	}
	return out
}

// noteKills records the measured duplicates per kill against the bound.
func noteKills(r *result, perKill []int, bound int) {
	var worst, total int
	for _, d := range perKill[:len(perKill)-1] {
		worst = max(worst, d)
		total += d
	}
	r.note("duplicates per kill: %v (worst %d, mean %.2f; at most %d lanes were sending), %d after the last kill",
		perKill[:len(perKill)-1], worst, float64(total)/float64(max(1, len(perKill)-1)), bound, perKill[len(perKill)-1])
	if worst > bound {
		r.fail("a kill duplicated %d messages, more than the %d lanes that can be sending at once", worst, bound)
	}
}

// killLease is retry.lease in the kill scenario: the default, so that a
// claim left by a killed daemon is re-driven only through its liveness lock.
const killLease = 5 * time.Minute

// killTerminalBound is how soon after the kill scenario's last restart every
// delivery must be terminal.
const killTerminalBound = 30 * time.Second

// runKill: SIGKILL the daemon every 1-3 s during a 20k fan-out.
func runKill(ctx context.Context, e *env, r *result, seed uint64) error {
	s, err := newStage(ctx, e, r, "kill", e.shared, seed)
	if err != nil {
		return err
	}
	defer s.close()
	n := scaled(e, 20000)
	// The production lease: a killed daemon's claims must be freed through
	// its liveness lock within seconds, not by the sweep after the lease.
	sl, err := s.oneDaemon(ctx, daemonConfig{fanoutChunk: 1000, send: chaosSend, sendBatch: chaosSendBatch,
		lease: killLease}, n)
	if err != nil {
		return err
	}
	const key = "kill-1"
	id, err := s.send(ctx, sl, key, ids(0, n))
	if err != nil {
		return err
	}
	s.logf("sent %s to %d recipients", id, n)

	done := func(snap *snapshot) bool {
		return snap.final() && snap.nonTerminal == 0 && len(snap.rows) == n && snap.inboxIDs == n
	}
	maxKills := max(3, int(10*e.opts.scale+0.5))
	kills := 0
	var lastRestart time.Time
	var marks []int // messages accepted at each kill
	for kills < maxKills {
		if !sleep(ctx, s.jitter(time.Second, 3*time.Second)) {
			break
		}
		snap, _ := s.db.snapshot(ctx, id, key)
		s.kill(sl)
		kills++
		marks = append(marks, s.mail.Count())
		if snap != nil {
			s.logf("SIGKILL #%d: notification=%s inbox=%d ledger: %s; mail accepted=%d", kills, snap.status,
				snap.inbox, snap.statuses(), s.mail.Count())
		}
		if err := s.start(ctx, sl); err != nil {
			return err
		}
		lastRestart = time.Now()
		if kills >= 3 && snap != nil && done(snap) {
			break
		}
	}
	r.note("%d SIGKILLs, 1-3 s apart; queues.send=%d, send_batch=%d, retry.lease=%s", kills, chaosSend, chaosSendBatch, killLease)
	snap, ok := s.waitFor(ctx, id, key, verifyReserve, done)
	if !ok {
		r.fail("not settled within the time budget")
	} else {
		// A killed daemon's claims are freed by its liveness lock, not by the
		// lease: every delivery is terminal soon after the last restart.
		took := time.Since(lastRestart)
		r.note("every delivery terminal %s after the last restart (bound %s)", took.Round(100*time.Millisecond), killTerminalBound)
		if took > killTerminalBound {
			r.fail("deliveries still not terminal %s after the last restart, want within %s (claims waited for the lease?)",
				took.Round(100*time.Millisecond), killTerminalBound)
		}
	}
	s.report(ctx)
	s.stopAll()
	if snap == nil {
		return fmt.Errorf("no snapshot of %s", id)
	}
	if snap, err = s.db.snapshot(context.WithoutCancel(ctx), id, key); err != nil {
		return err
	}
	rec := s.mail.receipts()
	verify(r, map[string]*snapshot{key: snap}, rec, expectation{
		inbox:        map[string]int{key: n},
		mustArrive:   func(row ledgerRow) bool { return row.channel == "email" },
		arrivals:     n,
		strictWindow: true,
		dupBound:     kills * lanesBound(1),
		boundWhy: fmt.Sprintf("%d kills × %d lanes sending email (queues.send); the batch-end settle allowed kills × send × batch = %d",
			kills, lanesBound(1), kills*chaosSend*chaosSendBatch),
	})
	noteKills(r, perKill(rec, marks), lanesBound(1))
	return nil
}

// runPGRestart: restart PostgreSQL twice while the daemon fans out and sends.
func runPGRestart(ctx context.Context, e *env, r *result, seed uint64) error {
	// A cluster of its own: restarting the shared one would disturb the
	// scenarios running beside this one.
	c, err := e.startCluster(ctx, "pg-restart")
	if err != nil {
		return err
	}
	s, err := newStage(ctx, e, r, "pgrestart", c, seed)
	if err != nil {
		return err
	}
	defer s.close()
	n := scaled(e, 6000)
	sl, err := s.oneDaemon(ctx, daemonConfig{fanoutChunk: 250, send: chaosSend, sendBatch: chaosSendBatch}, n)
	if err != nil {
		return err
	}
	daemon := sl.proc
	const key = "pgrestart-1"
	id, err := s.send(ctx, sl, key, ids(0, n))
	if err != nil {
		return err
	}

	// First restart while the fan-out is writing chunks, the second while
	// emails are going out.
	restart := func(i int, cond func(*snapshot) bool) error {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if snap, err := s.db.snapshot(ctx, id, key); err == nil && cond(snap) {
				s.logf("restart #%d: notification=%s inbox=%d ledger: %s; mail accepted=%d", i, snap.status,
					snap.inbox, snap.statuses(), s.mail.Count())
				break
			}
			if !sleep(ctx, 20*time.Millisecond) {
				return ctx.Err()
			}
		}
		t := time.Now()
		if err := c.Restart(ctx); err != nil {
			return err
		}
		r.note("PostgreSQL restart #%d (pg_ctl restart -m fast) took %s", i, time.Since(t).Round(time.Millisecond))
		return nil
	}
	if err := restart(1, func(snap *snapshot) bool { return len(snap.rows) >= n/5 }); err != nil {
		return err
	}
	if err := restart(2, func(snap *snapshot) bool { return s.mail.Count() >= n/3 }); err != nil {
		return err
	}
	snap, ok := s.waitFor(ctx, id, key, verifyReserve, func(snap *snapshot) bool {
		return snap.final() && snap.nonTerminal == 0 && len(snap.rows) == n && snap.inboxIDs == n
	})
	if !ok {
		r.fail("not settled within the time budget")
	}
	if !daemon.alive() {
		r.fail("the daemon exited (%v) instead of reconnecting; see %s", daemon.err, filepath.Join(s.dir, "daemon-a.log"))
	} else if status, _, err := call(ctx, http.MethodGet, "http://"+sl.addr+"/readyz", "", nil); err != nil || status != http.StatusOK {
		r.fail("the daemon is not ready after the restarts: %d %v", status, err)
	} else {
		r.note("the same daemon process (pid %d) reconnected and finished", daemon.cmd.Process.Pid)
	}
	s.report(ctx)
	s.stopAll()
	if snap == nil {
		return fmt.Errorf("no snapshot of %s", id)
	}
	if snap, err = s.db.snapshot(context.WithoutCancel(ctx), id, key); err != nil {
		return err
	}
	// A restart that breaks the settle after the provider accepted a message
	// is the same window as a crash: those rows are re-driven after the lease.
	verify(r, map[string]*snapshot{key: snap}, s.mail.receipts(), expectation{
		inbox:        map[string]int{key: n},
		mustArrive:   func(row ledgerRow) bool { return row.channel == "email" },
		arrivals:     n,
		strictWindow: true,
		dupBound:     2 * lanesBound(1),
		boundWhy:     fmt.Sprintf("2 restarts × %d lanes sending email (queues.send)", lanesBound(1)),
	})
	return nil
}

// runSMTPDown: the SMTP sink is down for a minute, then back; then one
// address answers 550.
func runSMTPDown(ctx context.Context, e *env, r *result, seed uint64) error {
	s, err := newStage(ctx, e, r, "smtpdown", e.shared, seed)
	if err != nil {
		return err
	}
	defer s.close()
	n := scaled(e, 2000)
	outage := time.Duration(float64(time.Minute) * e.opts.scale)
	sl, err := s.oneDaemon(ctx, daemonConfig{fanoutChunk: 1000, send: chaosSend, sendBatch: chaosSendBatch}, n+50)
	if err != nil {
		return err
	}

	s.mail.Down()
	const keyA, keyB = "smtpdown-outage", "smtpdown-550"
	idA, err := s.send(ctx, sl, keyA, ids(0, n))
	if err != nil {
		return err
	}
	if !sleep(ctx, outage) {
		return ctx.Err()
	}
	during, err := s.db.snapshot(ctx, idA, keyA)
	if err != nil {
		return err
	}
	maxAttempts := 0
	for _, row := range during.rows {
		maxAttempts = max(maxAttempts, row.attempts)
	}
	s.logf("after %s down: %s, up to %d attempts", outage, during.statuses(), maxAttempts)
	r.note("SMTP down for %s: at the end of it %s, up to %d attempts per delivery", outage, during.statuses(), maxAttempts)
	if during.byStatus["sent"] > 0 {
		r.fail("%d deliveries recorded sent while the SMTP server was down", during.byStatus["sent"])
	}
	if err := s.mail.Up(); err != nil {
		return err
	}
	up := time.Now()
	done := func(snap *snapshot) bool {
		return snap.final() && snap.nonTerminal == 0 && snap.byStatus["sent"] > 0
	}
	_, ok := s.waitFor(ctx, idA, keyA, verifyReserve+30*time.Second, func(snap *snapshot) bool {
		return done(snap) && len(snap.rows) == n
	})
	if !ok {
		r.fail("outage notification not settled within the time budget")
	} else {
		r.note("every delivery settled %s after the server came back", time.Since(up).Round(time.Second))
	}

	// One address refuses with 550: that delivery alone is refused, at once.
	bad := recipientID(n) + "@" + mailDomain
	s.mail.FailRecipient(bad, 550)
	idB, err := s.send(ctx, sl, keyB, ids(n, 50))
	if err != nil {
		return err
	}
	_, ok = s.waitFor(ctx, idB, keyB, verifyReserve, func(snap *snapshot) bool {
		return done(snap) && len(snap.rows) == 50
	})
	if !ok {
		r.fail("550 notification not settled within the time budget")
	}
	s.report(ctx)
	s.stopAll()
	bg := context.WithoutCancel(ctx)
	snapA, err := s.db.snapshot(bg, idA, keyA)
	if err != nil {
		return err
	}
	snapB, err := s.db.snapshot(bg, idB, keyB)
	if err != nil {
		return err
	}
	for _, row := range snapB.rows {
		if row.recipient != recipientID(n) || row.channel != "email" {
			continue
		}
		if row.status != string(notifyd.StatusRefused) || row.attempts != 1 {
			r.fail("the 550 delivery ended %s after %d attempts, want refused after 1 (%s)", row.status, row.attempts, row.lastError)
		} else {
			r.note("550 for %s: refused after 1 attempt (%q)", bad, row.lastError)
		}
	}
	verify(r, map[string]*snapshot{keyA: snapA, keyB: snapB}, s.mail.receipts(), expectation{
		inbox:        map[string]int{keyA: n, keyB: 50},
		mustArrive:   func(row ledgerRow) bool { return row.channel == "email" && row.recipient != recipientID(n) },
		arrivals:     n + 49,
		strictWindow: true,
		dupBound:     0,
		boundWhy:     "no crash in this scenario",
	})
	return nil
}

// runReplicas: two daemons on one database, killed and restarted
// alternately, with email, signed webhooks and digests.
func runReplicas(ctx context.Context, e *env, r *result, seed uint64) error {
	s, err := newStage(ctx, e, r, "replicas", e.shared, seed)
	if err != nil {
		return err
	}
	defer s.close()
	n, nd := scaled(e, 8000), scaled(e, 1000)
	s.hooks = newHookbox(oneIn(20, seed))
	cfg := daemonConfig{fanoutChunk: 500, send: chaosSend, sendBatch: chaosSendBatch, webhook: true}
	a, err := s.addSlot(ctx, "a", cfg)
	if err != nil {
		return err
	}
	b, err := s.addSlot(ctx, "b", cfg)
	if err != nil {
		return err
	}
	hookURL := s.hooks.srv.URL
	withHook := func(i int) string {
		if i%4 == 0 {
			return hookURL + "/hooks/" + recipientID(i)
		}
		return ""
	}
	if err := s.profiles(ctx, n, withHook); err != nil {
		return err
	}
	for _, sl := range []*slot{a, b} {
		if err := s.start(ctx, sl); err != nil {
			return err
		}
	}
	const key = "replicas-1"
	id, err := s.send(ctx, a, key, ids(0, n))
	if err != nil {
		return err
	}
	// Two digest notifications to the first nd recipients, one through each
	// replica: each recipient's rows are due at the next minute (or, when
	// the minute turns between them, the one after), one digest per instant.
	digestKeys := []string{"replicas-digest-1", "replicas-digest-2"}
	var digestIDs []string
	for i, k := range digestKeys {
		did, err := s.sendAs(ctx, []*slot{a, b}[i], digestNotifier, k, ids(0, nd))
		if err != nil {
			return err
		}
		digestIDs = append(digestIDs, did)
	}
	done := func(snap *snapshot) bool {
		return snap.final() && snap.nonTerminal == 0 && len(snap.rows) == 2*n && snap.inboxIDs == n
	}
	digestsDone := func(snap *snapshot) bool {
		return snap.final() && snap.nonTerminal == 0 && len(snap.rows) == nd && snap.inboxIDs == nd
	}
	maxKills := max(4, int(10*e.opts.scale+0.5))
	kills := 0
	for kills < maxKills {
		if !sleep(ctx, s.jitter(time.Second, 3*time.Second)) {
			break
		}
		sl := a
		if kills%2 == 1 {
			sl = b
		}
		snap, _ := s.db.snapshot(ctx, id, key)
		s.kill(sl)
		kills++
		if snap != nil {
			s.logf("SIGKILL #%d (%s): notification=%s inbox=%d ledger: %s; mail=%d", kills, sl.name, snap.status,
				snap.inbox, snap.statuses(), s.mail.Count())
		}
		if err := s.start(ctx, sl); err != nil {
			return err
		}
		if kills >= 4 && snap != nil && done(snap) {
			break
		}
	}
	r.note("%d SIGKILLs alternating between 2 daemons; 1 in 20 webhooks answered 503 once", kills)
	snap, ok := s.waitFor(ctx, id, key, verifyReserve, done)
	if !ok {
		r.fail("not settled within the time budget")
	}
	for i, did := range digestIDs {
		if _, ok := s.waitFor(ctx, did, digestKeys[i], verifyReserve, digestsDone); !ok {
			r.fail("%s: digests not all sent within the time budget", digestKeys[i])
		}
	}
	s.report(ctx)
	s.stopAll()
	if snap == nil {
		return fmt.Errorf("no snapshot of %s", id)
	}
	bg := context.WithoutCancel(ctx)
	if snap, err = s.db.snapshot(bg, id, key); err != nil {
		return err
	}
	rec := s.mail.receipts()
	hooks := s.hooks.receipts()
	rec.order = append(rec.order, hooks.order...)
	rec.foreign += hooks.foreign
	if bad := s.hooks.badSignatures(); bad > 0 {
		r.fail("%d webhooks failed signature verification", bad)
	}
	verify(r, map[string]*snapshot{key: snap}, rec, expectation{
		inbox: map[string]int{key: n},
		mustArrive: func(row ledgerRow) bool {
			if row.channel == "webhook" {
				var i int
				_, _ = fmt.Sscanf(row.recipient, "r%06d", &i)
				return i%4 == 0
			}
			return row.channel == "email"
		},
		arrivals:     n + (n+3)/4,
		strictWindow: true,
		dupBound:     kills * lanesBound(2),
		boundWhy: fmt.Sprintf("%d kills × %d lanes (queues.send × two targets: the SMTP relay and the webhook host); the batch-end settle allowed kills × send × batch = %d",
			kills, lanesBound(2), kills*chaosSend*chaosSendBatch),
	})
	r.note("duplicates per kill: %.2f on average (at most %d lanes of the killed daemon were sending)",
		float64(r.duplicates)/float64(max(1, kills)), lanesBound(2))
	for i, did := range digestIDs {
		ds, err := s.db.snapshot(bg, did, digestKeys[i])
		if err != nil {
			return err
		}
		r.nonTerminal += ds.nonTerminal
		if ds.inboxIDs != nd || ds.inbox != nd {
			r.fail("%s: %d inbox items for %d recipients, want %d", digestKeys[i], ds.inbox, ds.inboxIDs, nd)
		}
	}
	// One digest job at a time per replica (queues.digest 1): a kill can
	// leave at most one accepted, unsettled digest behind per replica.
	r.digests = verifyDigests(bg, r, s.db, digestIDs, rec.digests, kills)
	return nil
}

// cancelAfter is what the cancel scenario keeps back from its budget for what
// follows the cancel: its answer (up to 11 s seen on a loaded machine), the
// deliveries claimed before it settling (a few seconds), then the drain and
// the checks (verifyReserve).
const cancelAfter = verifyReserve + 30*time.Second

// runCancel: cancel a notification mid fan-out; nothing may be sent after the
// cancel commits except deliveries already claimed then.
func runCancel(ctx context.Context, e *env, r *result, seed uint64) error {
	s, err := newStage(ctx, e, r, "cancel", e.shared, seed)
	if err != nil {
		return err
	}
	defer s.close()
	n := scaled(e, 20000)
	const chunk = 500
	setup := time.Now()
	sl, err := s.oneDaemon(ctx, daemonConfig{fanoutChunk: chunk, send: chaosSend, sendBatch: chaosSendBatch}, n)
	if err != nil {
		return err
	}
	const key = "cancel-1"
	sent := time.Now()
	id, err := s.send(ctx, sl, key, ids(0, n))
	if err != nil {
		return err
	}
	// Wait for the fan-out to be a few chunks in, and still going. Only what
	// follows the cancel is kept back from the budget; the wait itself ends
	// on the ledger (waitFanout), however long the setup took.
	target := min(3*chunk, n/2)
	written, status, err := s.waitFanout(ctx, id, target, cancelAfter)
	if err != nil {
		return err
	}
	r.note("setup (migration, %d profiles, daemon) took %s; the fan-out wrote %d deliveries %s after the send",
		n, sent.Sub(setup).Round(100*time.Millisecond), written, time.Since(sent).Round(100*time.Millisecond))
	if status != string(notifyd.NotificationPending) {
		r.note("the fan-out was %s when the cancel was sent; the race it probes did not happen", status)
	}
	// Three deliveries already claimed when the cancel commits fail after it
	// (their end of DATA stalls past the cancel, then answers 451): such a
	// delivery must settle without being tried again.
	s.mail.HangNext(3, 2*time.Second)
	s.mail.FailNext(3, 451, "try again later")
	start := time.Now()
	withdrawn, err := s.cancel(ctx, sl, key)
	if err != nil {
		return err
	}
	took := time.Since(start)
	n0 := s.mail.Count()
	after, err := s.db.snapshot(ctx, id, key)
	if err != nil {
		return err
	}
	attemptsAtCancel := map[string]int{}
	for _, row := range after.rows {
		attemptsAtCancel[row.id] = row.attempts
	}
	claimable := after.byStatus["pending"] + after.byStatus["failed"] + after.byStatus["rate_limited"]
	r.note("cancel answered %d withdrawn in %s with %d of %d deliveries written; right after: notification=%s %s, inbox items left %d",
		withdrawn, took.Round(time.Millisecond), written, n, after.status, after.statuses(), after.inbox)
	if claimable > 0 {
		r.fail("%d deliveries were left claimable (pending/failed) by the cancel", claimable)
	}
	_, ok := s.waitFor(ctx, id, key, verifyReserve, func(snap *snapshot) bool {
		return snap.final() && snap.nonTerminal == 0
	})
	if !ok {
		r.fail("not settled within the time budget")
	}
	sleep(ctx, 3*time.Second) // a send job still running would show now
	s.report(ctx)
	s.stopAll()
	snap, err := s.db.snapshot(context.WithoutCancel(ctx), id, key)
	if err != nil {
		return err
	}
	if snap.status != string(notifyd.NotificationCancelled) {
		r.fail("notification is %s, want cancelled", snap.status)
	}
	if snap.inbox > 0 {
		r.fail("%d inbox items survived the cancel", snap.inbox)
	}
	// Every claim after the cancel committed shows as attempts grown since the
	// snapshot taken right after it (or a row the snapshot did not have).
	statusAtCancel := map[string]string{}
	for _, row := range after.rows {
		statusAtCancel[row.id] = row.status
	}
	reclaimed := map[string]int{} // by status right after the cancel
	for _, row := range snap.rows {
		if a, ok := attemptsAtCancel[row.id]; !ok || row.attempts > a {
			was, ok := statusAtCancel[row.id]
			if !ok {
				was = "not yet written"
			}
			reclaimed[was]++
		}
	}
	if len(reclaimed) > 0 {
		r.fail("deliveries claimed after the cancel committed, by their status right after it: %v", reclaimed)
		if reclaimed["sending"] > 0 {
			r.note("the `sending` ones were claimed before the cancel, failed temporarily after it and were retried: nothing stops a retry of a cancelled notification")
		}
		if reclaimed["pending"] > 0 {
			r.note("the `pending` ones were written by a fan-out chunk the cancel did not see")
		}
	}
	// Every message accepted after the cancel answered must belong to a
	// delivery that was already claimed (sending) when it committed. The
	// snapshot is read after the answer, and a message in flight at the
	// commit may have been accepted and settled `sent` in between (outcomes
	// are settled as they happen): a `sent` row was claimed before the cancel
	// too, since a claim after it records `cancelled` instead (and a claim
	// after it shows as attempts grown, checked above).
	rec := s.mail.receipts()
	var late int
	sendingAtCancel := map[string]bool{}
	for _, row := range after.rows {
		if row.status == string(notifyd.StatusSending) || row.status == string(notifyd.StatusSent) {
			sendingAtCancel[row.id] = true
		}
	}
	for i, did := range rec.order {
		if i >= n0 && !sendingAtCancel[did] {
			late++
		}
	}
	if late > 0 {
		r.fail("%d messages accepted after the cancel committed for deliveries not claimed before it", late)
	}
	r.note("%d messages accepted before the cancel answered, %d after (%d sending or sent right after it)", min(n0, len(rec.order)),
		max(0, len(rec.order)-n0), len(sendingAtCancel))
	verify(r, map[string]*snapshot{key: snap}, rec, expectation{
		inbox:        map[string]int{},
		strictWindow: true,
		dupBound:     0,
		boundWhy:     "no crash in this scenario",
	})
	return nil
}
