package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/pgcluster"
)

// profiler is -profile DIR: for each profiled scenario it writes
//
//	DIR/<scenario>.cpu.pprof   Go CPU profile of the measured window (the daemon
//	                           runs in this process)
//	DIR/<scenario>.sql.txt     pg_stat_statements of the scenario's database:
//	                           statements by total execution plus planning
//	                           time, with the planning time and the number of
//	                           plans made (as many plans as calls: a custom
//	                           plan every time), and, per unit of the
//	                           scenario's work (a delivery, a job, a request),
//	                           calls, shared buffers touched and WAL bytes;
//	                           then the totals per unit, and each table's
//	                           updates, HOT updates and inserts
//	                           (pg_stat_user_tables) in the window
//	DIR/<scenario>.plans.log   auto_explain (ANALYZE, BUFFERS) of a fifth of the
//	                           statements slower than 2 ms, with real parameters
//
// Profiling slows everything down (auto_explain times every plan node), so a
// profiled run's table is for finding hot spots, not for the record.
//
// With -windows FILE (alone or with -profile) it also appends a line
// "<scenario> <start> <end>" for each profiled window to FILE, the times in
// seconds of CLOCK_MONOTONIC, the clock of `perf record -k CLOCK_MONOTONIC`:
// bench/perfwindows.sh samples the bench's PostgreSQL with perf and reports
// each window apart. Without -profile nothing else is recorded and nothing
// is slowed.
type profiler struct {
	dir     string // "" when only the windows are written
	cluster *pgcluster.Cluster
	admin   *pgxpool.Pool
	windows *os.File // nil without -windows
}

// setUpCluster loads pg_stat_statements (it needs shared_preload_libraries,
// hence a restart) and turns on I/O timing.
func (p *profiler) setUpCluster(ctx context.Context, c *pgcluster.Cluster) error {
	p.cluster = c
	if p.dir == "" {
		return nil
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	for _, stmt := range []string{
		`ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`,
		`ALTER SYSTEM SET track_io_timing = on`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			conn.Close(ctx)
			return fmt.Errorf("profile: %s: %w", stmt, err)
		}
	}
	conn.Close(ctx)
	if err := c.Restart(ctx); err != nil {
		return err
	}
	conn, err = pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// Planning time too: a statement that is planned again on every call
	// (a custom plan each time) spends it outside total_exec_time.
	for _, stmt := range []string{
		`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`,
		`ALTER SYSTEM SET pg_stat_statements.track_planning = on`,
		// The statements inside functions too (notify_enqueue's inserts,
		// notify_send's checks), each on a line of its own.
		`ALTER SYSTEM SET pg_stat_statements.track = 'all'`,
		`SELECT pg_reload_conf()`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("profile: %s: %w", stmt, err)
		}
	}
	return nil
}

// setUpDatabase makes every session of database name load auto_explain.
func (p *profiler) setUpDatabase(ctx context.Context, admin *pgxpool.Pool, name string) error {
	if p.dir == "" {
		return nil
	}
	ident := pgx.Identifier{name}.Sanitize()
	for _, set := range []string{
		`session_preload_libraries = 'auto_explain'`,
		`auto_explain.log_min_duration = '2ms'`,
		`auto_explain.log_analyze = on`,
		`auto_explain.log_buffers = on`,
		`auto_explain.log_nested_statements = on`,
		// Instrumenting a statement slows it; one in five is enough to see
		// every hot plan, and keeps pg_stat_statements' times near true.
		`auto_explain.sample_rate = 0.2`,
	} {
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident+" SET "+set); err != nil {
			return fmt.Errorf("profile: %s: %w", set, err)
		}
	}
	return nil
}

// start begins profiling scenario (running in database dbName; "" for a
// window without one, which gets the Go profile alone), whose window does
// units of work named unit ("delivery"), and returns the function that ends
// it and writes the files. On a nil profiler both do nothing.
func (p *profiler) start(ctx context.Context, scenario, dbName string, units int, unit string) (stop func()) {
	if p == nil {
		return func() {}
	}
	if p.windows != nil {
		defer func() { // at the return: after the wait for settled statistics
			began := monotonic()
			stop = chain(func() {
				if _, err := fmt.Fprintf(p.windows, "%s %.6f %.6f\n", scenario, began, monotonic()); err != nil {
					fmt.Fprintf(os.Stderr, "bench: windows: %v\n", err)
				}
			}, stop)
		}()
	}
	if p.dir == "" {
		return func() {}
	}
	var tables map[string]tableStat
	if dbName != "" {
		// Settled first: the warm-up's writes reach the statistics up to ten
		// seconds late, and must not count in the window.
		var err error
		if tables, err = p.settledTableStats(ctx, dbName); err != nil {
			fmt.Fprintf(os.Stderr, "bench: profile: %v\n", err)
		}
	}
	cpuFile, err := os.Create(filepath.Join(p.dir, scenario+".cpu.pprof"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: profile: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(cpuFile); err != nil {
		fmt.Fprintf(os.Stderr, "bench: profile: %v\n", err)
		cpuFile.Close()
		return func() {}
	}
	if dbName == "" { // a window without a database: the Go profile alone
		return func() {
			pprof.StopCPUProfile()
			cpuFile.Close()
			fmt.Printf("  profile of %s written to %s/%s.cpu.pprof\n", scenario, p.dir, scenario)
		}
	}
	if _, err := p.admin.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		fmt.Fprintf(os.Stderr, "bench: profile: %v\n", err)
	}
	logStart := fileSize(p.cluster.LogFile())
	return func() {
		pprof.StopCPUProfile()
		cpuFile.Close()
		if err := p.writeStatements(ctx, scenario, dbName, units, unit, tables); err != nil {
			fmt.Fprintf(os.Stderr, "bench: profile: %v\n", err)
		}
		if err := copyLogSince(p.cluster.LogFile(), logStart, filepath.Join(p.dir, scenario+".plans.log")); err != nil {
			fmt.Fprintf(os.Stderr, "bench: profile: %v\n", err)
		}
		fmt.Printf("  profile of %s written to %s/%s.*\n", scenario, p.dir, scenario)
	}
}

// chain returns a function that runs first, then then.
func chain(first, then func()) func() {
	return func() { first(); then() }
}

// monotonic is CLOCK_MONOTONIC in seconds: perf's clock with -k
// CLOCK_MONOTONIC (Go's own monotonic readings are not exposed).
func monotonic() float64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

var spaces = regexp.MustCompile(`\s+`)

// writeStatements writes the top statements of dbName by total time, each
// with its calls, buffers and WAL per unit of work, the totals per unit, and
// the tables' writes since before (tableStats at the start of the window).
func (p *profiler) writeStatements(ctx context.Context, scenario, dbName string, units int, unit string, before map[string]tableStat) error {
	rows, err := p.admin.Query(ctx, `
SELECT calls, total_exec_time, mean_exec_time, total_plan_time, plans, rows, shared_blks_hit + shared_blks_read,
       wal_bytes::bigint, query
FROM pg_stat_statements s
JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = $1
ORDER BY total_exec_time + total_plan_time DESC`, dbName)
	if err != nil {
		return err
	}
	defer rows.Close()
	f, err := os.Create(filepath.Join(p.dir, scenario+".sql.txt"))
	if err != nil {
		return err
	}
	defer f.Close()
	per := func(v int64) float64 { return float64(v) / float64(max(units, 1)) }
	fmt.Fprintf(f, "%s: pg_stat_statements of the measured window, %d %s(s); \"/u\" columns are per %s\n\n", scenario, units, unit, unit)
	tw := tabwriter.NewWriter(f, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "calls\tcalls/u\ttotal ms\tmean ms\tplan ms\tplans\trows\tblocks\tblocks/u\tWAL B/u\t query")
	var calls, blocks, wal, shown int64
	for rows.Next() {
		var c, plans, nrows, b, w int64
		var total, mean, plan float64
		var query string
		if err := rows.Scan(&c, &total, &mean, &plan, &plans, &nrows, &b, &w, &query); err != nil {
			return err
		}
		calls, blocks, wal = calls+c, blocks+b, wal+w
		if shown++; shown > 30 {
			continue
		}
		q := strings.TrimSpace(spaces.ReplaceAllString(query, " "))
		if len(q) > 400 {
			q = q[:400] + "…"
		}
		fmt.Fprintf(tw, "%d\t%.3f\t%.0f\t%.2f\t%.0f\t%d\t%d\t%d\t%.1f\t%.0f\t %s\n", c, per(c), total, mean, plan, plans, nrows,
			b, per(b), per(w), q)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(f, "\nall statements: %.3f calls, %.1f shared buffers, %.0f WAL bytes per %s\n", per(calls), per(blocks), per(wal), unit)
	after, err := p.settledTableStats(ctx, dbName)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "\ntable writes in the window (pg_stat_user_tables), per %s:\n", unit)
	tw = tabwriter.NewWriter(f, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "inserts/u\tupdates/u\tHOT/u\tdeletes/u\t table")
	var names []string
	for name := range after {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		d := after[name].sub(before[name])
		if d == (tableStat{}) {
			continue
		}
		fmt.Fprintf(tw, "%.3f\t%.3f\t%.3f\t%.3f\t %s\n", per(d.ins), per(d.upd), per(d.hot), per(d.del), name)
	}
	return tw.Flush()
}

// tableStat is a table's row writes so far (pg_stat_user_tables).
type tableStat struct{ ins, upd, hot, del int64 }

func (t tableStat) sub(b tableStat) tableStat {
	return tableStat{t.ins - b.ins, t.upd - b.upd, t.hot - b.hot, t.del - b.del}
}

// tableStats reads the row writes of every table of dbName, partitions by
// their own names.
func (p *profiler) tableStats(ctx context.Context, dbName string) (map[string]tableStat, error) {
	conn, err := pgx.Connect(ctx, p.cluster.URL(dbName))
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables`)
	if err != nil {
		return nil, err
	}
	out := map[string]tableStat{}
	for rows.Next() {
		var name string
		var t tableStat
		if err := rows.Scan(&name, &t.ins, &t.upd, &t.hot, &t.del); err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, rows.Err()
}

// settledTableStats is tableStats once the figures have stopped moving:
// backends report their counts to the statistics system at most once a
// second, and an idle one only after ten seconds, so the figures of the
// window arrive up to that late. It waits at most 15 s.
func (p *profiler) settledTableStats(ctx context.Context, dbName string) (map[string]tableStat, error) {
	deadline := time.Now().Add(15 * time.Second)
	prev, err := p.tableStats(ctx, dbName)
	for err == nil && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
		var cur map[string]tableStat
		if cur, err = p.tableStats(ctx, dbName); err == nil {
			if maps.Equal(cur, prev) && time.Now().After(deadline.Add(-4*time.Second)) {
				return cur, nil
			}
			prev = cur
		}
	}
	return prev, err
}

func fileSize(path string) int64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return info.Size()
}

func copyLogSince(src string, offset int64, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if _, err := in.Seek(offset, io.SeekStart); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	_, err = io.Copy(out, in)
	return err
}
