// Package clients_test runs the Node, Python and Ruby packages' own test
// suites against a real notifyd: a daemon (workers and the HTTP API on
// 127.0.0.1) on a fresh database cloned from the migrated template. Each
// suite gets, in its environment:
//
//   - NOTIFYD_TEST_APP_URL: the database as a LOGIN role whose only right is
//     membership in notifyd_app (and INSERT/SELECT on the table comments,
//     the application's own table), which the clients connect as;
//   - NOTIFYD_TEST_DATABASE_URL: the database as its owner, which the tests
//     read notifyd's tables with to check what was (not) written;
//   - NOTIFYD_TEST_API and NOTIFYD_TEST_TOKEN_SECRET: the daemon's HTTP API
//     and its http.token_secret, to check that a minted token reads the inbox;
//   - NOTIFYD_TEST_TYPES_DIR: `notifyd gen types` output for the test config
//     (notifiers.ts, notifiers.py), for the type-checking tests.
//
// `make test` runs it like every Go test. Under CI=true a missing tool fails
// the test; elsewhere it skips with a message saying what to install.
package clients_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestNodeClient(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("npm"); err != nil {
		missing(t, "npm (Node.js 20 or later) is not installed")
	}
	if _, err := os.Stat(filepath.Join("node", "node_modules", "typescript")); err != nil {
		missing(t, "clients/node/node_modules is missing: run `npm ci` in clients/node")
	}
	// The drivers the transaction guard is tested with (test/drivers.test.mjs).
	if _, err := os.Stat(filepath.Join("node", "testdata", "drivers", "node_modules", "pg-oldest")); err != nil {
		missing(t, "clients/node/testdata/drivers/node_modules is missing: run `npm ci` in clients/node/testdata/drivers")
	}
	env := startDaemon(t)
	run(t, "node", env, "npm", "test")
}

func TestNodeExample(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("npm"); err != nil {
		missing(t, "npm (Node.js 20 or later) is not installed")
	}
	dir := filepath.Join("..", "examples", "node-express")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@notifyd", "client")); err != nil {
		missing(t, "examples/node-express/node_modules is missing: run `npm ci` in examples/node-express")
	}
	env := startDaemon(t)
	run(t, dir, env, "npm", "test")

	// The example copied outside the repository, as its README says: the
	// client from its npm pack tarball in place of the file: dependency,
	// express and pg from npm's cache, then its tests.
	out := t.TempDir()
	app := filepath.Join(out, "node-express")
	copyDir(t, dir, app)
	abs, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	run(t, out, env, "npm", "pack", abs, "--pack-destination", out, "--loglevel=error")
	tarballs, _ := filepath.Glob(filepath.Join(out, "notifyd-client-*.tgz"))
	if len(tarballs) != 1 {
		t.Fatalf("npm pack wrote %v", tarballs)
	}
	run(t, app, env, "npm", "install", tarballs[0], "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")
	run(t, app, startDaemon(t), "npm", "test") // a database of its own: the suite expects an empty inbox
}

func TestPythonClient(t *testing.T) {
	t.Parallel()
	python, why := pythonWithDrivers()
	if python == "" {
		missing(t, why)
	}
	env := startDaemon(t)
	run(t, "python", env, python, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
}

func TestRubyClient(t *testing.T) {
	t.Parallel()
	ruby, err := exec.LookPath("ruby")
	if err != nil {
		missing(t, "ruby is not installed: install Debian's ruby, ruby-pg and ruby-activerecord")
	}
	for _, lib := range []string{"pg", "active_record"} {
		if err := exec.Command(ruby, "-e", "require '"+lib+"'").Run(); err != nil {
			missing(t, "ruby cannot require "+lib+": install Debian's ruby-pg and ruby-activerecord")
		}
	}
	env := startDaemon(t)
	run(t, "ruby", env, ruby, "-Ilib", "-Itest", "-e", `Dir["test/*_test.rb"].sort.each { |f| require File.expand_path(f) }`)
}

// copyDir copies the files of src to dst, leaving out node_modules.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// missing fails the test under CI, where .ci/run installs every tool, and
// skips it elsewhere.
func missing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// pythonWithDrivers returns the first interpreter that imports psycopg 3,
// psycopg2, Django, SQLAlchemy and mypy: NOTIFYD_PYTHON, then Debian's
// /usr/bin/python3, then python3 on PATH (a python3 earlier on PATH, from
// pyenv say, does not see Debian's packages). When there is none it says
// what is missing.
func pythonWithDrivers() (string, string) {
	candidates := []string{"/usr/bin/python3", "python3"}
	if p := os.Getenv("NOTIFYD_PYTHON"); p != "" {
		candidates = []string{p}
	}
	why := "no python3 found"
	for _, p := range candidates {
		out, err := exec.Command(p, "-c", "import psycopg, psycopg2, django, sqlalchemy, mypy").CombinedOutput()
		if err == nil {
			return p, ""
		}
		why = fmt.Sprintf("%s: %s (install Debian's python3-psycopg python3-psycopg2 python3-django python3-sqlalchemy mypy, or set NOTIFYD_PYTHON)",
			p, strings.TrimSpace(lastLine(string(out))))
	}
	return "", why
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

var roles atomic.Int32

// clientEnv is what a client's test suite is given (see the package comment).
type clientEnv struct {
	ownerURL, appURL, api, typesDir string
}

func (e clientEnv) environ() []string {
	return append(os.Environ(),
		"NOTIFYD_TEST_DATABASE_URL="+e.ownerURL,
		"NOTIFYD_TEST_APP_URL="+e.appURL,
		"NOTIFYD_TEST_API="+e.api,
		"NOTIFYD_TEST_TOKEN_SECRET="+servertest.TokenSecret,
		"NOTIFYD_TEST_TYPES_DIR="+e.typesDir,
	)
}

// startDaemon runs notifyd (workers and the HTTP API on 127.0.0.1) on a new
// database until the test ends, creates the application's role and table,
// and writes the generated types. server.New publishes the test config's
// notifiers, as a daemon does at start.
func startDaemon(t *testing.T) clientEnv { return startDaemonWith(t, "") }

// startDaemonWith is startDaemon with yaml for its config (BaseConfig when
// empty).
func startDaemonWith(t *testing.T, yaml string) clientEnv {
	t.Helper()
	ctx := context.Background()
	owner, dbURL := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, yaml)
	cfg.Database.URL = dbURL
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := server.New(ctx, server.Options{Config: cfg, Listener: ln, Logger: servertest.Logger()})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("daemon: %v", err)
		}
		d.Close()
	})

	// The application's role: LOGIN, notifyd_app, and its own table.
	role := fmt.Sprintf("clients_app_%d_%d", os.Getpid(), roles.Add(1))
	ident := pgx.Identifier{role}.Sanitize()
	for _, stmt := range []string{
		"CREATE ROLE " + ident + " LOGIN PASSWORD 'app-password'",
		"GRANT " + stores.AppRole + " TO " + ident,
		"CREATE TABLE comments (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, post_id bigint NOT NULL DEFAULT 0, body text NOT NULL)",
		"GRANT SELECT, INSERT ON comments TO " + ident,
		// The tenant the suites send for (an admin creates tenants).
		"INSERT INTO notify_tenants (id, name) VALUES ('acme', 'Acme') ON CONFLICT (id) DO NOTHING",
	} {
		if _, err := owner.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		// Registered after the daemon's cleanup, so it runs first: the
		// clients' connections are closed when their suite has ended.
		if _, err := owner.Exec(context.Background(), "DROP OWNED BY "+ident+"; DROP ROLE "+ident); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "app-password")

	types := genTypes(t, yaml)
	return clientEnv{ownerURL: dbURL, appURL: u.String(), api: "http://" + ln.Addr().String(), typesDir: types}
}

// genTypes writes `notifyd gen types` output for the config yaml
// (BaseConfig when empty) to a new directory, as notifiers.ts and
// notifiers.py, and returns it: the notifyd binary, built once into a
// temporary directory, generates them as an application would.
func genTypes(t *testing.T, yaml string) string {
	t.Helper()
	if yaml == "" {
		yaml = servertest.BaseConfig
	}
	tmp, types := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(tmp, "notifyd")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/notifyd")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/notifyd: %v\n%s", err, out)
	}
	config := filepath.Join(tmp, "notifyd.yaml")
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	for lang, file := range map[string]string{"ts": "notifiers.ts", "python": "notifiers.py"} {
		gen := exec.CommandContext(ctx, bin, "gen", "types", "-lang", lang, "-config", config, "-o", filepath.Join(types, file))
		if out, err := gen.CombinedOutput(); err != nil {
			t.Fatalf("notifyd gen types -lang %s: %v\n%s", lang, err, out)
		}
	}
	return types
}

// run runs a client's test command in its directory and fails with its
// output when it fails; with -v the output is logged either way.
func run(t *testing.T, dir string, env clientEnv, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env.environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	t.Logf("%s %s in %s:\n%s", name, strings.Join(args, " "), dir, out)
}
