package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/stores"
)

// livenessPing is how often the liveness connection is checked; a
// connection found dead is made again at once (then with backoff).
const livenessPing = 15 * time.Second

// RunLiveness keeps River client clientID registered as alive until ctx
// ends: on a connection of its own (made from pool's connection config, not
// taken from the pool, so nothing recycles it), it holds the client's
// liveness lock, which PostgreSQL releases when the process dies, and the
// retry sweep then rescues the client's running jobs at once instead of after
// River's RescueStuckJobsAfter (see stores.RescueDeadClients). Once
// registered it runs that rescue itself too: a process restarted after a
// crash takes its predecessor's jobs back at once, even before any replica
// is the leader that runs the sweep. A lost connection is
// made again and the lock taken again; in between, the sweep may take this
// client for gone and run its jobs a second time, which every job kind
// tolerates (a fan-out resumes from its lanes, a send's claim skips rows in
// flight). At the end the client is unregistered.
func (d *Deps) RunLiveness(ctx context.Context, clientID string) {
	pool, logger := d.Pool, d.logger()
	backoff := minLivenessBackoff
	rescued := false
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
		if err == nil {
			err = stores.HoldLiveness(ctx, conn, clientID)
		}
		if err == nil {
			backoff = minLivenessBackoff
			if !rescued {
				rescued = true
				d.rescueDeadClients(ctx)
			}
			err = holdUntilDone(ctx, conn)
			if ctx.Err() != nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if rerr := stores.ReleaseLiveness(rctx, conn, clientID); rerr != nil {
					logger.Warn("liveness: unregister the River client", "client", clientID, "err", rerr)
				}
				cancel()
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

// rescueDeadClients runs stores.RescueDeadClients once, logging and counting
// what it did; a failure is logged (the retry sweep runs it again).
func (d *Deps) rescueDeadClients(ctx context.Context) {
	var jobs, clients int
	err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) (err error) {
		jobs, clients, err = stores.RescueDeadClients(ctx, tx)
		return err
	})
	switch {
	case err != nil:
		d.logger().WarnContext(ctx, "liveness: rescue the jobs of gone River clients", "err", err)
	case clients > 0:
		d.metrics().Rescued(jobs)
		d.logger().InfoContext(ctx, "liveness: rescued the running jobs of gone River clients", "clients", clients, "jobs", jobs)
	}
}

// holdUntilDone pings conn every livenessPing until ctx ends (nil) or a
// ping fails (its error).
func holdUntilDone(ctx context.Context, conn *pgx.Conn) error {
	t := time.NewTicker(livenessPing)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}
