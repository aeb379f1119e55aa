package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"text/tabwriter"

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
//	                           plan every time)
//	DIR/<scenario>.plans.log   auto_explain (ANALYZE, BUFFERS) of a fifth of the
//	                           statements slower than 2 ms, with real parameters
//
// Profiling slows everything down (auto_explain times every plan node), so a
// profiled run's table is for finding hot spots, not for the record.
type profiler struct {
	dir     string
	cluster *pgcluster.Cluster
	admin   *pgxpool.Pool
}

// setUpCluster loads pg_stat_statements (it needs shared_preload_libraries,
// hence a restart) and turns on I/O timing.
func (p *profiler) setUpCluster(ctx context.Context, c *pgcluster.Cluster) error {
	p.cluster = c
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

// start begins profiling scenario (running in database dbName) and returns
// the function that ends it and writes the files. On a nil profiler both do
// nothing.
func (p *profiler) start(ctx context.Context, scenario, dbName string) (stop func()) {
	if p == nil {
		return func() {}
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
	if _, err := p.admin.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		fmt.Fprintf(os.Stderr, "bench: profile: %v\n", err)
	}
	logStart := fileSize(p.cluster.LogFile())
	return func() {
		pprof.StopCPUProfile()
		cpuFile.Close()
		if err := p.writeStatements(ctx, scenario, dbName); err != nil {
			fmt.Fprintf(os.Stderr, "bench: profile: %v\n", err)
		}
		if err := copyLogSince(p.cluster.LogFile(), logStart, filepath.Join(p.dir, scenario+".plans.log")); err != nil {
			fmt.Fprintf(os.Stderr, "bench: profile: %v\n", err)
		}
		fmt.Printf("  profile of %s written to %s/%s.*\n", scenario, p.dir, scenario)
	}
}

var spaces = regexp.MustCompile(`\s+`)

// writeStatements writes the top statements of dbName by total time.
func (p *profiler) writeStatements(ctx context.Context, scenario, dbName string) error {
	rows, err := p.admin.Query(ctx, `
SELECT calls, total_exec_time, mean_exec_time, total_plan_time, plans, rows, shared_blks_hit + shared_blks_read, query
FROM pg_stat_statements s
JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = $1
ORDER BY total_exec_time + total_plan_time DESC
LIMIT 25`, dbName)
	if err != nil {
		return err
	}
	defer rows.Close()
	f, err := os.Create(filepath.Join(p.dir, scenario+".sql.txt"))
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tabwriter.NewWriter(f, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "calls\ttotal ms\tmean ms\tplan ms\tplans\trows\tblocks\t query")
	for rows.Next() {
		var calls, plans, nrows, blocks int64
		var total, mean, plan float64
		var query string
		if err := rows.Scan(&calls, &total, &mean, &plan, &plans, &nrows, &blocks, &query); err != nil {
			return err
		}
		q := strings.TrimSpace(spaces.ReplaceAllString(query, " "))
		if len(q) > 400 {
			q = q[:400] + "…"
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.2f\t%.0f\t%d\t%d\t%d\t %s\n", calls, total, mean, plan, plans, nrows, blocks, q)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return tw.Flush()
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
