package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// NewWorkers registers every notifyd worker with deps.
func NewWorkers(deps *Deps) *river.Workers {
	workers := river.NewWorkers()
	river.AddWorker(workers, &FanoutWorker{Deps: deps})
	river.AddWorker(workers, &SendWorker{Deps: deps})
	river.AddWorker(workers, &BatchRenderWorker{Deps: deps})
	river.AddWorker(workers, &DigestWorker{Deps: deps})
	river.AddWorker(workers, &DigestSweepWorker{Deps: deps})
	river.AddWorker(workers, &RetrySweepWorker{Deps: deps})
	river.AddWorker(workers, &RetentionWorker{Deps: deps})
	return workers
}

// RiverConfig is the River client configuration for notifyd's queues, taken
// from config (queues:, database.schema). River's defaults poll each queue once
// a second and cool down 100 ms between fetches, which caps a queue near 1,000
// jobs/s; notifyd's defaults (50 ms poll, 5 ms cooldown) remove that cap, and
// insert notifications wake idle queues at once (NewRiverDriver).
func RiverConfig(deps *Deps, workers *river.Workers) *river.Config {
	q := deps.Config.Queues
	fetchCooldown := q.FetchCooldown.D()
	if fetchCooldown <= 0 {
		fetchCooldown = 5 * time.Millisecond
	}
	poll := q.FetchPollInterval.D()
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	schema := deps.Config.Database.SearchSchema()
	var middleware []rivertype.Middleware
	if mw := deps.metrics().RiverMiddleware(); mw != nil {
		middleware = append(middleware, mw)
	}
	return &river.Config{
		Middleware:        middleware,
		Logger:            deps.logger(),
		Schema:            schema,
		FetchCooldown:     fetchCooldown,
		FetchPollInterval: poll,
		Queues: map[string]river.QueueConfig{
			QueueFanout:      {MaxWorkers: max(q.Fanout, 1)},
			QueueSend:        {MaxWorkers: max(q.Send, 1)},
			QueueSendBulk:    {MaxWorkers: max(q.Send, 1)},
			QueueDigest:      {MaxWorkers: max(q.Digest, 1)},
			QueueMaintenance: {MaxWorkers: max(q.Maintenance, 1)},
		},
		Workers:      workers,
		PeriodicJobs: PeriodicJobs(deps),
		// Completed jobs are the queue's history, not the ledger (that is
		// notify_deliveries); keep a day of them for River UI.
		CompletedJobRetentionPeriod: 24 * time.Hour,
		RescueStuckJobsAfter:        deps.RescueAfter(),
	}
}

// NewRiverClient builds the River client for deps.Pool with every worker, on
// NewRiverDriver: it takes no control from NOTIFY, and wakes its queues on
// insert notifications.
func NewRiverClient(deps *Deps) (*river.Client[pgx.Tx], error) {
	cfg := RiverConfig(deps, NewWorkers(deps))
	deps.riverDriver = NewRiverDriver(deps.Pool, cfg, deps)
	client, err := river.NewClient(deps.riverDriver, cfg)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return client, nil
}

// copyMinJobs is the batch size from which insertJobs copies rows in
// (COPY FROM) rather than inserting them with one multi-row INSERT. River's
// InsertManyFastTx always copies, and a copy is two round trips (the COPY
// statement, then its rows) with the COPY protocol's set-up on the server:
// for the one send job of a one-recipient notification the copy was 0.71 ms
// of PostgreSQL time a call in the commit → email bench. Past a few dozen
// rows the copy's cheaper per-row cost wins.
const copyMinJobs = 64

// insertJobs inserts params in tx through client, with one INSERT for a
// small batch and COPY for a large one (copyMinJobs).
func insertJobs(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], params []river.InsertManyParams) error {
	var err error
	if len(params) < copyMinJobs {
		_, err = client.InsertManyTx(ctx, tx, params)
	} else {
		_, err = client.InsertManyFastTx(ctx, tx, params)
	}
	return err
}
