package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/baseservice"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivershared/startstop"
	"github.com/riverqueue/river/rivertype"
)

// NewRiverDriver returns the River driver a notifyd client that works jobs
// runs on: River's pgx driver for pool, except that the client takes nothing
// from a channel another database role can write to.
//
// River steers its clients with NOTIFY: `<schema>.river_control` pauses,
// resumes and cancels jobs, `<schema>.river_leadership` makes the leader
// resign. PostgreSQL lets every role that can connect NOTIFY any channel, so
// the application's role (or any other) could pause every queue or cancel a
// running fan-out. This driver tells River it cannot listen, which puts the
// client in River's poll-only mode: queue pauses and job cancellations are
// read from River's tables, which only notifyd's own role writes (every
// producer reads them every 2 seconds, so an operator's pause or cancel in
// River UI takes effect everywhere within 2 seconds; this client's own
// non-transactional QueuePause, QueueResume and JobCancel reach its own
// producers at once), and leadership is re-elected from the river_leader
// table (within River's 5 s election interval).
//
// What a NOTIFY is still good for is a wake: it can only make a queue fetch
// sooner. The driver runs a listener of its own on `<schema>.river_insert`
// (where River's inserts and notify_enqueue send one, at most once per queue
// and cooldown), and each notification naming one of cfg's queues triggers
// that queue's fetch through the client, as River's own listener would. A
// forged flood of them makes a queue fetch at most once per FetchCooldown, as
// River's own debounce allows, and can neither pause nor cancel anything.
// Anything else on that channel is ignored.
//
// Each River client needs a driver of its own (the driver holds the client's
// wake). cfg's Schema and Queues name the channel and the queues to wake.
// deps hears every queue name woken too (Deps.WakeQueue: the fan-out
// claimers take small notifications, which have no job). River's producers
// may be triggered only once the client's Start has started them (a trigger
// during Start races the producer's set-up), so call RiverStarted with the
// driver after Start returns; wakes before it reach only the claimers, and a
// starting producer fetches anyway.
func NewRiverDriver(pool *pgxpool.Pool, cfg *river.Config, deps *Deps) riverdriver.Driver[pgx.Tx] {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &waker{pool: pool, schema: cfg.Schema, logger: logger, deps: deps, queues: map[string][]*rivertype.JobInsertResult{}}
	for q := range cfg.Queues {
		w.queues[q] = []*rivertype.JobInsertResult{{Job: &rivertype.JobRow{Queue: q}}}
	}
	return &pollDriver{Driver: riverpgxv5.New(pool), pilot: &wakePilot{waker: w}}
}

// pollDriver is riverpgxv5's driver without a listener for River, and with
// the waker as a pilot plug-in (River's hook for a driver to run services
// beside the client and to trigger a producer's fetch from outside it).
type pollDriver struct {
	*riverpgxv5.Driver
	pilot *wakePilot
}

// SupportsListener says no: River's client then takes no control from
// NOTIFY, and passes the pilot the function that triggers a fetch.
func (d *pollDriver) SupportsListener() bool { return false }

// PluginInit is River's driver plug-in hook; nothing to do.
func (d *pollDriver) PluginInit(*baseservice.Archetype) {}

// PluginPilot returns the pilot that carries the waker.
func (d *pollDriver) PluginPilot() riverpilot.Pilot { return d.pilot }

// wakePilot is River's standard pilot, plus the waker as a client service.
type wakePilot struct {
	riverpilot.StandardPilot
	waker *waker
}

// PilotInit keeps the client's fetch trigger for the waker.
func (p *wakePilot) PilotInit(archetype *baseservice.Archetype, params *riverpilot.PilotInitParams) {
	p.waker.trigger = params.NotifyNonTxJobInsert
	p.StandardPilot.PilotInit(archetype, params)
}

// PluginServices runs the waker for as long as the client works jobs.
func (p *wakePilot) PluginServices() []startstop.Service {
	return []startstop.Service{startstop.StartStopFunc(p.waker.start)}
}

// PluginMaintenanceServices adds nothing to the leader's services.
func (p *wakePilot) PluginMaintenanceServices() []startstop.Service { return nil }

// Bounds of the waker's reconnection backoff, and how long it waits for a
// notification before it pings its connection (a connection dead without a
// word would otherwise go unnoticed: the queues would only poll).
const (
	minWakeBackoff = 100 * time.Millisecond
	maxWakeBackoff = 5 * time.Second
	wakePing       = 5 * time.Second
	// wakeTrail is notify_enqueue's wake cooldown (20 ms) and 5 ms for the
	// commit of a send made at its very end.
	wakeTrail = 25 * time.Millisecond
)

// waker listens for insert notifications on a connection of its own and
// triggers the fetch of the queue each one names.
type waker struct {
	pool    *pgxpool.Pool
	schema  string
	logger  *slog.Logger
	trigger func(context.Context, []*rivertype.JobInsertResult)
	deps    *Deps       // see NewRiverDriver
	started atomic.Bool // set by RiverStarted: the client's producers may be triggered
	// queues are the client's queues, each with the one-job "insert result"
	// the trigger takes (only its queue is read), made once.
	queues map[string][]*rivertype.JobInsertResult

	mu     sync.Mutex
	trails map[string]*time.Timer // per queue: the fetch wakeTrail after its last wake
}

// start is the waker as a River service: it listens until ctx ends.
func (w *waker) start(ctx context.Context, shouldStart bool, started, stopped func()) error {
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		defer w.stopTrails()
		w.run(ctx)
	}()
	return nil
}

// run listens, and listens again after a lost connection, until ctx ends.
func (w *waker) run(ctx context.Context) {
	backoff := minWakeBackoff
	for ctx.Err() == nil {
		listened, err := w.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff = minWakeBackoff
		}
		w.logger.WarnContext(ctx, "wake listener: connection lost; the queues poll until it is back", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxWakeBackoff)
	}
}

// listen holds one connection: LISTEN, wake every queue once (a wake may
// have been missed while nobody listened), then wake the queue named by each
// notification. It returns when the connection fails (listened: whether it
// got as far as listening).
func (w *waker) listen(ctx context.Context) (listened bool, err error) {
	pc, err := w.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// The connection is the waker's from now on: the pool would reset it.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	schema := w.schema
	if schema == "" {
		if err := conn.QueryRow(ctx, "SELECT coalesce(current_schema(), '')").Scan(&schema); err != nil {
			return false, err
		}
	}
	channel := "river_insert"
	if schema != "" {
		channel = schema + "." + channel
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, err
	}
	for _, q := range slices.Sorted(maps.Keys(w.queues)) {
		w.wake(ctx, q)
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, wakePing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			pctx, cancel := context.WithTimeout(ctx, wakePing)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return true, err
			}
			continue
		case err != nil:
			return true, err
		}
		var p struct {
			Queue string `json:"queue"`
		}
		if len(n.Payload) > 256 || json.Unmarshal([]byte(n.Payload), &p) != nil {
			continue
		}
		w.wake(ctx, p.Queue)
	}
}

// wake triggers queue's fetch, if it is one of the client's queues, now and
// once more wakeTrail after the queue's last wake. River debounces them: a
// queue fetches at most once per FetchCooldown however many wakes arrive.
//
// The second fetch is for the sends a session makes within its wake
// cooldown (notify_enqueue wakes at most once per session and 20 ms): they
// commit after the wake that preceded them, and unless another wake or
// fetch comes, this one takes them, within about 25 ms rather than at the
// next poll.
func (w *waker) wake(ctx context.Context, queue string) {
	w.deps.WakeQueue(queue)
	res, ok := w.queues[queue]
	if !ok || w.trigger == nil || !w.started.Load() {
		return
	}
	w.trigger(ctx, res)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.trails == nil {
		w.trails = map[string]*time.Timer{}
	}
	if t, ok := w.trails[queue]; ok {
		t.Reset(wakeTrail)
		return
	}
	w.trails[queue] = time.AfterFunc(wakeTrail, func() { w.trigger(context.WithoutCancel(ctx), res) })
}

// stopTrails stops the pending second fetches (the client is stopping).
func (w *waker) stopTrails() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.trails {
		t.Stop()
	}
	w.trails = nil
}

// RiverStarted tells the wake listener of driver (made by NewRiverDriver)
// that its client's Start has returned, so the producers may be triggered.
func RiverStarted(driver riverdriver.Driver[pgx.Tx]) {
	if d, ok := driver.(*pollDriver); ok {
		d.pilot.waker.started.Store(true)
	}
}
