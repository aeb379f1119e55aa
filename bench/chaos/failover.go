package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/pgcluster"
)

// runFailover: a primary with a synchronous streaming standby; the daemon's
// database URL names both hosts with target_session_attrs=read-write. While
// a 3,000-recipient in_app + email fan-out is sending and one-recipient
// notifications arrive at 20/s through the API, the primary is stopped and
// the standby promoted. Afterwards every notification whose POST was
// answered 202 exists on the promoted standby and is delivered, the same
// daemon process went on through the multi-host URL, and duplicates stay
// within the messages in flight at the break. A stream cursor taken before
// the failover resumes on the promoted standby without a reset.
func runFailover(ctx context.Context, e *env, r *result, seed uint64) error {
	start := func(name string, f func() (*pgcluster.Cluster, error)) (*pgcluster.Cluster, error) {
		c, err := f()
		if err != nil {
			return nil, fmt.Errorf("start PostgreSQL %s: %w", name, err)
		}
		e.mu.Lock()
		e.clusters = append(e.clusters, c)
		e.mu.Unlock()
		return c, nil
	}
	primary, err := start("pg-failover", func() (*pgcluster.Cluster, error) {
		return pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(e.dir, "pg-failover"), Tuned: true, Replication: true})
	})
	if err != nil {
		return err
	}
	s, err := newStage(ctx, e, r, "failover", primary, seed)
	if err != nil {
		return err
	}
	defer s.close()
	const dbName = "chaos_failover"
	// The tuned cluster commits asynchronously by default; this database
	// commits synchronously, so a commit returns once the standby has it.
	if _, err := s.db.pool.Exec(ctx, "ALTER DATABASE "+dbName+" SET synchronous_commit = on"); err != nil {
		return err
	}
	standby, err := start("pg-failover-standby", func() (*pgcluster.Cluster, error) {
		return pgcluster.StartStandby(ctx, primary, pgcluster.Options{Dir: filepath.Join(e.dir, "pg-failover-standby"), Tuned: true})
	})
	if err != nil {
		return err
	}
	for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"} {
		if _, err := s.db.pool.Exec(ctx, q); err != nil {
			return err
		}
	}
	if err := waitSQL(ctx, s.db.pool, 60*time.Second,
		"SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync'"); err != nil {
		return fmt.Errorf("the standby never became synchronous: %w", err)
	}
	hosts, err := socketHosts(primary.URL(dbName), standby.URL(dbName))
	if err != nil {
		return err
	}
	multi := "postgres://postgres@/" + dbName + "?" + url.Values{
		"host": {hosts[0].dir + "," + hosts[1].dir}, "port": {hosts[0].port + "," + hosts[1].port},
		"sslmode": {"disable"}, "target_session_attrs": {"read-write"}}.Encode()

	n := scaled(e, 3000)
	sl, err := s.oneDaemon(ctx, daemonConfig{dbURL: multi, fanoutChunk: 250, send: chaosSend, sendBatch: chaosSendBatch}, n)
	if err != nil {
		return err
	}
	daemon := sl.proc
	const key = "failover-1"
	// A browser's cursor from before the failover: the head of the log when
	// recipient 0's stream opens, before the large notification.
	watched := recipientID(0)
	first, err := streamEvents(ctx, sl, watched, "", 1, nil)
	if err != nil {
		return fmt.Errorf("the inbox stream before the failover: %w", err)
	}
	cursor := first[0].id
	id, err := s.send(ctx, sl, key, ids(0, n))
	if err != nil {
		return err
	}

	// One-recipient notifications at 20/s through the failover: those
	// answered 202 were committed, and must survive it.
	smalls := s.startTrickle(ctx, "failover-small", n, func(ctx context.Context, _ int, key, recipient string) (string, error) {
		return s.send(ctx, sl, key, []string{recipient})
	})
	defer smalls.Stop()

	deadline := time.Now().Add(90 * time.Second)
	for s.mail.Count() < n/3 {
		if time.Now().After(deadline) {
			return fmt.Errorf("emails never reached %d before the failover (accepted %d)", n/3, s.mail.Count())
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	t0 := time.Now()
	if err := primary.Stop(); err != nil {
		return err
	}
	if err := standby.Promote(ctx); err != nil {
		return err
	}
	r.note("primary stopped and standby promoted in %s with %d emails accepted", time.Since(t0).Round(time.Millisecond), s.mail.Count())
	// From here on the harness reads the promoted standby.
	pc, err := pgxpool.ParseConfig(standby.URL(dbName))
	if err != nil {
		return err
	}
	pc.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	old := s.db.pool
	s.db = &database{url: standby.URL(dbName), pool: pool}
	old.Close()

	promoted := time.Now()
	atPromote := s.mail.Count()
	var readyIn time.Duration
	for readyIn == 0 && time.Since(promoted) < 60*time.Second {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		status, _, err := call(rctx, http.MethodGet, "http://"+sl.addr+"/readyz", "", nil)
		cancel()
		if err == nil && status == http.StatusOK && s.mail.Count() > atPromote {
			readyIn = time.Since(promoted)
		} else if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	if readyIn == 0 {
		r.fail("the daemon was not ready and sending within 60 s of the promotion")
	} else {
		r.note("the daemon was ready and sending on the promoted standby %s after the promotion", readyIn.Round(time.Millisecond))
	}
	// Keep sending a few seconds on the new primary, then stop.
	if !sleep(ctx, 3*time.Second) {
		return ctx.Err()
	}
	committed, refused := smalls.Stop()
	r.note("%d one-recipient notifications answered 202 around the failover, %d refused while it happened", len(committed), len(refused))
	committed = append(committed, s.committedAnyway(ctx, r, refused)...)

	snap, ok := s.waitFor(ctx, id, key, verifyReserve, func(snap *snapshot) bool {
		return snap.final() && snap.nonTerminal == 0 && len(snap.rows) == n && snap.inboxIDs == n
	})
	if !ok {
		r.fail("the large notification did not settle within the time budget")
	}
	if !daemon.alive() {
		r.fail("the daemon exited (%v) instead of reconnecting; see %s", daemon.err, filepath.Join(s.dir, "daemon-a.log"))
	}
	// The pre-failover cursor resumes on the promoted standby: the same
	// log, so no reset, and every event replayed up to the large
	// notification's item (one-recipient notifications to the same
	// recipient may come first) is in the same epoch.
	isBig := func(ev sseEvent) bool {
		return ev.name == "inbox.created" && strings.Contains(ev.data, `"key":"`+key+`"`)
	}
	if resumed, err := streamEvents(ctx, sl, watched, cursor, len(committed)+len(refused)+16, isBig); err != nil {
		r.fail("the inbox stream after the failover, from the cursor %s of before it: %v", cursor, err)
	} else if i := slices.IndexFunc(resumed, func(ev sseEvent) bool {
		return ev.name == "reset" || epochOf(ev.id) != epochOf(cursor)
	}); i >= 0 {
		ev := resumed[i]
		r.fail("the cursor %s of before the failover resumed with event %s (id %s) %s, want %s's inbox.created in the same epoch",
			cursor, ev.name, ev.id, ev.data, key)
	} else {
		ev := resumed[len(resumed)-1]
		r.note("a stream cursor of before the failover (%s) resumed on the promoted standby without a reset (%s's inbox.created id %s after %d other events)",
			cursor, key, ev.id, len(resumed)-1)
	}
	snaps := map[string]*snapshot{}
	inbox := map[string]int{key: n}
	s.settleSmalls(ctx, r, committed, snaps, inbox)
	s.report(ctx)
	s.stopAll()
	if snap == nil {
		return fmt.Errorf("no snapshot of %s", id)
	}
	if snap, err = s.db.snapshot(context.WithoutCancel(ctx), id, key); err != nil {
		return err
	}
	snaps[key] = snap
	verify(r, snaps, s.mail.receipts(), expectation{
		inbox:        inbox,
		mustArrive:   func(row ledgerRow) bool { return row.channel == "email" },
		arrivals:     n + len(committed),
		strictWindow: true,
		dupBound:     lanesBound(1),
		boundWhy:     fmt.Sprintf("1 failover × %d lanes sending email (queues.send)", lanesBound(1)),
	})
	return nil
}

// waitSQL polls a boolean query until it is true or timeout passes.
func waitSQL(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration, q string) error {
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		err := pool.QueryRow(ctx, q).Scan(&ok)
		if err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not true after %s (last error %v)", q, timeout, err)
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

type socketHost struct{ dir, port string }

// socketHosts reads the socket directory and port of each cluster URL.
func socketHosts(urls ...string) ([]socketHost, error) {
	out := make([]socketHost, 0, len(urls))
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, socketHost{u.Query().Get("host"), u.Query().Get("port")})
	}
	return out, nil
}

// sseEvent is one event of an inbox stream.
type sseEvent struct{ id, name, data string }

// streamEvents opens recipient's inbox stream on sl's daemon, with lastID as
// its Last-Event-ID unless empty, and returns its first n events (comments
// left out), or an error when they do not come within 30 s.
//
// It returns after n events, or, with until set, after the first event until
// accepts (at most n events read).
func streamEvents(ctx context.Context, sl *slot, recipient, lastID string, n int, until func(sseEvent) bool) ([]sseEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tok, err := notifyd.RecipientToken(tokenSecret, recipient, time.Hour)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+sl.addr+"/v1/inbox/stream", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/inbox/stream: %d", resp.StatusCode)
	}
	var out []sseEvent
	var ev sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name != "" {
				if out = append(out, ev); (until == nil && len(out) == n) || (until != nil && until(ev)) {
					return out, nil
				}
				if len(out) == n {
					return out, fmt.Errorf("no wanted event among the first %d", n)
				}
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("the stream ended after %d of %d events", len(out), n)
}

// epochOf is the epoch part of a stream cursor, "<epoch>.<seq>".
func epochOf(cursor string) string {
	epoch, _, _ := strings.Cut(cursor, ".")
	return epoch
}
