package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/pgcluster"
)

// Credentials every chaos daemon is configured with.
const (
	adminToken    = "chaos-admin-token-0123456789abcdef0123"
	tokenSecret   = "chaos-token-secret-0123456789abcdef0123"
	webhookSecret = "chaos-webhook-secret"
	mailDomain    = "chaos.test"
	notifierName  = "chaos.ping"
	// digestNotifier sends email as a digest by default; the chaos
	// config makes every minute a schedule instant.
	digestNotifier = "chaos.digest"
)

// env is what the scenarios share: the work directory, the notifyd binary
// and the shared PostgreSQL cluster (each scenario takes a database of its
// own; pgrestart starts a cluster of its own, since it restarts it).
type env struct {
	opts   options
	dir    string
	bin    string
	stderr io.Writer

	mu       sync.Mutex
	clusters []*pgcluster.Cluster
	shared   *pgcluster.Cluster
}

func newEnv(ctx context.Context, o options, stderr io.Writer) (*env, error) {
	dir, err := os.MkdirTemp("", "notifyd-chaos-")
	if err != nil {
		return nil, err
	}
	e := &env{opts: o, dir: dir, stderr: stderr}
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	e.bin = filepath.Join(dir, "notifyd")
	build := exec.CommandContext(ctx, "go", "build", "-o", e.bin, "./cmd/notifyd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build notifyd: %w\n%s", err, out)
	}
	e.logf("env", "built %s", e.bin)
	e.shared, err = e.startCluster(ctx, "pg")
	if err != nil {
		return nil, err
	}
	return e, nil
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run chaos from inside the notifyd module (make chaos)")
	}
	return filepath.Dir(mod), nil
}

// startCluster starts a tuned private PostgreSQL under the work directory.
func (e *env) startCluster(ctx context.Context, name string) (*pgcluster.Cluster, error) {
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(e.dir, name), Tuned: true})
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL %s: %w", name, err)
	}
	e.mu.Lock()
	e.clusters = append(e.clusters, c)
	e.mu.Unlock()
	e.logf("env", "PostgreSQL %s: %s", name, c.Settings())
	return c, nil
}

func (e *env) close(keep bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for _, c := range e.clusters {
		errs = append(errs, c.Stop())
	}
	if !keep {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	return errors.Join(errs...)
}

func (e *env) logf(scenario, format string, args ...any) {
	fmt.Fprintf(e.stderr, "%s [%s] %s\n", time.Now().Format("15:04:05.000"), scenario, fmt.Sprintf(format, args...))
}

// database is one scenario's database on a cluster, migrated, with a pool
// for the harness's own reads.
type database struct {
	url  string
	pool *pgxpool.Pool
}

func (e *env) newDatabase(ctx context.Context, c *pgcluster.Cluster, name string) (*database, error) {
	if err := c.EnsureDatabase(ctx, name); err != nil {
		return nil, err
	}
	db := &database{url: c.URL(name)}
	pc, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = 8
	db.pool, err = pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	return db, nil
}

// daemonConfig is what differs between the chaos daemons' configs.
type daemonConfig struct {
	dbURL       string
	listen      string
	smtpPort    int
	fanoutChunk int
	send        int // queues.send
	sendBatch   int // queues.send_batch
	// webhook adds the per-recipient webhook channel (default immediate) to
	// the notifier; without it the notifier has in_app and email only.
	webhook bool
	// webhookTimeout is channels.webhook.timeout (zero: 5s).
	webhookTimeout time.Duration
	// lease is retry.lease (zero: 5s). It must outlast the longest provider
	// call: the retry sweep takes back a claim older than the lease.
	lease time.Duration
	// workflows adds the workflow notifiers (delayedNotifier,
	// batchedNotifier; see workflows.go).
	workflows bool
	// bin is the notifyd binary the slot runs and migrates with; empty:
	// the one built from this tree (e.bin).
	bin string
}

func (c daemonConfig) yaml() string {
	webhookTimeout := c.webhookTimeout
	if webhookTimeout <= 0 {
		webhookTimeout = 5 * time.Second
	}
	lease := c.lease
	if lease <= 0 {
		lease = 5 * time.Second
	}
	webhook := ""
	if c.webhook {
		webhook = "\n      webhook: {default: immediate}"
	}
	return fmt.Sprintf(`# written by bench/chaos
database:
  url: "%s"
  max_conns: 40
http:
  listen: %s
  admin_token: %s
  token_secret: %s
  rate: {recipient: 0, admin: 0}
queues: {fanout: 2, send: %d, digest: 1, maintenance: 1, fanout_chunk: %d, send_batch: %d}
channels:
  email:
    from: "Chaos <notify@%s>"
    smtp: {host: 127.0.0.1, port: %d}
    timeout: 10s
  webhook: {secret: %s, allow_private: true, timeout: %s}
retry:
  lease: %s
  sweep: "@every 5s"
digest:
  schedule: "* * * * *"
  sweep: "@every 5s"
  subject: "{{.Count}} notifications"
  text: "{{range .Items}}- {{.Title}}\n{{end}}"
notifiers:
  %s:
    max_recipients: 1000000
    params:
      type: object
      required: [n]
      properties: {n: {type: integer}}
    channels:
      in_app: {title: "ping {{.n}}"}
      email: {subject: "ping {{.n}}", text: "ping {{.n}} for {{recipient.ID}}"}%s
  %s:
    max_recipients: 1000000
    channels:
      in_app: {title: "digest item {{.n}}"}
      email: {default: digest, subject: "unused", text: "unused"}
`, c.dbURL, c.listen, adminToken, tokenSecret, c.send, c.fanoutChunk, c.sendBatch, mailDomain, c.smtpPort,
		webhookSecret, webhookTimeout, lease, notifierName, webhook, digestNotifier) + c.workflowNotifiers()
}

// writeConfig writes c under the scenario's directory and returns its path.
func (e *env) writeConfig(scenario, name string, c daemonConfig) (string, error) {
	dir := filepath.Join(e.dir, scenario)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".yaml")
	return path, os.WriteFile(path, []byte(c.yaml()), 0o600)
}

// migrateWith runs `bin migrate` on cfgPath's database.
func (e *env) migrateWith(ctx context.Context, bin, cfgPath string) error {
	out, err := exec.CommandContext(ctx, bin, "migrate", "-config", cfgPath).CombinedOutput()
	if err != nil {
		return fmt.Errorf("notifyd migrate: %w\n%s", err, out)
	}
	return nil
}

// freeAddr returns a 127.0.0.1 address with a port nobody listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// proc is one `notifyd run` process.
type proc struct {
	name    string
	addr    string // its HTTP API
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	err     error // the exit status, set before done closes
	logFile *os.File
}

// startDaemonBin starts `bin run -config cfgPath` whose API listens on addr.
// Its output is appended to logPath. It dies with this process (Pdeathsig).
func (e *env) startDaemonBin(bin, cfgPath, addr, name, logPath string) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(lf, "=== %s started %s\n", name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, "run", "-config", cfgPath, "-log-level", "info")
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = sysProcAttr()
	p := &proc{name: name, addr: addr, cmd: cmd, done: make(chan struct{}), logFile: lf}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start notifyd: %w", err)
	}
	p.started = time.Now()
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM (a graceful drain) and waits up to timeout, then kills.
func (p *proc) stop(timeout time.Duration) {
	if !p.alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
	}
}

// waitReady polls GET /readyz until it answers 200.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		status, _, err := call(ctx, http.MethodGet, "http://"+p.addr+"/readyz", "", nil)
		if err == nil && status == http.StatusOK {
			return nil
		}
		if !p.alive() {
			return fmt.Errorf("%s exited before it was ready: %v", p.name, p.err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (last: %d %v)", p.name, timeout, status, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// call makes one API request with an optional bearer token and JSON body.
func call(ctx context.Context, method, url, token string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}
