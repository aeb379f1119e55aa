// Package pgcluster runs a private PostgreSQL server for development, tests
// and benchmarks.
//
// The server listens only on a Unix socket in a directory that only its owner
// can enter (no TCP port, so any number of clusters run side by side), trusts
// every local connection as the superuser "postgres", and lives as long as the
// process that started it: Stop shuts it down, and on Linux the kernel shuts
// it down (fast mode) if that process dies first.
//
// PostgreSQL refuses to run as root. When the process is root, every server
// program runs as the system user "postgres" (created by the distribution's
// postgresql package), and Start hands it the directories it needs.
package pgcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Options configures Start.
type Options struct {
	// Dir holds the cluster: data/ (the data directory), postgresql.log (the
	// server log) and run/ (the Unix socket). It is created if missing and
	// reused, data and all, when it already holds a cluster, so a development
	// database survives between runs. Required. When Dir's path is too long
	// for a Unix socket (about 100 bytes) the socket goes to a private
	// directory under /tmp instead, removed by Stop.
	//
	// Run as root, the server runs as the postgres account, which must be
	// able to reach Dir. When a directory above Dir is closed to it (a home
	// directory, t.TempDir's 0700 parents), the cluster lives instead in a
	// directory of its own under /tmp, owned by postgres and mode 0700, named
	// after Dir so that the next run on the same Dir finds it again
	// (Cluster.Dir says where). Directories above Dir are never opened up.
	Dir string

	// Tuned trades durability for speed, for tests and benchmarks: fsync,
	// synchronous_commit and full_page_writes off, wal_level minimal,
	// shared_buffers=256MB, max_connections=300, rare checkpoints, no JIT.
	// The data survives a clean Stop and a killed process, not a machine
	// crash. False keeps PostgreSQL's defaults. The choice applies to this
	// run only; a reused Dir can be started either way.
	Tuned bool

	// Replication keeps what a streaming standby needs from its primary when
	// Tuned is set: wal_level=replica and WAL senders (Tuned alone has
	// wal_level=minimal and none). StartStandby starts its standbys with it
	// too: a hot standby needs the primary's settings. Without Tuned,
	// PostgreSQL's defaults already allow standbys.
	Replication bool

	// Logger receives progress and recovery messages (cluster created, stale
	// lock file removed). Nil discards them.
	Logger *slog.Logger
}

// Cluster is a running PostgreSQL server started by Start. Its methods are
// safe for concurrent use.
type Cluster struct {
	dir          string
	dataDir      string
	socketDir    string
	tmpSocketDir bool // socketDir was made under /tmp and is removed by Stop
	logPath      string
	binDir       string
	tuned        bool
	replication  bool
	owner        *osUser
	logger       *slog.Logger

	mu       sync.Mutex
	srv      *server // the running postmaster; nil when stopped
	settings string
	stopped  bool
}

// server is one run of the postmaster, our child process.
type server struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has exited and been reaped
	waitErr error         // cmd's exit status, set before exited closes
}

// port is the server's port number. Nothing listens on TCP; the number only
// names the socket file (.s.PGSQL.5432) in the cluster's private directory.
const port = 5432

// maxSocketDirLen keeps "<dir>/.s.PGSQL.5432" within the 107 usable bytes of
// a Unix socket address (sun_path), with room to spare.
const maxSocketDirLen = 90

// startTimeout bounds the wait for a started server to accept connections;
// crash recovery of a large development database counts against it.
const startTimeout = 2 * time.Minute

// stopTimeout bounds a fast shutdown before the server is killed.
const stopTimeout = time.Minute

// liveServerWait is how long Start waits for a server still running on the
// same data directory to go away before reporting it.
var liveServerWait = 15 * time.Second

// tunedSettings are the server settings Options.Tuned applies.
var tunedSettings = []string{
	"fsync=off",
	"synchronous_commit=off",
	"full_page_writes=off",
	"wal_level=minimal",
	"max_wal_senders=0",
	"shared_buffers=256MB",
	"max_connections=300",
	"max_wal_size=2GB",
	"checkpoint_timeout=30min",
	"jit=off",
}

// summarySettings are the settings Settings reports, read back from the
// server so the summary is true whatever the defaults are.
var summarySettings = []string{
	"fsync", "synchronous_commit", "full_page_writes", "wal_level",
	"shared_buffers", "max_connections", "jit", "server_version",
}

// Start starts a PostgreSQL server in opts.Dir, creating the cluster first
// when Dir does not hold one, and returns once the server accepts
// connections. ctx bounds only the start, not the server's life; call Stop
// when done. A postmaster.pid or socket lock file left by a killed server is
// removed; a server still running on the same Dir is an error. When the
// server fails to start, the error includes the end of its log.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("start PostgreSQL: Options.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	c, err := start(ctx, dir, opts)
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL in %s: %w", dir, err)
	}
	return c, nil
}

func start(ctx context.Context, dir string, opts Options) (*Cluster, error) {
	binDir, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	owner, err := serverUser()
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		dir:         dir,
		binDir:      binDir,
		tuned:       opts.Tuned,
		replication: opts.Replication,
		owner:       owner,
		logger:      opts.Logger,
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if err := c.prepareDir(); err != nil {
		return nil, err
	}
	c.dataDir = filepath.Join(c.dir, "data")
	c.logPath = filepath.Join(c.dir, "postgresql.log")
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	if err := c.prepareSocketDir(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.startServer(ctx); err != nil {
		c.removeTmpSocketDir()
		return nil, err
	}
	return c, nil
}

// StartStandby starts a streaming standby of primary in opts.Dir: a copy of
// primary's data made with `pg_basebackup -R` (which writes the
// primary_conninfo and the standby.signal file) when Dir holds no cluster
// yet, then a server on a Unix socket of its own, replaying primary's WAL
// as it streams in and answering read-only queries (hot standby). primary
// must allow standbys: started without Tuned, or with Replication.
// opts.Tuned applies as for Start (with Replication implied). Stop it like
// any Cluster; stopping primary first leaves it retrying to connect.
func StartStandby(ctx context.Context, primary *Cluster, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("start standby: Options.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start standby: %w", err)
	}
	c := &Cluster{dir: dir, binDir: primary.binDir, tuned: opts.Tuned, replication: true, owner: primary.owner,
		logger: opts.Logger}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if err := c.prepareDir(); err != nil {
		return nil, fmt.Errorf("start standby in %s: %w", dir, err)
	}
	c.dataDir = filepath.Join(c.dir, "data")
	c.logPath = filepath.Join(c.dir, "postgresql.log")
	if err := c.baseBackup(ctx, primary); err != nil {
		return nil, fmt.Errorf("start standby in %s: %w", dir, err)
	}
	if err := c.prepareSocketDir(); err != nil {
		return nil, fmt.Errorf("start standby in %s: %w", dir, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.startServer(ctx); err != nil {
		c.removeTmpSocketDir()
		return nil, fmt.Errorf("start standby in %s: %w", dir, err)
	}
	return c, nil
}

// baseBackup copies primary's data into c's data directory with
// pg_basebackup -R, unless it already holds a cluster. Like initdb, it copies
// into a scratch directory and renames it into place.
func (c *Cluster) baseBackup(ctx context.Context, primary *Cluster) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		return c.chownTree(c.dataDir)
	}
	scratch := filepath.Join(c.dir, "data.basebackup")
	if err := os.RemoveAll(scratch); err != nil {
		return err
	}
	out, err := c.command(ctx, "pg_basebackup", "-D", scratch, "-R", "-X", "stream", "-c", "fast",
		"-h", primary.socketDir, "-p", strconv.Itoa(port), "-U", "postgres").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_basebackup: %w\n%s", err, tail(out, 30))
	}
	// The copy's postmaster.pid and socket settings are the primary's;
	// the server's command line overrides the settings, and a copy holds no
	// postmaster.pid (pg_basebackup leaves it out).
	return os.Rename(scratch, c.dataDir)
}

// URL returns a connection string for database dbname on this server, as the
// superuser postgres over the Unix socket: a postgres:// URL with the socket
// directory in its host parameter, which pgx, libpq and psql all accept.
func (c *Cluster) URL(dbname string) string {
	q := url.Values{}
	q.Set("host", c.socketDir)
	q.Set("port", strconv.Itoa(port))
	q.Set("sslmode", "disable")
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + dbname, RawQuery: q.Encode()}
	return u.String()
}

// Dir returns the directory the cluster lives in: Options.Dir, or, run as
// root with Options.Dir out of the postgres account's reach, the private
// directory under /tmp that stands in for it.
func (c *Cluster) Dir() string { return c.dir }

// DataDir returns the server's data directory (Dir()/data).
func (c *Cluster) DataDir() string { return c.dataDir }

// LogFile returns the path of the server log (Options.Dir/postgresql.log). Each
// start appends to it.
func (c *Cluster) LogFile() string { return c.logPath }

// Settings returns a one-line summary of the settings that matter for speed
// and durability, as the running server reports them, such as
// "fsync=off synchronous_commit=off full_page_writes=off wal_level=minimal
// shared_buffers=256MB max_connections=300 jit=off server_version=15.14". It
// is meant for benchmark output.
func (c *Cluster) Settings() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings
}

// EnsureDatabase creates database name unless it exists.
func (c *Cluster) EnsureDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created meanwhile
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// Stop shuts the server down in fast mode (`pg_ctl stop -m fast`: open
// sessions are disconnected, committed data is kept) and removes the socket
// directory if Start made one under /tmp. Options.Dir stays. Calling Stop
// again does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	err := c.stopServer()
	c.removeTmpSocketDir()
	if err != nil {
		return fmt.Errorf("stop PostgreSQL in %s: %w", c.dir, err)
	}
	return nil
}

// Restart shuts the server down in fast mode and starts it again with the
// same settings and socket, as `pg_ctl restart -m fast` would; URL stays
// valid. Open connections are broken. It also brings back a server that
// crashed or was killed. ctx bounds the start.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return fmt.Errorf("restart PostgreSQL in %s: cluster was stopped", c.dir)
	}
	if err := c.stopServer(); err != nil {
		return fmt.Errorf("restart PostgreSQL in %s: %w", c.dir, err)
	}
	if err := c.startServer(ctx); err != nil {
		return fmt.Errorf("restart PostgreSQL in %s: %w", c.dir, err)
	}
	return nil
}

// Promote ends a standby's recovery and makes it a primary that accepts
// writes (pg_ctl promote, waiting for it); URL stays valid.
func (c *Cluster) Promote(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, err := c.command(ctx, "pg_ctl", "promote", "-w", "-t", "60", "-D", c.dataDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("promote PostgreSQL in %s: %w: %s", c.dir, err, out)
	}
	return nil
}

// osUser is the account the server programs run as when we are root.
type osUser struct {
	uid, gid int
	cred     *syscall.Credential
}

// serverUser returns the postgres account when running as root (PostgreSQL
// refuses root), and nil otherwise: then the programs run as ourselves.
func serverUser() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the system user postgres to run the server as (the postgresql package creates it): %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("user postgres: uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("user postgres: gid %q: %w", u.Gid, err)
	}
	return &osUser{uid: uid, gid: gid, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}, nil
}

// chown gives path to the server's account; a no-op when not root.
func (c *Cluster) chown(path string) error {
	if c.owner == nil {
		return nil
	}
	if err := os.Lchown(path, c.owner.uid, c.owner.gid); err != nil {
		return fmt.Errorf("give %s to user postgres: %w", path, err)
	}
	return nil
}

func (c *Cluster) prepareDir() error {
	if c.owner == nil {
		return os.MkdirAll(c.dir, 0o700)
	}
	// Parents that do not exist yet are ours to make: searchable (0711), not
	// listable, so that postgres can walk through them.
	if err := os.MkdirAll(filepath.Dir(c.dir), 0o711); err != nil {
		return err
	}
	if closed := c.closedAncestor(filepath.Dir(c.dir)); closed != "" {
		// Opening the closed directory (o+x) would let every account on the
		// machine walk into it: the caller's home, say. The cluster moves
		// to a directory that belongs to postgres instead.
		own, err := c.ownDir()
		if err != nil {
			return err
		}
		c.logger.Info("user postgres cannot reach the cluster directory; the cluster lives in a private directory of its own",
			"dir", c.dir, "closed", closed, "cluster_dir", own)
		c.dir = own
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	return c.chown(c.dir)
}

// closedAncestor returns the first directory, from dir up to /, that the
// postgres account cannot search, or "" when it can reach dir. Nothing is
// changed.
func (c *Cluster) closedAncestor(dir string) string {
	for {
		info, err := os.Stat(dir)
		if err == nil {
			st, ok := info.Sys().(*syscall.Stat_t)
			mode := info.Mode().Perm()
			canSearch := mode&0o001 != 0 ||
				(ok && int(st.Uid) == c.owner.uid && mode&0o100 != 0) ||
				(ok && int(st.Gid) == c.owner.gid && mode&0o010 != 0)
			if !canSearch {
				return dir
			}
		} else {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// ownDir makes (or, on a later run for the same Dir, finds) the private
// directory that stands in for a Dir postgres cannot reach:
// /tmp/notifyd-pg-<hash of Dir>, owned by postgres, mode 0700. One that
// exists must be exactly that (a directory, not a link, postgres's, 0700):
// /tmp is shared, and anything else may be somebody else's.
func (c *Cluster) ownDir() (string, error) {
	sum := sha256.Sum256([]byte(c.dir))
	dir := filepath.Join("/tmp", "notifyd-pg-"+hex.EncodeToString(sum[:8]))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("private cluster directory: %w", err)
	} else if err == nil {
		if err := c.chown(dir); err != nil {
			_ = os.Remove(dir)
			return "", err
		}
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("private cluster directory: %w", err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !info.IsDir() || !ok || int(st.Uid) != c.owner.uid || info.Mode().Perm() != 0o700 {
		return "", fmt.Errorf("private cluster directory %s exists but is not a 0700 directory of user postgres; remove it", dir)
	}
	return dir, nil
}

// command prepares one of the server programs, run as the server's account,
// in Dir, without the PG* variables that would redirect it.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.dir
	cmd.Env = serverEnv()
	if c.owner != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.owner.cred}
	}
	return cmd
}

func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// initdb creates the cluster unless Dir already holds one. It builds it in a
// scratch directory and renames it into place, so an interrupted initdb never
// leaves a half-made data directory that the next run would take for real.
func (c *Cluster) initdb(ctx context.Context) error {
	want, err := serverMajorVersion(c.binDir)
	if err != nil {
		return err
	}
	have, err := os.ReadFile(filepath.Join(c.dataDir, "PG_VERSION"))
	switch {
	case err == nil:
		if got := strings.TrimSpace(string(have)); got != want {
			return fmt.Errorf("%s holds a PostgreSQL %s cluster but %s is PostgreSQL %s: set PG_BIN to a PostgreSQL %s bin directory, or delete %s (and its data)",
				c.dataDir, got, c.binDir, want, got, c.dataDir)
		}
		return c.chownTree(c.dataDir)
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if entries, err := os.ReadDir(c.dataDir); err == nil {
		if len(entries) > 0 {
			return fmt.Errorf("%s exists but is not a PostgreSQL data directory (no PG_VERSION)", c.dataDir)
		}
		if err := os.Remove(c.dataDir); err != nil {
			return err
		}
	}

	began := time.Now()
	scratch := filepath.Join(c.dir, "data.initdb")
	// C collation (byte order, as Go sorts, and the fastest) with Unicode-aware
	// character classes; plain C where the C.UTF-8 locale does not exist.
	out, err := c.runInitdb(ctx, scratch, "--locale=C", "--lc-ctype=C.UTF-8")
	if err != nil && bytes.Contains(out, []byte("locale")) {
		out, err = c.runInitdb(ctx, scratch, "--locale=C")
	}
	if err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, tail(out, 30))
	}
	if err := os.Rename(scratch, c.dataDir); err != nil {
		return err
	}
	c.logger.Info("created PostgreSQL cluster", "dir", c.dataDir, "version", want, "duration", time.Since(began).Round(time.Millisecond))
	return nil
}

func (c *Cluster) runInitdb(ctx context.Context, dataDir string, localeArgs ...string) ([]byte, error) {
	if err := os.RemoveAll(dataDir); err != nil { // left by an interrupted run
		return nil, err
	}
	args := []string{"-D", dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8"}
	args = append(args, localeArgs...)
	if c.tuned {
		args = append(args, "--no-sync")
	}
	return c.command(ctx, "initdb", args...).CombinedOutput()
}

// chownTree gives a data directory made by another account (a run as a normal
// user before this run as root) to postgres. A no-op when not root or when the
// directory already belongs to postgres.
func (c *Cluster) chownTree(root string) error {
	if c.owner == nil {
		return nil
	}
	info, err := os.Stat(root)
	if err != nil {
		return err
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == c.owner.uid {
		return nil
	}
	c.logger.Info("giving data directory to user postgres", "dir", root)
	return filepath.WalkDir(root, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return c.chown(path)
	})
}

func (c *Cluster) prepareSocketDir() error {
	dir := filepath.Join(c.dir, "run")
	if len(dir) <= maxSocketDirLen {
		c.socketDir = dir
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		return c.chown(dir)
	}
	base := "/tmp"
	if _, err := os.Stat(base); err != nil {
		base = os.TempDir()
	}
	// MkdirTemp makes it 0700: only the server's account (and root) can reach
	// the socket, which is what makes trust authentication safe.
	dir, err := os.MkdirTemp(base, "notifyd-pg-")
	if err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	if len(dir) > maxSocketDirLen {
		_ = os.Remove(dir)
		return fmt.Errorf("socket directory %s is longer than %d bytes; set TMPDIR to a short path", dir, maxSocketDirLen)
	}
	c.socketDir, c.tmpSocketDir = dir, true
	c.logger.Info("cluster path too long for a Unix socket; socket goes to a temporary directory", "dir", c.dir, "socket_dir", dir)
	return c.chown(dir)
}

func (c *Cluster) removeTmpSocketDir() {
	if c.tmpSocketDir {
		_ = os.RemoveAll(c.socketDir)
	}
}

// clearStale removes the lock files a killed server leaves behind. PostgreSQL
// would remove them itself, except when their PID now belongs to another live
// process, which is common in containers where PIDs are small and reused. A
// live server on the same data directory is waited for briefly (it may be
// shutting down because the program that started it just died), then
// reported.
func (c *Cluster) clearStale(ctx context.Context) error {
	pidFile := filepath.Join(c.dataDir, "postmaster.pid")
	deadline := time.Now().Add(liveServerWait)
	for {
		pid, err := readPID(pidFile)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil || !c.isPostmaster(pid) {
			if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove stale %s: %w", pidFile, err)
			}
			c.logger.Info("removed postmaster.pid left by a server that is gone", "dir", c.dataDir, "pid", pid)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a PostgreSQL server (PID %d) is already running on %s: is another program using %s? Stop it with: pg_ctl stop -m fast -D %s",
				pid, c.dataDir, c.dir, c.dataDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	// No server owns the data directory, so nothing owns its socket either.
	for _, name := range []string{".s.PGSQL.5432", ".s.PGSQL.5432.lock"} {
		if err := os.Remove(filepath.Join(c.socketDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove stale socket file: %w", err)
		}
	}
	return nil
}

// readPID returns the first line of a postmaster.pid: the postmaster's PID
// (negative for a single-user server).
func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("%s: bad PID %q", path, first)
	}
	return max(pid, -pid), nil
}

// isPostmaster reports whether pid is a live server for this data directory.
// Where /proc cannot tell, any live process counts, to be safe.
func (c *Cluster) isPostmaster(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) || runtime.GOOS != "linux"
	}
	// The postmaster keeps its command line, "-D <dataDir>" included; its
	// backends rewrite theirs ("postgres: checkpointer").
	return bytes.Contains(append([]byte{0}, cmdline...), []byte("\x00"+c.dataDir+"\x00"))
}

// startServer starts the postmaster as our child and waits until it accepts
// connections. c.mu is held.
func (c *Cluster) startServer(ctx context.Context) error {
	if err := c.clearStale(ctx); err != nil {
		return err
	}
	// A killed server's backends can keep its shared memory for a moment, and
	// the new server refuses to start until they have gone.
	for attempt := 0; ; attempt++ {
		logStart, err := c.spawn()
		if err != nil {
			return err
		}
		err = c.waitReady(ctx)
		if err == nil {
			return nil
		}
		c.kill()
		logTail := c.logSince(logStart)
		if attempt < 20 && strings.Contains(logTail, "pre-existing shared memory block") && ctx.Err() == nil {
			time.Sleep(250 * time.Millisecond)
			if err := c.clearStale(ctx); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("%w\nserver log (%s):\n%s", err, c.logPath, logTail)
	}
}

// spawn starts the postmaster and returns the log offset at which its output
// begins.
func (c *Cluster) spawn() (int64, error) {
	logFile, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return 0, err
	}
	defer logFile.Close()
	if err := c.chown(c.logPath); err != nil {
		return 0, err
	}
	info, err := logFile.Stat()
	if err != nil {
		return 0, err
	}

	args := []string{"-D", c.dataDir,
		"-c", "listen_addresses=",
		"-c", "unix_socket_directories=" + quoteListElement(c.socketDir),
		"-c", "unix_socket_permissions=0700",
		"-c", "port=" + strconv.Itoa(port),
	}
	if c.tuned {
		for _, s := range tunedSettings {
			if c.replication && (strings.HasPrefix(s, "wal_level=") || strings.HasPrefix(s, "max_wal_senders=")) {
				continue
			}
			args = append(args, "-c", s)
		}
		if c.replication {
			args = append(args, "-c", "wal_level=replica", "-c", "max_wal_senders=10")
		}
	}
	// Command-line settings outrank postgresql.conf and ALTER SYSTEM, so a
	// reused data directory cannot move the socket or open a TCP port.
	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), args...)
	cmd.Dir = c.dir
	cmd.Env = serverEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	var cred *syscall.Credential
	if c.owner != nil {
		cred = c.owner.cred
	}
	cmd.SysProcAttr = serverProcAttr(cred)
	if err := startOnLockedThread(cmd); err != nil {
		return 0, fmt.Errorf("run postgres: %w", err)
	}
	srv := &server{cmd: cmd, exited: make(chan struct{})}
	c.srv = srv
	go func() {
		srv.waitErr = cmd.Wait()
		close(srv.exited)
	}()
	return info.Size(), nil
}

// quoteListElement quotes a path for a list setting such as
// unix_socket_directories, which splits on commas and trims spaces.
func quoteListElement(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// waitReady polls the server until a connection succeeds, the server exits,
// or the start times out; on success it records Settings.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var lastErr error
	for {
		select {
		case <-c.srv.exited:
			return fmt.Errorf("postgres exited during start-up (%v)", c.srv.waitErr)
		default:
		}
		settings, err := c.readSettings(ctx)
		if err == nil {
			c.settings = settings
			return nil
		}
		lastErr = err
		select {
		case <-c.srv.exited:
			return fmt.Errorf("postgres exited during start-up (%v)", c.srv.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("server not accepting connections: %w (last attempt: %v)", ctx.Err(), lastErr)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (c *Cluster) readSettings(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var values []string
	err = conn.QueryRow(ctx,
		"SELECT array_agg(current_setting(name) ORDER BY n) FROM unnest($1::text[]) WITH ORDINALITY AS s (name, n)",
		summarySettings).Scan(&values)
	if err != nil {
		return "", err
	}
	parts := make([]string, len(values))
	for i, v := range values {
		if i < len(summarySettings) && summarySettings[i] == "server_version" {
			v, _, _ = strings.Cut(v, " ") // "15.14 (Debian 15.14-0+deb12u1)"
		}
		parts[i] = summarySettings[i] + "=" + v
	}
	return strings.Join(parts, " "), nil
}

// stopServer shuts the server down with `pg_ctl stop -m fast`, falling back
// to signals if that fails. c.mu is held.
func (c *Cluster) stopServer() error {
	if c.srv == nil {
		return nil
	}
	defer func() { c.srv = nil }()
	select {
	case <-c.srv.exited: // crashed or killed: nothing to stop
		return nil
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	out, err := c.command(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", "fast", "-w", "-t", strconv.Itoa(int(stopTimeout/time.Second))).CombinedOutput()
	if err == nil {
		select {
		case <-c.srv.exited:
			return nil
		case <-time.After(10 * time.Second):
		}
	}
	c.kill()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, bytes.TrimSpace(out))
	}
	return errors.New("server did not exit after pg_ctl stop")
}

// kill ends the child server: fast shutdown, then immediate, then SIGKILL.
func (c *Cluster) kill() {
	for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGKILL} {
		_ = c.srv.cmd.Process.Signal(sig)
		select {
		case <-c.srv.exited:
			return
		case <-time.After(10 * time.Second):
		}
	}
}

// logSince returns the end of what the server logged from offset on.
func (c *Cluster) logSince(offset int64) string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read server log: %v)", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return fmt.Sprintf("(cannot read server log: %v)", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return fmt.Sprintf("(cannot read server log: %v)", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "(empty)"
	}
	return tail(b, 40)
}

// forkThread is an OS thread that never exits, from which servers are
// started: Linux sends the parent-death signal when the thread that forked the
// child exits, not the process, and Go may retire other threads.
var forkThread struct {
	once sync.Once
	jobs chan func()
}

func startOnLockedThread(cmd *exec.Cmd) error {
	forkThread.once.Do(func() {
		forkThread.jobs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for job := range forkThread.jobs {
				job()
			}
		}()
	})
	errc := make(chan error, 1)
	forkThread.jobs <- func() { errc <- cmd.Start() }
	return <-errc
}
