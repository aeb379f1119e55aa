// Package clients_test runs the Node and Python clients' own test suites
// against a real notifyd: a daemon (workers only) on a fresh database cloned
// from the migrated template, with the database's URL in
// NOTIFYD_TEST_DATABASE_URL. `make test` runs it like every Go test. Under
// CI=true a missing tool (node_modules, python3 with psycopg) fails the test;
// elsewhere it skips with a message saying what to install.
package clients_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/testing/notifydtest"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
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
	url := startDaemon(t)
	run(t, "node", url, "npm", "test")
}

func TestPythonClient(t *testing.T) {
	t.Parallel()
	python := pythonWithPsycopg()
	if python == "" {
		missing(t, "no python3 can import psycopg 3: install Debian's python3-psycopg (or set NOTIFYD_PYTHON)")
	}
	url := startDaemon(t)
	run(t, "python", url, python, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
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

// pythonWithPsycopg returns the first interpreter that imports psycopg:
// NOTIFYD_PYTHON, then python3 on PATH, then Debian's /usr/bin/python3 (a
// python3 earlier on PATH, from pyenv say, does not see Debian's packages).
func pythonWithPsycopg() string {
	candidates := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("NOTIFYD_PYTHON"); p != "" {
		candidates = []string{p}
	}
	for _, p := range candidates {
		if err := exec.Command(p, "-c", "import psycopg").Run(); err == nil {
			return p
		}
	}
	return ""
}

// startDaemon runs notifyd's workers on a new database until the test ends
// and returns the database's URL. server.New publishes the test config's
// notifiers, as a daemon does at start.
func startDaemon(t *testing.T) string {
	t.Helper()
	_, url := pgtest.NewDBURL(t)
	cfg := notifydtest.Config(t, "")
	cfg.Database.URL = url
	d, err := server.New(context.Background(), server.Options{Config: cfg, NoHTTP: true, Logger: notifydtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("daemon: %v", err)
		}
		d.Close()
	})
	return url
}

// run runs a client's test command in its directory and fails with its
// output when it fails; with -v the output is logged either way.
func run(t *testing.T, dir, url, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOTIFYD_TEST_DATABASE_URL="+url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in clients/%s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	t.Logf("%s %s in clients/%s:\n%s", name, strings.Join(args, " "), dir, out)
}
