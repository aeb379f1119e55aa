package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/pgcluster"
	"github.com/notifyd/notifyd/stores"
)

// scenario is one row of the table.
type scenario struct {
	name string
	what string
	// base is the time budget at -scale 1; it grows with larger scales.
	base time.Duration
	run  func(ctx context.Context, e *env, r *result, seed uint64) error
}

func (s scenario) budget(scale float64) time.Duration {
	return time.Duration(float64(s.base) * max(1, scale))
}

func scenarioNames() []string { return namesOf(scenarios) }

func namesOf(ss []scenario) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.name
	}
	return out
}

// stage is a running scenario: its database, sinks and daemons.
type stage struct {
	e     *env
	r     *result
	name  string
	rng   *rand.Rand
	db    *database
	mail  *mailbox
	hooks *hookbox
	dir   string

	mu      sync.Mutex
	slots   map[string]*slot
	started int // daemons started, for log names
}

// slot is one replica: its config and its current process.
type slot struct {
	bin     string // the notifyd binary; empty: this tree's
	name    string
	cfgPath string
	addr    string
	proc    *proc
}

func newStage(ctx context.Context, e *env, r *result, name string, c *pgcluster.Cluster, seed uint64) (*stage, error) {
	s := &stage{e: e, r: r, name: name, rng: rand.New(rand.NewPCG(seed, seed>>1|1)), slots: map[string]*slot{},
		dir: filepath.Join(e.dir, name)}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if s.db, err = e.newDatabase(ctx, c, "chaos_"+name); err != nil {
		return nil, err
	}
	if s.mail, err = newMailbox(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *stage) logf(format string, args ...any) { s.e.logf(s.name, format, args...) }

// logCount counts the lines of the stage's daemon logs that contain text.
func (s *stage) logCount(text string) int {
	files, _ := filepath.Glob(filepath.Join(s.dir, "daemon-*.log"))
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n += strings.Count(string(b), text)
	}
	return n
}

// addSlot writes a replica's config (the listen address is picked here) and,
// for the first slot, migrates the database with it.
func (s *stage) addSlot(ctx context.Context, name string, c daemonConfig) (*slot, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	if c.dbURL == "" { // a scenario may put something between daemon and database
		c.dbURL = s.db.url
	}
	c.listen, c.smtpPort = addr, s.mail.Port()
	path, err := s.e.writeConfig(s.name, "notifyd-"+name, c)
	if err != nil {
		return nil, err
	}
	sl := &slot{bin: c.bin, name: name, cfgPath: path, addr: addr}
	s.mu.Lock()
	first := len(s.slots) == 0
	s.slots[name] = sl
	s.mu.Unlock()
	if first {
		bin := c.bin
		if bin == "" {
			bin = s.e.bin
		}
		if err := s.e.migrateWith(ctx, bin, path); err != nil {
			return nil, err
		}
	}
	return sl, nil
}

// oneDaemon sets up the common case: a single daemon "a" with config c,
// profiles (with email addresses) for recipients 0..profiles-1, started.
func (s *stage) oneDaemon(ctx context.Context, c daemonConfig, profiles int) (*slot, error) {
	sl, err := s.addSlot(ctx, "a", c)
	if err != nil {
		return nil, err
	}
	if err := s.profiles(ctx, profiles, nil); err != nil {
		return nil, err
	}
	if err := s.start(ctx, sl); err != nil {
		return nil, err
	}
	return sl, nil
}

// start starts the slot's daemon and waits until it is ready.
func (s *stage) start(ctx context.Context, sl *slot) error {
	s.mu.Lock()
	s.started++
	n := s.started
	s.mu.Unlock()
	bin := sl.bin
	if bin == "" {
		bin = s.e.bin
	}
	p, err := s.e.startDaemonBin(bin, sl.cfgPath, sl.addr, fmt.Sprintf("%s#%d", sl.name, n), filepath.Join(s.dir, "daemon-"+sl.name+".log"))
	if err != nil {
		return err
	}
	s.mu.Lock()
	sl.proc = p
	s.mu.Unlock()
	return p.waitReady(ctx, 60*time.Second)
}

// kill SIGKILLs the slot's daemon.
func (s *stage) kill(sl *slot) {
	s.mu.Lock()
	p := sl.proc
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// stopAll drains every daemon with SIGTERM.
func (s *stage) stopAll() {
	s.mu.Lock()
	var ps []*proc
	for _, sl := range s.slots {
		if sl.proc != nil {
			ps = append(ps, sl.proc)
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { p.stop(40 * time.Second) })
	}
	wg.Wait()
}

// oldestLive is the start time of the oldest live daemon: a River job
// attempted before it was attempted by a process that is gone.
func (s *stage) oldestLive() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := time.Now()
	for _, sl := range s.slots {
		if sl.proc != nil && sl.proc.alive() && sl.proc.started.Before(t) {
			t = sl.proc.started
		}
	}
	return t
}

// close stops what the stage started.
func (s *stage) close() {
	s.stopAll()
	if s.mail != nil {
		_ = s.mail.Close()
	}
	if s.hooks != nil {
		s.hooks.close()
	}
	if s.db != nil && s.db.pool != nil {
		s.db.pool.Close()
	}
}

// report adds what is worth knowing about River's queue to the notes: jobs
// still running on killed processes (their liveness locks should have had
// them rescued).
func (s *stage) report(ctx context.Context) {
	summary, stale, err := s.db.jobStates(ctx, s.oldestLive())
	if err != nil {
		s.r.note("river_job: %v", err)
		return
	}
	s.r.note("river_job at the end: %s", summary)
	if len(stale) > 0 {
		s.r.note("River jobs still `running` on a killed process at the end (a restarted daemon or the retry sweep rescues them through their liveness locks): %v", stale)
	}
}

// profiles writes n recipient profiles r00000… with an email address each, and
// a webhook_url for those webhook selects (nil: none).
func (s *stage) profiles(ctx context.Context, n int, webhook func(i int) string) error {
	next := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				id, email := recipientID(i), recipientID(i)+"@"+mailDomain
				p := stores.RecipientProfile{ID: id, Email: &email}
				if webhook != nil {
					if u := webhook(i); u != "" {
						p.WebhookURL = &u
					}
				}
				if _, err := stores.PutRecipient(ctx, s.db.pool, p); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("write profiles: %w", err)
	default:
		return nil
	}
}

func recipientID(i int) string { return fmt.Sprintf("r%06d", i) }

// send posts a chaos.ping notification to ids through the API of sl and
// returns its id.
func (s *stage) send(ctx context.Context, sl *slot, key string, ids []string) (string, error) {
	return s.sendAs(ctx, sl, notifierName, key, ids)
}

// sendAs posts a notification of notifier to ids through the API of sl,
// counts it in the scenario's result, and returns its id.
func (s *stage) sendAs(ctx context.Context, sl *slot, notifier, key string, ids []string) (string, error) {
	body, err := json.Marshal(map[string]any{"notifier": notifier, "key": key, "recipients": ids,
		"params": map[string]any{"n": 1}})
	if err != nil {
		return "", err
	}
	status, resp, err := call(ctx, http.MethodPost, "http://"+sl.addr+"/v1/notifications", adminToken, body)
	if err != nil {
		return "", fmt.Errorf("POST /v1/notifications: %w", err)
	}
	if status != http.StatusAccepted {
		return "", fmt.Errorf("POST /v1/notifications: %d %s", status, resp)
	}
	var out struct{ ID string }
	if err := json.Unmarshal(resp, &out); err != nil {
		return "", err
	}
	s.mu.Lock()
	s.r.notifications++
	s.mu.Unlock()
	return out.ID, nil
}

// cancel sends DELETE /v1/notifications/{notifier}/{key} through sl.
func (s *stage) cancel(ctx context.Context, sl *slot, key string) (int, error) {
	u := "http://" + sl.addr + "/v1/notifications/" + url.PathEscape(notifierName) + "/" + url.PathEscape(key)
	status, resp, err := call(ctx, http.MethodDelete, u, adminToken, nil)
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("DELETE: %d %s", status, resp)
	}
	var out struct{ Cancelled int }
	err = json.Unmarshal(resp, &out)
	return out.Cancelled, err
}

func ids(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = recipientID(from + i)
	}
	return out
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter returns a duration uniformly in [lo, hi).
func (s *stage) jitter(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

// waitFor polls the notification until done says so, or until ctx has only
// reserve left. It logs progress every 15 s and returns the last snapshot.
func (s *stage) waitFor(ctx context.Context, id, key string, reserve time.Duration,
	done func(*snapshot) bool) (*snapshot, bool) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Minute)
	}
	deadline = deadline.Add(-reserve)
	var last *snapshot
	lastLog := time.Now()
	for {
		snap, err := s.db.snapshot(ctx, id, key)
		if err == nil {
			last = snap
			if done(snap) {
				return snap, true
			}
		}
		if time.Since(lastLog) > 15*time.Second {
			lastLog = time.Now()
			if last != nil {
				s.logf("waiting: %s notification=%s inbox=%d ledger: %s; mail accepted=%d", key, last.status,
					last.inbox, last.statuses(), s.mail.Count())
			} else {
				s.logf("waiting: %v", err)
			}
		}
		if time.Now().After(deadline) || !sleep(ctx, 500*time.Millisecond) {
			return last, false
		}
	}
}

// scaled multiplies n by the -scale flag.
func scaled(e *env, n int) int { return max(1, int(math.Round(float64(n)*e.opts.scale))) }

// fanoutStall is how long a pending notification's ledger may go without a
// new row before waitFanout calls its fan-out stalled. A chunk takes well
// under a second on an idle machine and a few seconds on a loaded one; River
// retries a failed fan-out job after 1 s and then 16 s (its default policy),
// so a minute without progress is a fan-out that stopped.
const fanoutStall = time.Minute

// waitFanout waits until the notification's fan-out has written at least
// rows delivery rows, or is over (fanned out, cancelled or rejected), and
// returns the rows written and the notification's status. It waits on the
// ledger's progress, not on a point of the scenario's budget: the setup
// before it (profiles written one by one, a migration, a daemon start)
// takes a share of the budget that grows with the machine's load. It fails
// when the ledger has not grown for fanoutStall while the notification is
// pending, naming River's fan-out jobs (their attempts and last error), or
// when only reserve is left of ctx.
func (s *stage) waitFanout(ctx context.Context, id string, rows int, reserve time.Duration) (int, string, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Minute)
	}
	deadline = deadline.Add(-reserve)
	last, lastStatus, grew := -1, "", time.Now()
	lastLog := time.Now()
	for {
		p, err := s.db.progress(ctx, id)
		if err == nil {
			if p.rows > last {
				last, grew = p.rows, time.Now()
			}
			lastStatus = p.status
			switch notifyd.NotificationStatus(p.status) {
			case notifyd.NotificationRejected:
				return p.rows, p.status, fmt.Errorf("the notification was rejected after %d deliveries: %s", p.rows, p.err)
			case notifyd.NotificationFannedOut, notifyd.NotificationCancelled:
				return p.rows, p.status, nil
			}
			if p.rows >= rows {
				return p.rows, p.status, nil
			}
		}
		stalled := time.Since(grew) > fanoutStall
		if stalled || time.Now().After(deadline) {
			why := fmt.Sprintf("the scenario's budget ran out (%s kept back for what follows)", reserve)
			if stalled {
				why = fmt.Sprintf("no new delivery row for %s", fanoutStall)
			}
			return last, lastStatus, fmt.Errorf("fan-out stuck at %d of the %d deliveries awaited, notification %s: %s; "+
				"fan-out jobs: %s; daemon log: %d errors, %d jobs errored, %d `too many clients`",
				max(last, 0), rows, lastStatus, why, s.db.fanoutJobs(context.WithoutCancel(ctx), id),
				s.logCount("level=ERROR"), s.logCount("Job errored"), s.logCount("too many clients"))
		}
		if time.Since(lastLog) > 15*time.Second {
			lastLog = time.Now()
			s.logf("waiting for the fan-out: %d of %d deliveries, notification %s (%v)", max(last, 0), rows, lastStatus, err)
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return last, lastStatus, ctx.Err()
		}
	}
}
