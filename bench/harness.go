package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/pgcluster"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/stores"
)

// templateDB is the migrated database every scenario database is cloned from
// (CREATE DATABASE ... TEMPLATE), the way internal/testing/pgtest does it for tests.
const templateDB = "bench_template"

// harness is the private PostgreSQL server of one bench run and the
// databases cloned from its migrated template.
type harness struct {
	cluster *pgcluster.Cluster
	standby *pgcluster.Cluster // a streaming standby of cluster (-inbox-standby), or nil
	dir     string             // cluster directory; removed at the end unless -keep
	admin   *pgxpool.Pool
	logger  *slog.Logger // warnings of the daemons under test go to stderr
	prof    *profiler    // nil unless -profile
	seq     int

	// quietBudget is how long waitQuiet may still wait in this run;
	// quietWaited is how long it did.
	quietBudget time.Duration
	quietWaited time.Duration
}

// startHarness starts a tuned private cluster in dir and builds the
// template. With standby, the cluster keeps wal_level=replica and a
// streaming standby of it runs in dir/standby.
func startHarness(ctx context.Context, dir string, prof *profiler, standby bool) (*harness, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Tuned: true, Replication: standby, Logger: logger})
	if err != nil {
		return nil, err
	}
	h := &harness{cluster: c, dir: dir, logger: logger, prof: prof}
	if prof != nil {
		if err := prof.setUpCluster(ctx, c); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	h.admin, err = pgxpool.New(ctx, c.URL("postgres"))
	if err != nil {
		_ = c.Stop()
		return nil, err
	}
	if prof != nil {
		prof.admin = h.admin
	}
	if err := h.buildTemplate(ctx); err != nil {
		h.close()
		return nil, err
	}
	if standby {
		if h.standby, err = pgcluster.StartStandby(ctx, c, pgcluster.Options{Dir: filepath.Join(dir, "standby"), Tuned: true,
			Logger: logger}); err != nil {
			h.close()
			return nil, err
		}
	}
	return h, nil
}

func (h *harness) close() {
	if h.standby != nil {
		_ = h.standby.Stop()
	}
	if h.admin != nil {
		h.admin.Close()
	}
	_ = h.cluster.Stop()
}

// buildTemplate (re)creates the migrated template database.
func (h *harness) buildTemplate(ctx context.Context) error {
	ident := pgx.Identifier{templateDB}.Sanitize()
	if _, err := h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := h.admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, h.cluster.URL(templateDB))
	if err != nil {
		return err
	}
	err = stores.Migrate(ctx, pool, "", nil)
	if err == nil {
		// The bench config's notifiers, as `notifyd migrate` publishes them:
		// SendTx and notify_send check the catalog.
		var cfg *config.Config
		if cfg, err = loadConfig(configOptions{}); err == nil {
			err = server.PublishCatalog(ctx, pool, cfg, nil)
		}
	}
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	// CREATE DATABASE ... TEMPLATE fails while anyone is connected to it.
	_, err = h.admin.Exec(ctx, "ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS false")
	return err
}

// scenarioDB is one fresh database cloned from the template.
type scenarioDB struct {
	h    *harness
	Name string
	URL  string
}

// freshDB clones the template into a new database for one scenario (or one
// baseline). Drop it when done.
func (h *harness) freshDB(ctx context.Context, label string) (*scenarioDB, error) {
	h.seq++
	name := fmt.Sprintf("bench_%s_%d", strings.ReplaceAll(label, ".", "_"), h.seq)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return nil, err
	}
	if _, err := h.admin.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE "+pgx.Identifier{templateDB}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	db := &scenarioDB{h: h, Name: name, URL: h.cluster.URL(name)}
	if h.prof != nil {
		if err := h.prof.setUpDatabase(ctx, h.admin, name); err != nil {
			return nil, err
		}
	}
	return db, nil
}

// drop removes the database and checkpoints, so that one scenario's dirty
// buffers are not written during the next one's measurement.
func (db *scenarioDB) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := db.h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.Name}.Sanitize()+" WITH (FORCE)"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: drop %s: %v\n", db.Name, err)
	}
	if _, err := db.h.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: checkpoint: %v\n", err)
	}
}

// openDB is freshDB with a pool of at most maxConns connections on the new
// database; closeDB closes the pool and drops the database.
func (h *harness) openDB(ctx context.Context, label string, maxConns int32) (db *scenarioDB, pool *pgxpool.Pool, closeDB func(), err error) {
	if db, err = h.freshDB(ctx, label); err != nil {
		return nil, nil, nil, err
	}
	if pool, err = db.pool(ctx, maxConns); err != nil {
		db.drop()
		return nil, nil, nil, err
	}
	return db, pool, func() { pool.Close(); db.drop() }, nil
}

// pool opens a pool on the database with at most maxConns connections.
func (db *scenarioDB) pool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}

// waitUntil polls cond every interval until it reports true and returns the
// time it first did. It gives up after timeout.
func waitUntil(ctx context.Context, interval, timeout time.Duration, cond func() (bool, error)) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return time.Time{}, err
		}
		if ok {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// cpuTimes is CPU time consumed so far by this process (the daemon under test
// runs in it, except in the RSS scenario), by PostgreSQL, and by the whole
// machine. Machine minus the other two is what unrelated processes took: a
// measurement taken while they were busy is noisy, and the notes say so.
type cpuTimes struct {
	Go      time.Duration
	PG      time.Duration
	Machine time.Duration
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTick = 100

func (h *harness) cpu() cpuTimes {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	t := cpuTimes{Go: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), Machine: machineBusy()}
	pm, err := h.postmasterPID()
	if err != nil {
		return t
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, ticks, err := procStat(pid)
		if err != nil {
			continue
		}
		if pid == pm || ppid == pm {
			t.PG += time.Duration(ticks) * time.Second / clockTick
		}
	}
	return t
}

// sub returns the CPU used between a and t.
func (t cpuTimes) sub(a cpuTimes) cpuTimes {
	return cpuTimes{Go: t.Go - a.Go, PG: t.PG - a.PG, Machine: t.Machine - a.Machine}
}

// others is what processes other than this one and PostgreSQL used.
func (t cpuTimes) others() time.Duration { return max(t.Machine-t.Go-t.PG, 0) }

// use is t for results.json.
func (t cpuTimes) use() *CPUUse {
	return &CPUUse{GoSeconds: t.Go.Seconds(), PGSeconds: t.PG.Seconds(), OthersSeconds: t.others().Seconds()}
}

func (t cpuTimes) String() string {
	others := t.others()
	return fmt.Sprintf("cpu go %.1fs pg %.1fs others %.1fs", t.Go.Seconds(), t.PG.Seconds(), others.Seconds())
}

// machineBusy is the non-idle CPU time of the whole machine since boot, from
// the first line of /proc/stat (user nice system idle iowait irq softirq
// steal ...): everything but idle and iowait.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest times are already in user
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick
}

// loadAverage is the 1-minute load average.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func (h *harness) postmasterPID() (int, error) {
	f, err := os.Open(filepath.Join(h.cluster.DataDir(), "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, errors.New("empty postmaster.pid")
	}
	return strconv.Atoi(strings.TrimSpace(sc.Text()))
}

// procStat reads the parent pid and utime+stime (in clock ticks) of pid.
func procStat(pid int) (ppid int, ticks int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, 0, errors.New("malformed stat")
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ppid, ut + st, nil
}

// waitQuiet waits, up to the harness's remaining quiet budget, until other
// processes on the machine use less than a quarter of a core over a
// one-second window. The machine may be shared (other builds and tests):
// starting a timed section in a quiet moment keeps the numbers comparable.
// The notes of each row still report what others took during it.
func (h *harness) waitQuiet(ctx context.Context) {
	const window = time.Second
	const threshold = window / 4
	for h.quietBudget > 0 && ctx.Err() == nil {
		a := h.cpu()
		time.Sleep(window)
		d := h.cpu().sub(a)
		if d.Machine-d.Go-d.PG < threshold {
			return
		}
		h.quietBudget -= window
		h.quietWaited += window
	}
}

// analyzeAll analyzes every table of the database, River's included: for
// tables that hold rows of earlier traffic (a scenario's warm-up).
func analyzeAll(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `ANALYZE`)
	return err
}

// analyze refreshes planner statistics of notifyd's tables after a
// set-based setup, as autovacuum would have in a live database. River's
// tables are left alone: analyzing an empty river_job would tell the planner
// it stays empty, which no live queue is.

func analyze(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `ANALYZE notify_notifications, notify_recipients, notify_inbox, notify_inbox_changes,
notify_deliveries, notify_preferences, notify_subscriptions, notify_mutes`)
	return err
}
