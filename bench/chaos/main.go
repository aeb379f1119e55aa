// Command chaos runs notifyd's fault-injection scenarios (the README's guarantees and docs/security.md)
// end to end, with real processes, and prints one table:
//
//	go run ./bench/chaos [-seed N] [-scale F] [-soak D] [-run kill,pgrestart,...] [-sequential] [-keep]
//
// Each scenario builds what production has: the notifyd binary (built once
// from ./cmd/notifyd, run as `notifyd run` subprocesses), a private
// PostgreSQL (internal/pgcluster), and, in this process, an SMTP sink
// (internal/smtpcapture) and a webhook receiver (net/http/httptest) that record
// every message they accept. Duplicates are counted by the idempotency
// handle every outbound message carries: the email Message-ID and the
// webhook-id, both the delivery id. All traffic stays on
// 127.0.0.1 and Unix sockets.
//
// Scenarios (recipient counts and the SMTP outage are multiplied by -scale):
//
//   - kill: SIGKILL the daemon every 1–3 s (seeded) during a 20k-recipient
//     fan-out with in_app + email and restart it each time; afterwards exactly
//     one inbox item per recipient, every delivery terminal, every email
//     received at least once, duplicates only on deliveries the retry sweep
//     re-drove and at most one per send lane per kill (kills × queues.send:
//     each outcome is settled before the lane's next send), with the
//     measured duplicates per kill printed.
//   - pgrestart: a private cluster restarted (fast mode) twice mid-run; the
//     same daemon process reconnects and finishes.
//   - smtpdown: the SMTP sink down for 60 s, then back: everything sent after
//     recovery; then one address answering 550: only that delivery refused,
//     after one attempt.
//   - replicas: two daemons on one database, killed and restarted
//     alternately, email + signed webhooks (a few answered 503 once) + two
//     digest notifications: no duplicate outside the crash window, exactly
//     one digest per recipient per due instant (the digests column is
//     received digests / (recipient, due instant) pairs).
//   - cancel: DELETE /v1/notifications/{notifier}/{key} mid fan-out: no
//     message accepted after the cancel committed unless its delivery was
//     already claimed, nothing left claimable, no inbox item left.
//   - slow: slow targets. Three recipients' webhook_url on a host that takes
//     requests and never answers, beside 1k emails and healthy webhooks in
//     the same notification: every other message arrives before the first
//     hung request times out, the hung deliveries fail and are retried or
//     parked by their host's breaker, no send job runs much past the
//     webhook timeout, and once the host answers they are sent, once each
//     (this daemon's retry.lease is 2 minutes, longer than a hung call).
//   - soak: for -soak (default 4m, at most 10m), steady sends (in_app + email
//     to 50 recipients, 4 a second), inbox marks and 10 open inbox streams on
//     two daemons; b is SIGKILLed and restarted every 40 s and PostgreSQL
//     restarted once half way. Nothing lost, duplicates only within the
//     crash windows, and daemon a's RSS and the database's connections in
//     the last minute against the first (reported; a growth past 1.5× fails).
//   - workflows: two daemons SIGKILLed alternately while batched
//     notifications keep opening and joining batches (window 3s) and
//     delayed emails (2s, unless read, half of them read) wait: every
//     member in exactly one batch and counted once, every batched delivery
//     carried by a sent one, every sent email received, no skipped email
//     whose item was unread, duplicates only within the kills' window.
//
// Each daemon runs with retry.lease 5s (but see slow; kill runs with the default 5m, so
// that a killed daemon's claims are freed only through its liveness lock, and
// asserts every delivery terminal within 30 s of the last restart), retry.sweep and digest.sweep
// "@every 5s" (the config accepts robfig/cron descriptors; both sweep jobs
// are River-unique ByPeriod one minute, so each still runs at most once a
// minute) and digest.schedule "* * * * *" (a digest is due every minute).
//
// The verdict fails on any lost message or inbox item, any non-terminal
// delivery, and duplicates beyond the crash window; the process exits 1 when
// a scenario fails. The jobs a killed daemon left `running` are the daemons'
// own to rescue (their liveness locks: docs/operations.md, "When a replica
// dies"); the notes list any still running at the end.
//
// The harness reads the ledger with its own SQL (verify.go): it is a test
// that asserts rows, not part of the product, so it does not go through
// stores.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

// options are the command-line flags.
type options struct {
	seed       int64
	scale      float64
	only       map[string]bool
	sequential bool
	keep       bool
	verbose    bool
	soak       time.Duration
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var only string
	fs.Int64Var(&o.seed, "seed", 0, "random seed for kill timing and choices (0: from the clock; printed)")
	fs.Float64Var(&o.scale, "scale", 1, "multiply recipient counts, kills and the SMTP outage (1: default run, under 10 minutes)")
	fs.StringVar(&only, "run", "", "comma-separated scenarios to run (default all): "+strings.Join(scenarioNames(), ","))
	fs.BoolVar(&o.sequential, "sequential", false, "run scenarios one after the other (default: concurrently, each on its own database)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (daemon and PostgreSQL logs) even when every scenario passes")
	fs.BoolVar(&o.verbose, "v", false, "print progress every few seconds")
	fs.DurationVar(&o.soak, "soak", defaultSoak, "how long the soak scenario sends (at most 10m)")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if o.scale <= 0 {
		return 2, errors.New("-scale must be positive")
	}
	if o.soak < 10*time.Second || o.soak > maxSoak {
		return 2, fmt.Errorf("-soak must be between 10s and %s", maxSoak)
	}
	if o.seed == 0 {
		o.seed = time.Now().UnixNano()
	}
	var selected []scenario
	if only != "" {
		o.only = map[string]bool{}
		for _, n := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(n)] = true
		}
	}
	for _, s := range scenarios {
		if o.only == nil || o.only[s.name] {
			selected = append(selected, s)
			delete(o.only, s.name)
		}
	}
	for n := range o.only {
		return 2, fmt.Errorf("-run: unknown scenario %q (have %s)", n, strings.Join(scenarioNames(), ", "))
	}

	start := time.Now()
	fmt.Fprintf(stdout, "chaos: seed=%d scale=%g scenarios=%s\n", o.seed, o.scale, strings.Join(namesOf(selected), ","))
	e, err := newEnv(ctx, o, stderr)
	if err != nil {
		return 2, err
	}
	results := make([]*result, len(selected))
	runOne := func(i int) {
		s := selected[i]
		r := &result{name: s.name, digests: "n/a"}
		results[i] = r
		sctx, cancel := context.WithTimeout(ctx, s.budget(o.scale))
		defer cancel()
		e.logf(s.name, "start: %s", s.what)
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.fail("harness panic: %v", v)
				}
			}()
			if err := s.run(sctx, e, r, seedFor(o.seed, s.name)); err != nil {
				r.fail("harness error: %v", err)
			}
		}()
		e.logf(s.name, "done: %s (%s)", r.verdict(), time.Since(start).Round(time.Second))
	}
	if o.sequential {
		for i := range selected {
			runOne(i)
		}
	} else {
		var wg sync.WaitGroup
		for i := range selected {
			wg.Go(func() { runOne(i) })
		}
		wg.Wait()
	}

	failed := false
	for _, r := range results {
		failed = failed || r.failed()
	}
	printTable(stdout, results)
	keep := o.keep || failed
	if err := e.close(keep); err != nil {
		fmt.Fprintln(stderr, "chaos: cleanup:", err)
	}
	if keep {
		fmt.Fprintf(stdout, "logs: %s\n", e.dir)
	}
	fmt.Fprintf(stdout, "seed=%d scale=%g took %s\n", o.seed, o.scale, time.Since(start).Round(time.Second))
	if failed {
		return 1, nil
	}
	return 0, nil
}

// result is one row of the table.
type result struct {
	name          string
	notifications int
	deliveries    int // ledger rows of external channels (email, webhook)
	received      int // distinct messages the sinks accepted
	duplicates    int // accepted messages beyond the first per delivery id
	lost          int // expected messages or inbox items that never arrived
	nonTerminal   int // ledger rows not in a terminal status at the end
	digests       string

	mu       sync.Mutex
	notes    []string
	failures []string
}

func (r *result) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *result) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *result) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.failures) > 0
}

func (r *result) verdict() string {
	if r.failed() {
		return "FAIL"
	}
	return "PASS"
}

func printTable(w io.Writer, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tnotifications\tdeliveries\treceived\tduplicates\tlost\tnon-terminal\tdigests\tverdict\t")
	for _, r := range results {
		if r == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.name, r.notifications, r.deliveries, r.received,
			r.duplicates, r.lost, r.nonTerminal, r.digests, r.verdict())
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  (deliveries: email and webhook ledger rows; received: distinct messages the sinks accepted;")
	fmt.Fprintln(w, "   lost: expected messages and inbox items that never arrived; digests: digests received / (recipient, due instant) pairs)")
	for _, r := range results {
		if r == nil {
			continue
		}
		r.mu.Lock()
		for _, f := range r.failures {
			fmt.Fprintf(w, "  %s: FAIL: %s\n", r.name, f)
		}
		for _, n := range r.notes {
			fmt.Fprintf(w, "  %s: %s\n", r.name, n)
		}
		r.mu.Unlock()
	}
}

// seedFor derives a scenario's seed, so each scenario's random choices are
// reproducible with -seed whatever else runs beside it.
func seedFor(seed int64, name string) uint64 {
	h := uint64(seed)
	for _, c := range []byte(name) {
		h = h*1099511628211 + uint64(c)
	}
	return h
}
