// Package pgtest gives tests real, migrated PostgreSQL databases.
//
// Every package whose tests use it calls Main from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// The server is the one TEST_DATABASE_URL names (`make test` starts a
// throwaway cluster and sets it). When the variable is unset, Main fails under
// CI=true and otherwise starts a private tuned cluster for the test binary on
// first use. Tests then take isolation of one of two kinds:
//
//   - Tx: a transaction on a shared migrated database, rolled back at cleanup.
//     Cheap; for store tests.
//   - NewDB / NewDBURL: a database of its own, cloned from a migrated template
//     and dropped at cleanup. For tests that run a River client, LISTEN/NOTIFY,
//     or the daemon as a subprocess.
//
// The package imports stores (to migrate), so tests inside package stores must
// be written as package stores_test to use it.
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/notifyd/notifyd/internal/pgcluster"
	notifysql "github.com/notifyd/notifyd/sql"
	"github.com/notifyd/notifyd/stores"
)

// EnvURL names the environment variable holding the test server's URL.
const EnvURL = "TEST_DATABASE_URL"

// TemplateName is the migrated database every test database is cloned from.
// Its COMMENT holds the hash of the migrations it was built with; a template
// without the current hash is rebuilt.
const TemplateName = "notifyd_template"

// templateLockKey serialises template builds across test binaries: go test
// runs packages in parallel, all against one server. Advisory locks are per
// database, so every binary takes it in the maintenance database "postgres".
const templateLockKey = 7342101

// maxConns bounds each pool pgtest hands out, so that many parallel tests in
// many parallel test binaries fit under the server's max_connections.
const maxConns = 10

// setupTimeout bounds starting the server and building the template.
const setupTimeout = 3 * time.Minute

var (
	mainCalled atomic.Bool

	srv struct {
		once    sync.Once
		url     string // TEST_DATABASE_URL, or the private cluster's postgres database
		cluster *pgcluster.Cluster
		dir     string
		admin   *pgxpool.Pool // on the maintenance database
		err     error
	}

	tmpl struct {
		once sync.Once
		err  error
	}

	shared struct {
		once sync.Once
		name string
		pool *pgxpool.Pool
		err  error
	}

	dbCounter atomic.Int64
)

// Main runs the package's tests and exits; call it from TestMain. With
// TEST_DATABASE_URL unset it fails at once under CI (CI=true), so a broken CI
// set-up can never pass by skipping; elsewhere it starts a private tuned
// cluster in a temporary directory when a test first needs one, and removes it
// after the tests.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	mainCalled.Store(true)
	if os.Getenv(EnvURL) == "" && isCI() {
		fmt.Fprintf(os.Stderr, "pgtest: %s is not set and CI=%s: these tests need PostgreSQL and are never skipped in CI.\n"+
			"pgtest: run them with `make test`, which starts a throwaway cluster and sets %s.\n", EnvURL, os.Getenv("CI"), EnvURL)
		return 1
	}
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func isCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// URL returns the test server's URL as given by TEST_DATABASE_URL, or the
// private cluster's maintenance database. Tests must not write to it; they
// take a database of their own with NewDB.
func URL(t testing.TB) string {
	t.Helper()
	if err := server(); err != nil {
		t.Fatal(err)
	}
	return srv.url
}

// NewDB returns a pool (at most 10 connections) on a new database cloned from
// the migrated template: notifyd's and River's tables exist and are empty.
// The pool is closed and the database dropped at cleanup, forcibly, so
// connections a test leaves open do not keep it alive.
func NewDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, _ := NewDBURL(t)
	return pool
}

// NewDBURL is NewDB that also returns the new database's URL, for tests that
// hand it to another process such as the daemon started as a subprocess.
func NewDBURL(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	name, err := cloneTemplate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(name); err != nil {
			t.Error(err)
		}
	})
	dbURL, err := withDatabase(srv.url, name)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := newPool(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // runs before the drop: cleanups run last-in first-out
	return pool, dbURL
}

// Tx begins a transaction on a database shared by the test binary's tests and
// rolls it back at cleanup, so nothing a test writes is seen by another. Two
// tests that write the same unique key wait for each other's rollback, so
// give rows distinct keys in parallel tests. The transaction must not be
// committed.
func Tx(t testing.TB) pgx.Tx {
	t.Helper()
	pool, err := sharedPool()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("pgtest: begin: %v", err)
	}
	t.Cleanup(func() {
		// A fresh context: the test's own is cancelled by now.
		if err := tx.Rollback(context.Background()); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("pgtest: roll back: %v", err)
		}
	})
	return tx
}

// server connects to TEST_DATABASE_URL's server, or starts the private
// cluster, once per test binary.
func server() error {
	if !mainCalled.Load() {
		return errors.New("pgtest: call pgtest.Main(m) from TestMain in this package")
	}
	srv.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		srv.err = connectServer(ctx)
	})
	return srv.err
}

func connectServer(ctx context.Context) error {
	srv.url = os.Getenv(EnvURL)
	if srv.url == "" {
		if err := startPrivateCluster(ctx); err != nil {
			return err
		}
	}
	adminURL, err := withDatabase(srv.url, "postgres")
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, adminURL)
	if err != nil {
		return err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return fmt.Errorf("pgtest: connect to the test server's postgres database (%s): %w", redact(adminURL), err)
	}
	srv.admin = pool
	return nil
}

// privateDirPrefix names the temporary directories of private clusters.
const privateDirPrefix = "notifyd-pgtest-"

func startPrivateCluster(ctx context.Context) error {
	removeAbandonedDirs()
	dir, err := os.MkdirTemp("", privateDirPrefix)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Tuned: true, Logger: logger})
	if err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("pgtest: %s is not set, and starting a private PostgreSQL failed (run `make test`, or set %s): %w", EnvURL, EnvURL, err)
	}
	srv.cluster, srv.dir, srv.url = c, dir, c.URL("postgres")
	return nil
}

// removeAbandonedDirs deletes private cluster directories that test binaries
// killed before their clean-up (a timeout panic) left behind: those older than
// an hour with no server running in them.
func removeAbandonedDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), privateDirPrefix+"*"))
	for _, dir := range dirs {
		info, err := os.Stat(dir)
		if err != nil || time.Since(info.ModTime()) < time.Hour {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); errors.Is(err, os.ErrNotExist) {
			_ = os.RemoveAll(dir)
		}
	}
}

func shutdown() error {
	var errs []error
	if shared.pool != nil {
		shared.pool.Close()
		if srv.cluster == nil { // a private cluster is thrown away whole
			errs = append(errs, dropDatabase(shared.name))
		}
	}
	if srv.admin != nil {
		srv.admin.Close()
	}
	if srv.cluster != nil {
		errs = append(errs, srv.cluster.Stop())
		if err := os.RemoveAll(srv.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func newPool(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("pgtest: parse %s: %w", redact(dbURL), err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	return pool, nil
}

// ensureTemplate makes sure the server holds a template migrated with this
// binary's migrations, once per test binary.
func ensureTemplate(ctx context.Context) error {
	if err := server(); err != nil {
		return err
	}
	tmpl.once.Do(func() {
		hash, err := migrationsHash()
		if err != nil {
			tmpl.err = err
			return
		}
		tmpl.err = buildTemplate(ctx, srv.admin, srv.url, TemplateName, hash)
	})
	return tmpl.err
}

// buildTemplate creates database name and migrates it, unless it exists with
// hash as its comment. The comment is written last, so a template whose
// build was interrupted is never taken for complete.
func buildTemplate(ctx context.Context, admin *pgxpool.Pool, serverURL, name, hash string) error {
	conn, err := admin.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgtest: template: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return fmt.Errorf("pgtest: template: lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must go back even when ctx is done.
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", templateLockKey)
	}()

	var comment *string
	err = conn.QueryRow(ctx, "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", name).Scan(&comment)
	switch {
	case err == nil && comment != nil && *comment == hash:
		return nil // built by an earlier or concurrent test binary
	case err == nil: // stale migrations or an interrupted build
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("pgtest: drop outdated template %s: %w", name, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgtest: template: %w", err)
	}

	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return fmt.Errorf("pgtest: create template %s: %w", name, err)
	}
	dbURL, err := withDatabase(serverURL, name)
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, dbURL)
	if err != nil {
		return err
	}
	err = stores.Migrate(ctx, pool, "", nil)
	// Every connection must be gone before the database can be cloned.
	pool.Close()
	if err != nil {
		return fmt.Errorf("pgtest: migrate template %s: %w", name, err)
	}
	// Nobody may connect to the template from now on: CREATE DATABASE …
	// TEMPLATE fails while anyone is connected to it.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("pgtest: template %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "COMMENT ON DATABASE "+ident+" IS "+sqlLiteral(hash)); err != nil {
		return fmt.Errorf("pgtest: template %s: %w", name, err)
	}
	return nil
}

// migrationsHash identifies the migration set: notifyd's embedded migrations
// and River's (which change with River's version).
func migrationsHash() (string, error) {
	h := sha256.New()
	// Bump the version when stores.Migrate changes what it does beside the
	// migrations (v2: it grants the SQL API to notifyd_app; v3: it applies
	// the function files).
	io.WriteString(h, "notifyd pgtest template v3\n")
	sources := []struct {
		name string
		fsys fs.FS
	}{
		{"notifyd", notifysql.MigrationsDir()},
		{"notifyd-functions", notifysql.FunctionsDir()},
		{"river", riverpgxv5.New(nil).GetMigrationFS("main")},
	}
	for _, src := range sources {
		err := fs.WalkDir(src.fsys, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := fs.ReadFile(src.fsys, path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s/%s %d\n", src.name, path, len(b))
			h.Write(b)
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("pgtest: hash %s migrations: %w", src.name, err)
		}
	}
	return "notifyd test template, migrations sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// cloneTemplate creates a uniquely named database from the template and
// returns its name.
func cloneTemplate(ctx context.Context) (string, error) {
	if err := ensureTemplate(ctx); err != nil {
		return "", err
	}
	for attempt := 0; ; attempt++ {
		name := fmt.Sprintf("notifyd_test_%d_%d", os.Getpid(), dbCounter.Add(1))
		_, err := srv.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{TemplateName}.Sanitize())
		if err == nil {
			return name, nil
		}
		var pgErr *pgconn.PgError
		retry := errors.As(err, &pgErr) && attempt < 20 &&
			(pgErr.Code == "42P04" || // duplicate_database: left by an earlier process with our PID
				pgErr.Code == "55006") // object_in_use: someone is connected to the template
		if !retry {
			return "", fmt.Errorf("pgtest: create database %s from %s: %w", name, TemplateName, err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("pgtest: create database %s from %s: %w", name, TemplateName, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := srv.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgtest: drop database %s: %w", name, err)
	}
	return nil
}

// sharedPool returns the pool on the test binary's shared database, which Tx
// uses, creating the database on first use.
func sharedPool() (*pgxpool.Pool, error) {
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		name, err := cloneTemplate(ctx)
		if err != nil {
			shared.err = err
			return
		}
		shared.name = name
		dbURL, err := withDatabase(srv.url, name)
		if err != nil {
			shared.err = err
			return
		}
		shared.pool, shared.err = newPool(ctx, dbURL)
	})
	return shared.pool, shared.err
}

// withDatabase returns connection string connString pointing at database
// name instead, in the same form: URL or keyword/value.
func withDatabase(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("pgtest: parse %s: %w", EnvURL, err)
		}
		u.Path, u.RawPath = "/"+name, ""
		q := u.Query()
		q.Del("dbname") // a query parameter would override the path
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// In keyword/value form the last setting of a keyword wins.
	return strings.TrimSpace(connString) + " dbname=" + quoteDSN(name), nil
}

// sqlLiteral quotes s as an SQL string literal.
func sqlLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// quoteDSN quotes s as a value in a keyword/value connection string.
func quoteDSN(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

var dsnPassword = regexp.MustCompile(`password\s*=\s*('(\\.|[^'])*'|\S+)`)

// redact hides a password in a connection string for error messages.
func redact(connString string) string {
	if u, err := url.Parse(connString); err == nil && u.Scheme != "" {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return dsnPassword.ReplaceAllString(connString, "password=xxxxx")
}

// ExampleDB is NewDBURL for runnable Example functions, which have no
// testing.TB: it returns a pool on a fresh migrated database, its URL, and a
// cleanup that closes the pool and drops the database. It panics on failure
// (an example cannot report an error any other way).
func ExampleDB() (*pgxpool.Pool, string, func()) {
	if err := server(); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	name, err := cloneTemplate(ctx)
	if err != nil {
		panic(err)
	}
	dbURL, err := withDatabase(srv.url, name)
	if err != nil {
		panic(err)
	}
	pool, err := newPool(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	return pool, dbURL, func() {
		pool.Close()
		_ = dropDatabase(name)
	}
}
