package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/stores"
)

// livenessCheck is how often the liveness connection is pinged and the
// registered clients are checked for gone ones. A connection found dead is
// made again at once (then with backoff). It is well inside goneAfter: a
// live process whose connection dropped (a PostgreSQL restart) notices
// within a check and takes its lock back before any replica takes its claims
// for a dead process's.
const livenessCheck = time.Second

// defaultGoneAfter is Deps.GoneAfter's default.
const defaultGoneAfter = 4 * time.Second

// RunLiveness keeps River client (this process's) registered as alive until
// ctx ends: on a connection of its own (made from pool's connection config,
// not taken from the pool, so nothing recycles it), it holds the client's
// liveness lock, which PostgreSQL releases when the process dies.
//
// Every livenessCheck it also checks every registered client's lock
// (rescueDeadClients): the River jobs of a gone client are made available at
// once instead of after River's RescueStuckJobsAfter, and the deliveries it
// had claimed are re-driven once its lock has been free for GoneAfter,
// instead of after retry.lease. So a replica's death frees its work within
// seconds, taken by any live replica or by its own successor, even before any
// replica is the leader that runs the sweep.
//
// A lost connection is made again and the lock taken again. While the lock
// is not held this process sends nothing (sendLane stops, a send job's claim
// snoozes): other replicas may take its claims for a dead process's, and
// whatever it sent then would be sent twice. Once the lock is back it
// re-drives what it left claimed (stores.FreeClaims). Its River jobs may run
// a second time meanwhile, which every job kind tolerates (a fan-out resumes
// from its lanes, a send's claim skips rows in flight). At the end the client
// is unregistered.
func (d *Deps) RunLiveness(ctx context.Context, client *river.Client[pgx.Tx]) {
	pool, logger := d.Pool, d.logger()
	clientID := client.ID()
	d.live.start(clientID)
	backoff := minLivenessBackoff
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
		if err == nil {
			err = stores.HoldLiveness(ctx, conn, clientID)
		}
		if err == nil {
			backoff = minLivenessBackoff
			if d.live.isLost() {
				d.freeOwnClaims(ctx, client)
			}
			d.live.setLost(false)
			err = d.watchLiveness(ctx, conn, client)
			if ctx.Err() != nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if rerr := stores.ReleaseLiveness(rctx, conn, clientID); rerr != nil {
					logger.Warn("liveness: unregister the River client", "client", clientID, "err", rerr)
				}
				cancel()
			} else {
				d.live.setLost(true)
			}
		}
		if conn != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, stores.ErrLivenessHeld) {
			// Another live process has this client ID: nothing to gain
			// from trying often.
			backoff = maxLivenessBackoff
		}
		logger.WarnContext(ctx, "liveness: lock not held; trying again", "client", clientID, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxLivenessBackoff)
	}
}

const (
	minLivenessBackoff = 100 * time.Millisecond
	maxLivenessBackoff = 5 * time.Second
)

// watchLiveness checks for gone clients at once and then every
// livenessCheck, pinging conn each time, until ctx ends (nil) or a ping
// fails (its error).
func (d *Deps) watchLiveness(ctx context.Context, conn *pgx.Conn, client *river.Client[pgx.Tx]) error {
	t := time.NewTicker(livenessCheck)
	defer t.Stop()
	for {
		d.rescueDeadClientsWith(ctx, client)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, livenessCheck)
			err := conn.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

// rescueDeadClients is rescueDeadClientsWith through the River client of
// ctx (a job's), as the retry sweep runs it.
func (d *Deps) rescueDeadClients(ctx context.Context) {
	client, _ := river.ClientFromContextSafely[pgx.Tx](ctx)
	d.rescueDeadClientsWith(ctx, client)
}

// rescueDeadClientsWith runs stores.RescueDeadClients once: the running jobs
// of every gone client are rescued, and the claims of the clients this
// process has seen gone for GoneAfter are re-driven, their sends enqueued
// through client in the same transaction (with a nil client, no claims are
// taken back). A failure is logged: the next check runs it again.
func (d *Deps) rescueDeadClientsWith(ctx context.Context, client *river.Client[pgx.Tx]) {
	var forget []string
	if client != nil {
		forget = d.live.due(time.Now(), d.goneAfter())
	}
	var r stores.Rescue
	err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) (err error) {
		r, err = stores.RescueDeadClients(ctx, tx, forget, d.now())
		if err != nil {
			return err
		}
		if len(r.Digests) > 0 {
			refs := make([]DigestRef, len(r.Digests))
			for i, g := range r.Digests {
				refs[i] = DigestRef{Recipient: g.Recipient, DueAt: g.DueAt.UTC(), DigestID: g.DigestID}
			}
			if err := insertJobs(ctx, tx, client, digestJobs(refs, nil)); err != nil {
				return fmt.Errorf("enqueue %d digests taken back from gone River clients: %w", len(refs), err)
			}
		}
		return insertSendJobsWith(ctx, tx, client, r.Freed, d.Config.Queues.SendBatch)
	})
	if err != nil {
		if ctx.Err() == nil {
			d.logger().WarnContext(ctx, "liveness: rescue the jobs of gone River clients", "err", err)
		}
		return
	}
	d.live.observe(r.Gone, time.Now())
	if r.Jobs > 0 {
		d.metrics().Rescued(r.Jobs)
		d.logger().InfoContext(ctx, "liveness: rescued the running jobs of gone River clients", "clients", len(r.Gone), "jobs", r.Jobs)
	}
	if len(r.Freed) > 0 || len(r.Digests) > 0 {
		d.metrics().Redriven(len(r.Freed))
		d.logger().InfoContext(ctx, "liveness: re-drove the deliveries claimed by gone River clients", "clients", len(forget),
			"deliveries", len(r.Freed), "digests", len(r.Digests))
	}
}

// freeOwnClaims re-drives what this process left claimed while its liveness
// lock was not held (stores.FreeClaims); a failure is logged, and those
// claims wait for retry.lease.
func (d *Deps) freeOwnClaims(ctx context.Context, client *river.Client[pgx.Tx]) {
	var ids []string
	err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) (err error) {
		if ids, err = stores.FreeClaims(ctx, tx, client.ID(), d.now()); err != nil {
			return err
		}
		return insertSendJobsWith(ctx, tx, client, ids, d.Config.Queues.SendBatch)
	})
	switch {
	case err != nil:
		d.logger().WarnContext(ctx, "liveness: re-drive this process's claims after its lock was lost", "err", err)
	case len(ids) > 0:
		d.metrics().Redriven(len(ids))
		d.logger().InfoContext(ctx, "liveness: re-drove this process's claims after its lock was lost", "deliveries", len(ids))
	}
}

// goneAfter is Deps.GoneAfter or its default.
func (d *Deps) goneAfter() time.Duration {
	if d.GoneAfter > 0 {
		return d.GoneAfter
	}
	return defaultGoneAfter
}

// livenessState is what this process knows of liveness: its own client,
// whether its lock is lost, and since when it has seen each other registered
// client's lock free. The zero value is ready (nothing lost, nobody gone).
type livenessState struct {
	mu   sync.Mutex
	self string
	lost bool
	// losses counts the times the lock was lost: a send run that claimed
	// before the latest loss stops (its claims are re-driven once the lock
	// is back, however short the loss was).
	losses uint64
	gone   map[string]time.Time // client -> first seen gone, in this run of checks
}

func (l *livenessState) start(self string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.self = self
}

func (l *livenessState) setLost(lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lost && !l.lost {
		l.losses++
	}
	l.lost = lost
}

// epoch returns how many times the lock was lost so far, and whether it is
// lost now.
func (l *livenessState) epoch() (losses uint64, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.losses, l.lost
}

// isLost reports whether this process held its liveness lock and lost it
// (and has not taken it back yet).
func (l *livenessState) isLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// observe records the clients a check found gone at now: a client seen
// before keeps its first sighting, one no longer gone is dropped (it took
// its lock back, or was forgotten). This process's own client is never
// recorded.
func (l *livenessState) observe(gone []string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := make(map[string]time.Time, len(gone))
	for _, id := range gone {
		if id == l.self {
			continue
		}
		first, ok := l.gone[id]
		if !ok {
			first = now
		}
		next[id] = first
	}
	l.gone = next
}

// due returns the clients seen gone at every check for at least after.
func (l *livenessState) due(now time.Time, after time.Duration) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, first := range l.gone {
		if now.Sub(first) >= after {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
