package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/stores"
)

// The inbox read path: GET /v1/inbox/counts and the first page of GET
// /v1/inbox, what every page load of an application with a bell asks, on an
// inbox of inboxOptions.items items over inboxOptions.recipients recipients
// plus one heavy recipient with inboxOptions.heavy items (half of them
// unread), through the daemon's HTTP API on 127.0.0.1, against the same SQL
// statements run by pgx at the same concurrency.

// inboxOptions size the inbox scenario.
type inboxOptions struct {
	recipients int     // recipients with perRecipient items each
	items      int     // their items in all
	heavy      int     // the heavy recipient's items, half of them unread
	conc       int     // concurrent clients of the throughput rows
	requests   int     // requests per throughput measurement
	rate       float64 // requests/s of the latency rows
	rateN      int     // requests per latency measurement
	// standby, when set, gives the URL of a database on a streaming standby
	// of the bench's cluster: the counts are measured again with
	// database.read_url on it (docs/scaling.md's comparison).
	standby func(db string) string
}

// The inbox rows' targets.
const (
	inboxVsPgxTarget   = 0.5 // requests/s ≥ this × the same SQL from pgx
	inboxP99Target     = 20  // ms, p99 at the paced rate
	inboxHeavyP99Limit = 50  // ms, the heavy recipient's counts p99
)

// heavyRecipient is the recipient with a large inbox.
const heavyRecipient = "heavy-0000001"

// inboxSetupSQL writes the inbox: perRecipient notifications each to every
// one of $1 recipients (ids and created_at spread over the last 30 days,
// newest notification last), a fifth of every recipient's items unread (and
// of those, half seen), then $3 items of the heavy recipient, half of them
// unread and half of those unseen.
const inboxSetupSQL = `
WITH n AS (
    SELECT notify_uuidv7() AS id, k, now() - (($2 - k) * interval '30 days') / $2 AS at
    FROM generate_series(1, $2) k
), normal AS (
    INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, category, reason, title, body, url, params,
                              created_at, seen_at, read_at)
    SELECT notify_uuidv7(), n.id, ` + recipientSQL + `, 'bench.inapp', 'inbox-' || n.k, 'bench', 'direct', $4, $5, $6,
           $7::jsonb, n.at,
           CASE WHEN n.k % 10 <> 0 THEN n.at END,
           CASE WHEN n.k % 5 <> 0 THEN n.at END
    FROM n, generate_series(1, $1) g
)
INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, category, reason, title, body, url, params,
                          created_at, seen_at, read_at)
SELECT notify_uuidv7(), notify_uuidv7(), $8, 'bench.inapp', 'heavy-' || h, 'bench', 'direct', $4, $5, $6, $7::jsonb,
       now() - h * interval '10 seconds',
       CASE WHEN h % 4 IN (1, 2) THEN now() END,
       CASE WHEN h % 2 = 1 THEN now() END
FROM generate_series(1, $3) h`

// runInbox is the inbox read-path scenario.
func runInbox(ctx context.Context, h *harness, o inboxOptions) []Result {
	const (
		rowCounts     = "inbox counts, 32 clients vs pgx"
		rowPage       = "inbox first page, 32 clients vs pgx"
		rowCountsP99  = "inbox counts p99 at 200/s"
		rowPageP99    = "inbox first page p99 at 200/s"
		rowHeavyP99   = "inbox counts p99, heavy recipient, at 200/s"
		rowHeavyConc  = "inbox counts, heavy recipient, 32 clients"
		rowStandbyP99 = "inbox counts p99 at 200/s, reads on a standby"
	)
	sc, err := startInboxScenario(ctx, h, o)
	if err != nil {
		return []Result{errorResult(rowCounts, "req/s", ">=", inboxVsPgxTarget, "ratio", err)}
	}
	defer sc.close()
	fmt.Printf("  inbox: %s\n", sc.note)
	var out []Result
	for _, v := range []struct {
		row, what string
		http      func(r int) string
		pgx       func(ctx context.Context, pool *pgxpool.Pool, r int) error
	}{
		{rowCounts, "counts", func(int) string { return "/v1/inbox/counts" }, pgxCounts},
		{rowPage, "first page", func(int) string { return "/v1/inbox" }, pgxFirstPage},
	} {
		hm, err := sc.closedLoop(ctx, v.what, o.conc, o.requests, sc.anyRecipient, v.http)
		if err != nil {
			out = append(out, errorResult(v.row, "req/s", ">=", inboxVsPgxTarget, "ratio", err))
			continue
		}
		pm, err := sc.pgxLoop(ctx, v.what, o.conc, o.requests, v.pgx)
		if err != nil {
			out = append(out, errorResult(v.row, "req/s", ">=", inboxVsPgxTarget, "ratio", fmt.Errorf("baseline: %w", err)))
			continue
		}
		fmt.Printf("  %s over HTTP: %s req/s (%s)\n  %s from pgx: %s req/s (%s)\n", v.what, formatNumber(hm.rate), hm.note,
			v.what, formatNumber(pm.rate), pm.note)
		r := ratioResult(v.row, "req/s", hm.rate, pm.rate, "same SQL from pgx", "req/s", ">=", inboxVsPgxTarget)
		out = append(out, annotate(r, o.requests, hm, &pm))
	}
	for _, v := range []struct {
		row    string
		pick   func() int
		path   string
		target float64
	}{
		{rowCountsP99, sc.anyRecipient, "/v1/inbox/counts", inboxP99Target},
		{rowPageP99, sc.anyRecipient, "/v1/inbox", inboxP99Target},
		{rowHeavyP99, sc.heavy, "/v1/inbox/counts", inboxHeavyP99Limit},
	} {
		lat, m, err := sc.paced(ctx, o.rate, o.rateN, v.pick, v.path)
		if err != nil {
			out = append(out, errorResult(v.row, "ms", "<=", v.target, "absolute", err))
			continue
		}
		p99 := quantile(lat, 0.99)
		fmt.Printf("  %s: p50 %.1f ms, p99 %.1f ms (%s)\n", v.row, quantile(lat, 0.5), p99, m.note)
		out = append(out, annotate(absoluteResult(v.row, "ms", p99, "<=", v.target), o.rateN, m, nil))
	}
	if hm, err := sc.closedLoop(ctx, "heavy counts", o.conc, o.requests/4, sc.heavy,
		func(int) string { return "/v1/inbox/counts" }); err == nil {
		fmt.Printf("  heavy recipient's counts, %d clients: %s req/s (%s)\n", o.conc, formatNumber(hm.rate), hm.note)
		out = append(out, annotate(Result{Scenario: rowHeavyConc, Unit: "req/s", Measured: hm.rate, TargetKind: "info",
			Status: "ok"}, o.requests/4, hm, nil))
	}
	if o.standby != nil {
		lat, m, err := sc.pacedOn(ctx, sc.standbyBase, o.rate, o.rateN, sc.anyRecipient, "/v1/inbox/counts")
		if err != nil {
			out = append(out, errorResult(rowStandbyP99, "ms", "<=", inboxP99Target, "absolute", err))
		} else {
			p99 := quantile(lat, 0.99)
			fmt.Printf("  %s: p50 %.1f ms, p99 %.1f ms (%s)\n", rowStandbyP99, quantile(lat, 0.5), p99, m.note)
			out = append(out, annotate(absoluteResult(rowStandbyP99, "ms", p99, "<=", inboxP99Target), o.rateN, m, nil))
		}
	}
	return out
}

// inboxScenario is the inbox's database, the daemon's HTTP API serving it,
// and a token for every recipient.
type inboxScenario struct {
	h           *harness
	db          *scenarioDB
	pool        *pgxpool.Pool // the baseline's: as many connections as clients
	base        string        // http://127.0.0.1:port of the daemon
	standbyBase string        // the same with database.read_url set, when -inbox-read-url is
	tokens      []string      // tokens[i] is recipient i+1's; the heavy recipient's last
	client      *http.Client
	note        string
	close       func()
}

func startInboxScenario(ctx context.Context, h *harness, o inboxOptions) (*inboxScenario, error) {
	perRecipient := max(1, o.items/o.recipients)
	db, err := h.freshDB(ctx, "inbox")
	if err != nil {
		return nil, err
	}
	var closers []func()
	sc := &inboxScenario{h: h, db: db}
	sc.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		db.drop()
	}
	fail := func(err error) (*inboxScenario, error) { sc.close(); return nil, err }
	if sc.pool, err = db.pool(ctx, int32(o.conc)); err != nil {
		return fail(err)
	}
	closers = append(closers, sc.pool.Close)
	began := time.Now()
	if err := insertRecipients(ctx, sc.pool, o.recipients); err != nil {
		return fail(err)
	}
	if _, err := sc.pool.Exec(ctx, `INSERT INTO notify_recipients (id, email, name, locale, timezone)
VALUES ($1, 'heavy@bench.test', 'Heavy', 'en', 'UTC')`, heavyRecipient); err != nil {
		return fail(err)
	}
	if _, err := sc.pool.Exec(ctx, inboxSetupSQL, o.recipients, perRecipient, o.heavy, benchTitle, benchBody, benchURL,
		benchJSON, heavyRecipient); err != nil {
		return fail(fmt.Errorf("inbox setup: %w", err))
	}
	// A table built over months has been vacuumed and analyzed by autovacuum.
	if _, err := sc.pool.Exec(ctx, `VACUUM (ANALYZE) notify_inbox, notify_recipients`); err != nil {
		return fail(err)
	}
	setup := time.Since(began)
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return fail(err)
	}
	if sc.base, err = serveAPI(ctx, h, cfg, true, &closers); err != nil {
		return fail(err)
	}
	if o.standby != nil {
		rcfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
		if err != nil {
			return fail(err)
		}
		rcfg.Database.ReadURL = o.standby(db.Name)
		if sc.standbyBase, err = serveAPI(ctx, h, rcfg, true, &closers); err != nil {
			return fail(err)
		}
		if err := waitStandbyReads(ctx, sc.standbyBase); err != nil {
			return fail(err)
		}
	}
	sc.tokens = make([]string, o.recipients+1)
	for i := range sc.tokens {
		id := recipientID(i + 1)
		if i == o.recipients {
			id = heavyRecipient
		}
		if sc.tokens[i], err = notifyd.RecipientToken(tokenSecret, id, 24*time.Hour); err != nil {
			return fail(err)
		}
	}
	sc.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * o.conc, MaxConnsPerHost: 0,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}}
	closers = append(closers, sc.client.CloseIdleConnections)
	sc.note = fmt.Sprintf("%d items over %d recipients and %d for one more, written, vacuumed and analyzed in %.0fs",
		perRecipient*o.recipients, o.recipients, o.heavy, setup.Seconds())
	// Warm-up: every connection of both sides, and the plans.
	if _, err := sc.closedLoop(ctx, "warm-up", o.conc, 2*o.conc*4, sc.anyRecipient, func(i int) string {
		return []string{"/v1/inbox/counts", "/v1/inbox"}[i%2]
	}); err != nil {
		return fail(fmt.Errorf("warm-up: %w", err))
	}
	if _, err := sc.pgxLoop(ctx, "warm-up", o.conc, 2*o.conc*4, func(ctx context.Context, pool *pgxpool.Pool, r int) error {
		if r%2 == 0 {
			return pgxCounts(ctx, pool, r)
		}
		return pgxFirstPage(ctx, pool, r)
	}); err != nil {
		return fail(fmt.Errorf("warm-up: %w", err))
	}
	return sc, nil
}

// serveAPI serves the daemon's HTTP API, built from cfg as `notifyd run`
// builds it, on 127.0.0.1, and returns its base URL; closers gets what stops
// it. With run, the daemon runs as `notifyd run` does (its workers too, with
// nothing to do, and its read replica's checks); without, only the API is
// served and nothing works the jobs it enqueues.
func serveAPI(ctx context.Context, h *harness, cfg *config.Config, run bool, closers *[]func()) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	if run {
		d, err := startDaemon(ctx, cfg, server.Options{Listener: ln}, h.logger)
		if err != nil {
			ln.Close()
			return "", err
		}
		*closers = append(*closers, d.stop)
		return "http://" + ln.Addr().String(), nil
	}
	d, err := server.New(ctx, server.Options{Config: cfg, NoListen: true, Logger: h.logger})
	if err != nil {
		ln.Close()
		return "", err
	}
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	*closers = append(*closers, func() { _ = srv.Close(); d.Close() })
	return "http://" + ln.Addr().String(), nil
}

// waitStandbyReads waits until the daemon at base reads from its standby
// (its /readyz says so): the standby has replayed the setup.
func waitStandbyReads(ctx context.Context, base string) error {
	_, err := waitUntil(ctx, 100*time.Millisecond, 5*time.Minute, func() (bool, error) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var ready struct {
			ReadReplica struct {
				Reads string `json:"reads"`
			} `json:"read_replica"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ready); err != nil {
			return false, err
		}
		return ready.ReadReplica.Reads == "standby", nil
	})
	if err != nil {
		return fmt.Errorf("the standby did not catch up: %w", err)
	}
	return nil
}

// anyRecipient picks one of the normal recipients, at random (0-based).
func (sc *inboxScenario) anyRecipient() int { return rand.IntN(len(sc.tokens) - 1) }

// heavy picks the heavy recipient.
func (sc *inboxScenario) heavy() int { return len(sc.tokens) - 1 }

// get asks path as recipient r and checks for a 200.
func (sc *inboxScenario) get(ctx context.Context, base, path string, r int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+sc.tokens[r])
	resp, err := sc.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	// Read, not decoded: the client's own work is not the API's, and it
	// runs on the same cores.
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// closedLoop sends n requests from conc clients, each sending its next one
// when the last answered, to recipients chosen by pick, and returns the
// requests/s with p50 and p99 in the note.
func (sc *inboxScenario) closedLoop(ctx context.Context, what string, conc, n int, pick func() int, path func(i int) string) (measurement, error) {
	lat := make([]time.Duration, n)
	return sc.timed(ctx, what, n, conc, lat, func(i int) error {
		t := time.Now()
		err := sc.get(ctx, sc.base, path(i), pick())
		lat[i] = time.Since(t)
		return err
	})
}

// pgxLoop is closedLoop's baseline: the same statements the handler runs
// (the token's revocation check, then the read), from pgx on a pool of conc
// connections, by conc goroutines.
func (sc *inboxScenario) pgxLoop(ctx context.Context, what string, conc, n int,
	query func(ctx context.Context, pool *pgxpool.Pool, r int) error) (measurement, error) {
	lat := make([]time.Duration, n)
	return sc.timed(ctx, what+" (pgx)", n, conc, lat, func(i int) error {
		t := time.Now()
		err := query(ctx, sc.pool, sc.anyRecipient())
		lat[i] = time.Since(t)
		return err
	})
}

// timed runs work(i) for i in [0, n) on conc goroutines and measures it.
func (sc *inboxScenario) timed(ctx context.Context, what string, n, conc int, lat []time.Duration, work func(i int) error) (measurement, error) {
	sc.h.waitQuiet(ctx)
	stopProf := sc.h.prof.start(ctx, "inbox."+strings.ReplaceAll(what, " ", "_"), sc.db.Name, n, "request")
	cpu0 := sc.h.cpu()
	start := time.Now()
	err := lanes(n, conc, work)
	elapsed := time.Since(start)
	cpu := sc.h.cpu().sub(cpu0)
	stopProf()
	if err != nil {
		return measurement{}, err
	}
	slices.Sort(lat)
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d requests, %d clients, %.2fs, p50 %.1f ms, p99 %.1f ms, %s", n, conc, elapsed.Seconds(),
			quantile(lat, 0.5), quantile(lat, 0.99), cpu)}, nil
}

// paced sends n requests for path at rate per second on an open-loop
// schedule, to recipients chosen by pick, and returns their latencies.
func (sc *inboxScenario) paced(ctx context.Context, rate float64, n int, pick func() int, path string) ([]time.Duration, measurement, error) {
	return sc.pacedOn(ctx, sc.base, rate, n, pick, path)
}

func (sc *inboxScenario) pacedOn(ctx context.Context, base string, rate float64, n int, pick func() int, path string) ([]time.Duration, measurement, error) {
	lat := make([]time.Duration, n)
	var mu sync.Mutex
	sc.h.waitQuiet(ctx)
	cpu0 := sc.h.cpu()
	sending, err := pacedWith(ctx, n, rate, 64, func(i int) error {
		t := time.Now()
		err := sc.get(ctx, base, path, pick())
		mu.Lock()
		lat[i] = time.Since(t)
		mu.Unlock()
		return err
	})
	cpu := sc.h.cpu().sub(cpu0)
	if err != nil && !errors.Is(err, context.Canceled) {
		return nil, measurement{}, err
	}
	slices.Sort(lat)
	return lat, measurement{seconds: sending.Seconds(), cpu: cpu, note: fmt.Sprintf("%d requests of %s at %.0f/s (achieved %.0f/s), max %.1f ms, %s",
		n, path, rate, float64(n)/sending.Seconds(), float64(lat[n-1])/float64(time.Millisecond), cpu)}, nil
}

// pgxCounts is GET /v1/inbox/counts's SQL from pgx: the revocation check of
// the token, then the counts.
func pgxCounts(ctx context.Context, pool *pgxpool.Pool, r int) error {
	id := recipientID(r + 1)
	if _, err := stores.TokensValidAfter(ctx, pool, id); err != nil {
		return err
	}
	_, err := stores.CountInbox(ctx, pool, id, 0)
	return err
}

// pgxFirstPage is GET /v1/inbox's SQL from pgx: the revocation check, then
// the first page of 50.
func pgxFirstPage(ctx context.Context, pool *pgxpool.Pool, r int) error {
	id := recipientID(r + 1)
	if _, err := stores.TokensValidAfter(ctx, pool, id); err != nil {
		return err
	}
	_, err := stores.ListInbox(ctx, pool, id, stores.InboxAll, nil, stores.DefaultInboxLimit)
	return err
}
