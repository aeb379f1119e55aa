// Command bench is `make bench`: it measures notifyd against its performance
// targets (docs/performance.md) and prints one table.
//
// It starts its own private PostgreSQL (internal/pgcluster, tuned: fsync,
// synchronous_commit and full_page_writes off — the settings are printed),
// migrates a template database, and runs every scenario in a fresh database
// cloned from it, each next to a baseline measured in the same run:
//
//	fanout   in_app fan-out to -fanout-n recipients (inline list, topic, inline for a tenant) vs
//	         (a) a raw INSERT … SELECT of the same rows into a copy of
//	         notify_inbox with all its indexes, and (b) a naive design, one
//	         River job per recipient (-naive-n jobs)
//	audience in_app fan-out to the -audience-n recipients an audience query
//	         reads from the application's table vs the raw INSERT … SELECT
//	         of the same inbox rows from the same query
//	email    -email-n immediate emails to an in-process SMTP sink vs the email
//	         channel sending the same messages alone (no database, no queue),
//	         and PostgreSQL's CPU per delivery vs per River no-op job (River
//	         working as many no-op jobs with the send queue's settings)
//	enqueue  application transactions/s (UPDATE + SendTx) vs (UPDATE + River
//	         InsertTx), -enqueue-conc goroutines, -enqueue-n transactions
//	httpsend POST /v1/notifications (one recipient) vs SendTx at the same
//	         concurrency, and the client packages' rows (-client-cmd,
//	         bench/clients.sh by default)
//	latency  commit → inbox.created on /v1/inbox/stream, -latency-n sends at
//	         -latency-rate per second: p50 and p99
//	maillatency  commit → email accepted by the SMTP sink, -maillatency-n
//	         sends (one recipient each) at -maillatency-rate per second
//	small    one-recipient notifications (in_app + email) by SendTx from 8
//	         connections at 100 → 3,200/s, 10 s a step: the highest rate with
//	         commit → email accepted p99 ≤ 250 ms and nothing queued 1 s
//	         after the step, vs the same ladder for River alone (InsertTx of a
//	         no-op job, commit → completed)
//	marks    inbox marks: -marks-conc connections each marking items of its
//	         own recipients read (stores.MarkInbox, -marks-n transactions) vs
//	         the same UPDATEs with no change log; with -marks-durable also on
//	         a second private cluster with PostgreSQL's durable defaults
//	inbox    the inbox read path on -inbox-items items (plus one recipient
//	         with -inbox-heavy): counts and first pages over HTTP vs the same
//	         SQL from pgx, p99 at -inbox-rate, the heavy recipient's counts;
//	         with -inbox-standby also on a streaming standby (read_url)
//	digest   -digest-recipients × -digest-rows pending digest rows → emails/s
//	         vs the email channel sending the same digests alone
//	footprint  on a cluster with PostgreSQL's default settings: WAL and
//	         storage per recipient, and peak connections of one replica
//	rss      peak RSS (VmHWM) of a `notifyd run` subprocess fanning out to a
//	         topic with -rss-n subscribers, to -rss-inline-n inline recipients
//	         and to an audience query returning -rss-audience-n
//
// The daemon under test is assembled by server, as `notifyd run`
// does, with notifyd's default queue settings. Results go to stdout and to
// -out (bench/results.json). -only=name,... runs a subset; -profile DIR
// writes CPU profiles, pg_stat_statements per unit of work and auto_explain
// plans, and -windows FILE the measured windows for perf (see profiler and
// bench/perfwindows.sh). Benchmarks talk to PostgreSQL over its Unix socket and to the
// daemon and SMTP sink on 127.0.0.1 only.
//
// The machine may be shared: before each timed section the bench waits (up to
// -quiet in all) for other processes to go quiet, records the CPU they took
// during each measurement, and marks a result with * when that was more than
// half a core. docs/performance.md describes the method and the findings.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/notifyd/notifyd/server"
)

var scenarios = []string{"fanout", "audience", "email", "enqueue", "httpsend", "latency", "maillatency", "small", "marks", "inbox", "digest", "delayed", "push", "mobilepush", "providers", "rss", "footprint"}

type options struct {
	fanoutN          int
	audienceN        int
	rssAudienceN     int
	naiveN           int
	emailN           int
	enqueueN         int
	enqueueConc      int
	latencyN         int
	latencyRate      float64
	mailLatencyN     int
	mailLatencyRate  float64
	marksN           int
	marksConc        int
	marksDurable     bool
	digestRecipients int
	digestRows       int
	pushN            int
	mobilePushN      int
	rssN             int
	rssInlineN       int
	footprintN       int
	inbox            inboxOptions
	inboxStandby     bool
	clientCmd        string
	only             string
	out              string
	dir              string
	keep             bool
	profileDir       string
	windows          string
	quiet            time.Duration
}

func main() {
	os.Exit(run())
}

func run() int {
	// The daemon under test runs with the collector target `notifyd run`
	// sets (server.New itself sets none).
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(server.DefaultGCPercent)
	}
	var o options
	flag.IntVar(&o.fanoutN, "fanout-n", 100_000, "recipients of the fan-out scenario (and rows of the raw baseline)")
	flag.IntVar(&o.audienceN, "audience-n", 100_000, "recipients of the audience scenario (rows its query returns, and of its raw baseline)")
	flag.IntVar(&o.rssAudienceN, "rss-audience-n", 1_000_000, "recipients an audience query returns in the peak-RSS fan-out; 0 skips it")
	flag.IntVar(&o.naiveN, "naive-n", 0, "jobs of the naive fan-out baseline (0: -fanout-n)")
	flag.IntVar(&o.emailN, "email-n", 20_000, "immediate emails (and no-op jobs of the baseline)")
	flag.IntVar(&o.enqueueN, "enqueue-n", 20_000, "application transactions per enqueue variant")
	flag.IntVar(&o.enqueueConc, "enqueue-conc", 8, "concurrent application goroutines in the enqueue scenario")
	flag.IntVar(&o.latencyN, "latency-n", 1000, "notifications sent in the latency scenario")
	flag.Float64Var(&o.latencyRate, "latency-rate", 50, "sends per second in the latency scenario")
	flag.IntVar(&o.mailLatencyN, "maillatency-n", 2000, "notifications sent in the commit → email scenario")
	flag.Float64Var(&o.mailLatencyRate, "maillatency-rate", 200, "sends per second in the commit → email scenario")
	flag.Func("small-rates", "the small notifications ladder's rates per second, comma-separated (default 100,200,400,800,1600,3200)",
		func(v string) error {
			var rates []float64
			for _, f := range strings.Split(v, ",") {
				r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
				if err != nil || r <= 0 {
					return fmt.Errorf("rate %q", f)
				}
				rates = append(rates, r)
			}
			smallRates = rates
			return nil
		})
	flag.IntVar(&o.footprintN, "footprint-n", 20_000, "recipients of the footprint scenario's notifications")
	flag.IntVar(&o.inbox.items, "inbox-items", 2_000_000, "inbox items over the inbox scenario's normal recipients")
	flag.IntVar(&o.inbox.recipients, "inbox-recipients", 20_000, "normal recipients of the inbox scenario")
	flag.IntVar(&o.inbox.heavy, "inbox-heavy", 200_000, "items of the inbox scenario's heavy recipient (half of them unread)")
	flag.IntVar(&o.inbox.conc, "inbox-conc", 32, "concurrent clients of the inbox throughput rows")
	flag.IntVar(&o.inbox.requests, "inbox-requests", 20_000, "requests per inbox throughput measurement")
	flag.Float64Var(&o.inbox.rate, "inbox-rate", 200, "requests/s of the inbox latency rows")
	flag.IntVar(&o.inbox.rateN, "inbox-rate-n", 2000, "requests per inbox latency row")
	flag.BoolVar(&o.inboxStandby, "inbox-standby", false, "also measure the inbox counts with database.read_url on a streaming standby (the bench's cluster then keeps wal_level=replica for every scenario)")
	flag.StringVar(&o.clientCmd, "client-cmd", "sh bench/clients.sh", "with httpsend: a command printing \"row <name> <measured> <baseline> <target>\" or \"fail <name> <what is missing>\" lines (the client packages' rows; DATABASE_URL and BENCH_CONC are set; empty: no client rows)")
	flag.IntVar(&o.marksN, "marks-n", 20_000, "inbox-mark transactions per variant of the marks scenario")
	flag.IntVar(&o.marksConc, "marks-conc", 32, "connections of the marks scenario")
	flag.BoolVar(&o.marksDurable, "marks-durable", true, "also run the marks scenario with durable commits (fsync and synchronous_commit on), on a second private cluster")
	flag.IntVar(&o.digestRecipients, "digest-recipients", 10_000, "recipients with pending digest rows")
	flag.IntVar(&o.digestRows, "digest-rows", 5, "pending digest rows per recipient")
	flag.IntVar(&o.pushN, "push-n", 10_000, "web push deliveries (one subscription per recipient) to a local push service")
	flag.IntVar(&o.mobilePushN, "mobilepush-n", 10_000, "mobile push deliveries, half to a local FCM and half to a local APNs (recipients with an iPhone and an Android phone each)")
	flag.IntVar(&o.rssN, "rss-n", 1_000_000, "recipients (topic subscribers) of the peak-RSS fan-out; 0 skips it")
	// The row names the size used; scale it down with this flag on a slower
	// machine (see docs/performance.md for the timing).
	flag.IntVar(&o.rssInlineN, "rss-inline-n", 1_000_000, "inline recipients of the peak-RSS fan-out; 0 skips it")
	flag.StringVar(&o.only, "only", "", "comma-separated scenarios to run ("+strings.Join(scenarios, ", ")+"); empty runs all")
	flag.StringVar(&o.out, "out", "bench/results.json", "where to write the results as JSON (empty: nowhere)")
	flag.StringVar(&o.dir, "dir", "", "directory for the PostgreSQL cluster (default: a temporary directory)")
	flag.BoolVar(&o.keep, "keep", false, "keep the cluster directory")
	flag.StringVar(&o.profileDir, "profile", "", "write CPU profiles, pg_stat_statements and auto_explain plans to this directory (slows the run)")
	flag.StringVar(&o.windows, "windows", "", "append \"scenario start end\" (CLOCK_MONOTONIC seconds) for each profiled window to this file (bench/perfwindows.sh)")
	flag.DurationVar(&o.quiet, "quiet", 60*time.Second, "how long, in all, to wait for other processes to quieten before timed sections (0: never wait)")
	flag.Parse()
	if o.naiveN <= 0 {
		o.naiveN = o.fanoutN
	}
	selected := map[string]bool{}
	if o.only == "" {
		for _, s := range scenarios {
			selected[s] = true
		}
	} else {
		for _, s := range strings.Split(o.only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(scenarios, s) {
				fmt.Fprintf(os.Stderr, "bench: unknown scenario %q (want %s)\n", s, strings.Join(scenarios, ", "))
				return 2
			}
			selected[s] = true
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()

	dir := o.dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "notifyd-bench-"); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	var prof *profiler
	if o.profileDir != "" || o.windows != "" {
		prof = &profiler{dir: o.profileDir}
	}
	if o.windows != "" {
		f, err := os.OpenFile(o.windows, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -windows:", err)
			return 1
		}
		defer f.Close()
		prof.windows = f
	}

	loadStart := loadAverage()
	fmt.Printf("notifyd bench: %d cores, %s, load average %s, starting PostgreSQL in %s\n", runtime.NumCPU(),
		runtime.Version(), loadStart, dir)
	h, err := startHarness(ctx, dir, prof, o.inboxStandby && selected["inbox"])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer h.close()
	h.quietBudget = o.quiet
	machine := machineInfo(h.cluster.Settings())
	fmt.Printf("PostgreSQL (private, tuned; durability traded for speed): %s\n", machine.PGSettings)
	if o.profileDir != "" {
		fmt.Printf("PROFILING to %s: pg_stat_statements and auto_explain are on; the numbers below are slowed by them\n", o.profileDir)
	}

	var results []Result
	section := func(name, what string) bool {
		if !selected[name] || ctx.Err() != nil {
			return false
		}
		fmt.Printf("\n[%s] %s\n", name, what)
		return true
	}
	if section("fanout", fmt.Sprintf("in_app fan-out to %d recipients", o.fanoutN)) {
		results = append(results, runFanout(ctx, h, o.fanoutN, o.naiveN)...)
	}
	if section("audience", fmt.Sprintf("in_app fan-out to an audience query returning %d recipients", o.audienceN)) {
		results = append(results, runAudience(ctx, h, o.audienceN)...)
	}
	var immediate *measurement
	if section("email", fmt.Sprintf("%d immediate emails to an in-process SMTP sink", o.emailN)) {
		var rs []Result
		rs, immediate = runEmail(ctx, h, o.emailN)
		results = append(results, rs...)
	}
	if section("enqueue", fmt.Sprintf("%d application transactions from %d goroutines", o.enqueueN, o.enqueueConc)) {
		results = append(results, runEnqueue(ctx, h, o.enqueueN, o.enqueueConc)...)
	}
	if section("httpsend", fmt.Sprintf("POST /v1/notifications vs SendTx, %d each from %d clients", o.enqueueN, o.enqueueConc)) {
		results = append(results, runHTTPSend(ctx, h, o.enqueueN, o.enqueueConc, o.clientCmd)...)
	}
	if section("latency", fmt.Sprintf("commit → /v1/inbox/stream, %d sends at %.0f/s", o.latencyN, o.latencyRate)) {
		results = append(results, runLatency(ctx, h, o.latencyN, o.latencyRate)...)
	}
	if section("maillatency", fmt.Sprintf("commit → email accepted, %d sends at %.0f/s", o.mailLatencyN, o.mailLatencyRate)) {
		results = append(results, runMailLatency(ctx, h, o.mailLatencyN, o.mailLatencyRate)...)
	}
	if section("small", "small notifications (one recipient, in_app + email) at rising rates, and River alone") {
		results = append(results, runSmall(ctx, h)...)
	}
	if section("marks", fmt.Sprintf("inbox marks from %d connections, %d transactions", o.marksConc, o.marksN)) {
		results = append(results, runMarks(ctx, h, o.marksN, o.marksConc, o.marksDurable)...)
	}
	if section("inbox", fmt.Sprintf("inbox read path: %d items over %d recipients, one with %d", o.inbox.items,
		o.inbox.recipients, o.inbox.heavy)) {
		io := o.inbox
		if h.standby != nil {
			io.standby = h.standby.URL
		}
		results = append(results, runInbox(ctx, h, io)...)
	}
	if section("digest", fmt.Sprintf("%d recipients × %d pending digest rows", o.digestRecipients, o.digestRows)) {
		results = append(results, runDigest(ctx, h, o.digestRecipients, o.digestRows, immediate)...)
	}
	if section("delayed", fmt.Sprintf("%d emails delayed with unless: read, half of them read before due", o.emailN)) {
		results = append(results, runDelayed(ctx, h, o.emailN, immediate)...)
	}
	if section("push", fmt.Sprintf("web push, %d deliveries to a local push endpoint", o.pushN)) {
		results = append(results, runPush(ctx, h, o.pushN, immediate)...)
	}
	if section("mobilepush", fmt.Sprintf("mobile push, %d deliveries to a local FCM and APNs", o.mobilePushN)) {
		results = append(results, runMobilePush(ctx, h, o.mobilePushN, immediate)...)
	}
	if section("providers", fmt.Sprintf("%d emails through the ses provider to a local SES endpoint vs through smtp to the in-process sink", o.emailN/4)) {
		results = append(results, runProviders(ctx, h, o.emailN/4)...)
	}
	if section("footprint", fmt.Sprintf("WAL, storage and connections per recipient, %d recipients, durable settings", o.footprintN)) {
		results = append(results, runFootprint(ctx, h, o.footprintN)...)
	}
	if section("rss", fmt.Sprintf("peak RSS of `notifyd run` during in_app fan-outs to a %d-subscriber topic and %d inline recipients",
		o.rssN, o.rssInlineN)) {
		bin, err := buildDaemon(ctx, dir)
		if err != nil {
			results = append(results, errorResult("daemon peak RSS", "MB", "<=", 200, "absolute", err))
		} else {
			results = append(results, runRSS(ctx, h, bin, map[string]int{"topic": o.rssN, "inline": o.rssInlineN,
				"audience": o.rssAudienceN})...)
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		return 1
	}

	elapsed := time.Since(began)
	machine.LoadStart, machine.LoadEnd = loadStart, loadAverage()
	fmt.Printf("\nnotifyd bench — %s, %d cores, %s, %s, load average %s → %s\n", machine.Timestamp, machine.Cores,
		machine.GoVersion, machine.CPUModel, machine.LoadStart, machine.LoadEnd)
	fmt.Printf("PostgreSQL: %s\n\n", machine.PGSettings)
	printTable(os.Stdout, results)
	fmt.Printf("\ntotal %.0fs (of which %.0fs waiting for other processes to quieten)\n", elapsed.Seconds(), h.quietWaited.Seconds())
	if o.out != "" {
		report := &Report{Machine: machine, Flags: os.Args[1:], Results: results, Seconds: elapsed.Seconds(),
			QuietWaitSeconds: h.quietWaited.Seconds()}
		if err := writeJSON(o.out, report); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		fmt.Printf("results written to %s\n", o.out)
	}
	return 0
}

// machineInfo describes this machine and the PostgreSQL settings.
func machineInfo(pgSettings string) Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		PGSettings: pgSettings, Timestamp: time.Now().UTC().Format(time.RFC3339)}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == "MemTotal" {
				kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				m.MemTotalMB = kb / 1024
			}
		}
		f.Close()
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.GitCommit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m.GitCommit += "+dirty"
		}
	}
	return m
}
