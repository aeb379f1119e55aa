package jobs

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// NewWorkers registers every notifyd worker with deps.
func NewWorkers(deps *Deps) *river.Workers {
	workers := river.NewWorkers()
	river.AddWorker(workers, &FanoutWorker{Deps: deps})
	river.AddWorker(workers, &SendWorker{Deps: deps})
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
// insert notifications wake idle queues at once.
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
	if mw := deps.Metrics.RiverMiddleware(); mw != nil {
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

// NewRiverClient builds the River client for deps.Pool with every worker.
func NewRiverClient(deps *Deps) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(deps.Pool), RiverConfig(deps, NewWorkers(deps)))
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return client, nil
}
