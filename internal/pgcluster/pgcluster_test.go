package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// startCluster starts a tuned cluster in dir (a fresh temporary directory when
// empty) and stops it at cleanup.
func startCluster(t *testing.T, dir string, tuned bool) *Cluster {
	t.Helper()
	if dir == "" {
		dir = reachableTempDir(t)
	}
	c, err := Start(t.Context(), Options{Dir: dir, Tuned: tuned})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// reachableTempDir is a t.TempDir() that the postgres account can reach when
// the test runs as root: the test's own temporary directories (and only
// those) are made searchable, 0711, so the cluster lives in Dir itself.
func reachableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func connect(t *testing.T, c *Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	if err != nil {
		t.Fatalf("connect to %s: %v", c.URL("postgres"), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func socketDirOf(t *testing.T, c *Cluster) string {
	t.Helper()
	u, err := url.Parse(c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("host")
}

func TestStartStopReuse(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := filepath.Join(reachableTempDir(t), "cluster") // does not exist yet

	c := startCluster(t, dir, true)
	if got := c.Settings(); !strings.Contains(got, "fsync=off") || !strings.Contains(got, "shared_buffers=256MB") || !strings.Contains(got, "max_connections=300") {
		t.Errorf("tuned Settings() = %q", got)
	}
	sock := socketDirOf(t, c)
	if sock != filepath.Join(dir, "run") {
		t.Errorf("socket dir = %s, want %s/run", sock, dir)
	}
	info, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("socket dir mode = %o, want 700: trust authentication relies on it", perm)
	}
	conn := connect(t, c)
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('survives')"); err != nil {
		t.Fatal(err)
	}
	var tcp string
	if err := conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&tcp); err != nil || tcp != "" {
		t.Errorf("listen_addresses = %q, %v; want empty (no TCP)", tcp, err)
	}
	conn.Close(ctx)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := pgx.Connect(ctx, c.URL("postgres")); err == nil {
		t.Fatal("connected after Stop")
	}

	// The same Dir again, untuned: the data is still there.
	c2 := startCluster(t, dir, false)
	if got := c2.Settings(); !strings.Contains(got, "fsync=on") {
		t.Errorf("untuned Settings() = %q, want fsync=on", got)
	}
	var v string
	if err := connect(t, c2).QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != "survives" {
		t.Fatalf("reused cluster: got %q, %v", v, err)
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := startCluster(t, "", true)
	before := connect(t, c)
	urlBefore := c.URL("postgres")
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := before.Ping(ctx); err == nil {
		t.Error("a connection from before Restart still works")
	}
	if c.URL("postgres") != urlBefore {
		t.Errorf("URL changed across Restart: %s -> %s", urlBefore, c.URL("postgres"))
	}
	if err := connect(t, c).Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Settings(), "fsync=off") {
		t.Errorf("Settings() after Restart = %q, want the tuned settings kept", c.Settings())
	}
}

func TestRestartAfterKill(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := startCluster(t, "", true)
	connect(t, c)
	c.mu.Lock()
	srv := c.srv
	c.mu.Unlock()
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-srv.exited
	if _, err := os.Stat(filepath.Join(c.DataDir(), "postmaster.pid")); err != nil {
		t.Fatalf("a killed server should leave postmaster.pid behind: %v", err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := connect(t, c).Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lock file whose PID now belongs to another live process of the same user
// makes PostgreSQL refuse to start ("lock file already exists"); Start must
// see that the process is not a server for this directory. Here the PID is
// another cluster's postmaster, as happens when many clusters run as postgres.
func TestStartWithStaleLockFiles(t *testing.T) {
	t.Parallel()
	other := startCluster(t, "", true)
	other.mu.Lock()
	otherPID := other.srv.cmd.Process.Pid
	other.mu.Unlock()

	dir := reachableTempDir(t)
	c := startCluster(t, dir, true)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%d\n%s\n1700000000\n5432\n%s\n\n  5432001         0\nready   \n", otherPID, c.DataDir(), filepath.Join(dir, "run"))
	for _, path := range []string{filepath.Join(c.DataDir(), "postmaster.pid"), filepath.Join(dir, "run", ".s.PGSQL.5432.lock")} {
		if err := os.WriteFile(path, []byte(stale), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := c.chown(path); err != nil { // as the killed server would have left it
			t.Fatal(err)
		}
	}
	c2 := startCluster(t, dir, true)
	if err := connect(t, c2).Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := connect(t, other).Ping(t.Context()); err != nil {
		t.Fatalf("the other cluster was disturbed: %v", err)
	}
}

func TestStartRefusesARunningServer(t *testing.T) {
	// Not parallel: shortens the wait for a server that is shutting down.
	defer func(d time.Duration) { liveServerWait = d }(liveServerWait)
	liveServerWait = 200 * time.Millisecond

	dir := reachableTempDir(t)
	startCluster(t, dir, true)
	c, err := Start(t.Context(), Options{Dir: dir, Tuned: true})
	if err == nil {
		c.Stop()
		t.Fatal("a second Start on a running cluster's Dir succeeded")
	}
	if !strings.Contains(err.Error(), "already running") {
		t.Errorf("error = %v, want it to say a server is already running", err)
	}
}

func TestLongDirPutsSocketInTmp(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(reachableTempDir(t), strings.Repeat("long-directory-name-", 6))
	c := startCluster(t, dir, true)
	sock := socketDirOf(t, c)
	if strings.HasPrefix(sock, dir) || len(sock) > maxSocketDirLen {
		t.Errorf("socket dir = %s, want a short directory outside %s", sock, dir)
	}
	if err := connect(t, c).Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stop left the temporary socket dir %s behind (%v)", sock, err)
	}
}

func TestStartFailureShowsServerLog(t *testing.T) {
	t.Parallel()
	dir := reachableTempDir(t)
	c := startCluster(t, dir, true)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(c.DataDir(), "global", "pg_control")); err != nil {
		t.Fatal(err)
	}
	c2, err := Start(t.Context(), Options{Dir: dir, Tuned: true})
	if err == nil {
		c2.Stop()
		t.Fatal("Start succeeded without pg_control")
	}
	if !strings.Contains(err.Error(), "server log") || !strings.Contains(err.Error(), "pg_control") {
		t.Errorf("error does not carry the server log: %v", err)
	}
}

func TestStartRejectsOtherMajorVersion(t *testing.T) {
	t.Parallel()
	dir := reachableTempDir(t)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "PG_VERSION"), []byte("9.6\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Start(t.Context(), Options{Dir: dir})
	if err == nil {
		c.Stop()
		t.Fatal("Start accepted a 9.6 data directory")
	}
	if !strings.Contains(err.Error(), "PostgreSQL 9.6 cluster") {
		t.Errorf("error = %v, want it to name the data directory's version", err)
	}
}

func TestEnsureDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := startCluster(t, "", true)
	for range 2 { // the second call finds it
		if err := c.EnsureDatabase(ctx, "notifyd"); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, c.URL("notifyd"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var name string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil || name != "notifyd" {
		t.Fatalf("current_database() = %q, %v", name, err)
	}
}

func TestStartRequiresDir(t *testing.T) {
	t.Parallel()
	if _, err := Start(t.Context(), Options{}); err == nil {
		t.Fatal("Start without Dir succeeded")
	}
}

func TestFindBinaries(t *testing.T) {
	// Not parallel: sets PG_BIN.
	dir, err := FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range requiredBinaries {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("FindBinaries() = %s without %s", dir, name)
		}
	}

	t.Setenv("PG_BIN", dir)
	if got, err := FindBinaries(); err != nil || got != dir {
		t.Errorf("with PG_BIN=%s: FindBinaries() = %q, %v", dir, got, err)
	}
	empty := t.TempDir()
	t.Setenv("PG_BIN", empty)
	if _, err := FindBinaries(); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), empty) {
		t.Errorf("with an empty PG_BIN: err = %v, want ErrNotInstalled naming %s", err, empty)
	}
	if err := EnsureInstalled(t.Context(), nil); err == nil {
		t.Error("EnsureInstalled with a bad PG_BIN succeeded; it must not install over an explicit choice")
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int // sign
	}{
		{"15", "9.6", 1},
		{"9.6", "15", -1},
		{"16", "15", 1},
		{"15", "15", 0},
		{"9.6", "9.5", 1},
		{"devel", "12", -1},
	}
	for _, tt := range tests {
		got := compareVersions(tt.a, tt.b)
		if (got > 0) != (tt.want > 0) || (got < 0) != (tt.want < 0) {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestClosedParentIsNotOpened: run as root with Dir below a directory the
// postgres account cannot enter (a home directory, say), the cluster is not
// reached by opening that directory: it lives in a private 0700 directory of
// postgres's under /tmp, found again by the next run on the same Dir, and
// the closed directory's mode is unchanged.
func TestClosedParentIsNotOpened(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only a run as root hands the cluster to another account")
	}
	home := t.TempDir() // 0700, root's: closed to postgres
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, "project", ".notifyd", "postgres")
	c := startCluster(t, dir, true)
	t.Cleanup(func() { _ = os.RemoveAll(c.Dir()) })
	if info, err := os.Stat(home); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("the closed directory was changed: %v %v", info.Mode(), err)
	}
	if strings.HasPrefix(c.Dir(), home) {
		t.Fatalf("the cluster lives in %s, under the closed directory", c.Dir())
	}
	info, err := os.Lstat(c.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := info.Sys().(*syscall.Stat_t); !ok || info.Mode().Perm() != 0o700 || int(st.Uid) == 0 {
		t.Fatalf("cluster directory %s: mode %v, owner %v: want 0700 and user postgres's", c.Dir(), info.Mode(), info.Sys())
	}
	conn := connect(t, c)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE kept (x int)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(t.Context())
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	// The next run on the same Dir finds the same cluster.
	c2 := startCluster(t, dir, true)
	if c2.Dir() != c.Dir() {
		t.Fatalf("second run in %s, first in %s", c2.Dir(), c.Dir())
	}
	var n int
	if err := connect(t, c2).QueryRow(t.Context(), "SELECT count(*) FROM kept").Scan(&n); err != nil {
		t.Fatalf("the data of the first run is gone: %v", err)
	}
}
