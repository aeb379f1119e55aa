package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/robfig/cron/v3"

	"github.com/notifyd/notifyd/stores"
)

// RetrySweepArgs is the notify.retry_sweep periodic job.
type RetrySweepArgs struct{}

// Kind is the River job kind.
func (RetrySweepArgs) Kind() string { return "notify.retry_sweep" }

// InsertOpts runs sweeps on the maintenance queue, one at a time per period.
func (RetrySweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, UniqueOpts: river.UniqueOpts{ByPeriod: time.Minute}}
}

// RetrySweepBatch bounds one sweep run; a larger backlog is taken by the next runs.
const RetrySweepBatch = 1000

// retryGrace is how overdue a failed or pending row must be before the sweep
// assumes its job is gone. A live job claims a due row within seconds.
const retryGrace = 2 * time.Minute

// RetrySweepWorker re-drives deliveries stuck in `sending` past the lease (a
// killed process) and overdue failed/pending rows whose job was lost. It is
// data-driven: a doubled or missed run neither loses nor duplicates a send
// (the claim decides who sends).
type RetrySweepWorker struct {
	river.WorkerDefaults[RetrySweepArgs]
	Deps *Deps
}

// Work re-drives one bounded batch, oldest first.
func (w *RetrySweepWorker) Work(ctx context.Context, job *river.Job[RetrySweepArgs]) error {
	_, err := w.Deps.RetrySweep(ctx)
	return err
}

// RetrySweep runs one sweep now and returns how many deliveries it re-drove.
// The retry_sweep job calls it; so can operators' tools and tests.
func (d *Deps) RetrySweep(ctx context.Context) (int, error) {
	lease := d.Config.Retry.Lease.D()
	if lease <= 0 {
		lease = 5 * time.Minute
	}
	var n int
	err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		ids, err := stores.RedriveDeliveries(ctx, tx, d.now(), lease, retryGrace, RetrySweepBatch)
		if err != nil {
			return err
		}
		n = len(ids)
		return insertSendJobs(ctx, tx, ids, d.Config.Queues.SendBatch)
	})
	if n > 0 {
		d.logger().InfoContext(ctx, "retry sweep re-drove deliveries", "count", n)
	}
	return n, err
}

// cronSchedule adapts a robfig/cron schedule to River's PeriodicSchedule.
type cronSchedule struct{ cron.Schedule }

func (s cronSchedule) Next(t time.Time) time.Time { return s.Schedule.Next(t) }

// mustCron parses a spec the config loader has already validated.
func mustCron(spec string) river.PeriodicSchedule {
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		panic("jobs: cron spec passed config validation but does not parse: " + spec + ": " + err.Error())
	}
	return cronSchedule{sched}
}

// PeriodicJobs returns the sweeps, each on its configured cron schedule. River
// runs periodic jobs on the elected leader only.
func PeriodicJobs(deps *Deps) []*river.PeriodicJob {
	retry := deps.Config.Retry.Sweep
	if retry == "" {
		retry = "CRON_TZ=UTC * * * * *"
	}
	return []*river.PeriodicJob{
		river.NewPeriodicJob(mustCron(retry), func() (river.JobArgs, *river.InsertOpts) {
			return RetrySweepArgs{}, nil
		}, &river.PeriodicJobOpts{ID: "notify.retry_sweep", RunOnStart: true}),
	}
}
