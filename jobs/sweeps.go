package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/stores"
)

// RetrySweepArgs is the notify.retry_sweep periodic job.
type RetrySweepArgs struct{}

// Kind is the River job kind.
func (RetrySweepArgs) Kind() string { return "notify.retry_sweep" }

// InsertOpts runs sweeps on the maintenance queue. They are not unique: a
// sweep is bounded and data-driven (SKIP LOCKED), so an overlap is harmless,
// and a schedule faster than a minute is honoured.
func (RetrySweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance}
}

// RetrySweepBatch bounds one sweep run; a larger backlog is taken by the next runs.
const RetrySweepBatch = 1000

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
	// First the jobs of River clients whose process is gone (RunLiveness):
	// River would rescue them only after RescueStuckJobsAfter.
	d.rescueDeadClients(ctx)
	// A failed or pending row overdue by a lease has lost its job (a live job
	// claims a due row within seconds).
	lease, grace := d.lease(), d.lease()
	var n int
	err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		ids, err := stores.RedriveDeliveries(ctx, tx, d.now(), lease, grace, d.maxAge(), RetrySweepBatch)
		if err != nil {
			return err
		}
		n = len(ids)
		// On send_bulk: under a large fan-out's backlog the sweep re-drives
		// its rows by the thousand (they wait longer than a lease for a
		// worker), and on send they would take the workers of one-recipient
		// notifications.
		return insertBulkSendJobs(ctx, tx, ids, d.Config.Queues.SendBatch)
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		d.metrics().Redriven(n)
		d.logger().InfoContext(ctx, "retry sweep re-drove deliveries", "count", n)
	}
	if client, _ := river.ClientFromContextSafely[pgx.Tx](ctx); client != nil {
		if _, err := d.ResumeFanouts(ctx, client); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Bounds of ResumeFanouts: the lanes one run resumes (a larger backlog is
// taken by the next runs), how far back it looks for ended fan-out jobs
// (River keeps discarded jobs 7 days, cancelled ones a day), how often it
// scans every pending notification for one whose job is gone, and how old
// such a notification must be.
const (
	resumeFanoutBatch  = 1000
	resumeEndedWindow  = 7 * 24 * time.Hour
	orphanScanInterval = 10 * time.Minute
	orphanGrace        = time.Minute
)

// ResumeFanouts gives a new fan-out job, through client in one transaction,
// to every lane of a pending or scheduled notification whose fan-out job
// ended other than by its own success: cancelled (River's JobCancel, River
// UI) or discarded, at every run; deleted, by a scan of every pending and
// scheduled notification at most every 10 minutes per process (the first
// run of a process included). It returns how many lanes it resumed. The new
// job resumes from the lane's cursor (a scheduled notification's waits for
// its send_at), so a notification is never left pending for good, and a
// resume that races a live job duplicates no item. The retry sweep runs it.
func (d *Deps) ResumeFanouts(ctx context.Context, client *river.Client[pgx.Tx]) (int, error) {
	now := d.now()
	scan := false
	if last := d.orphansScanned.Load(); last == 0 || time.Since(time.Unix(0, last)) >= orphanScanInterval {
		scan = d.orphansScanned.CompareAndSwap(last, time.Now().UnixNano())
	}
	var lanes []stores.ResumeLane
	err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		var err error
		if lanes, err = stores.EndedFanouts(ctx, tx, now.Add(-resumeEndedWindow), resumeFanoutBatch); err != nil {
			return err
		}
		if scan {
			orphans, err := stores.OrphanedFanouts(ctx, tx, now.Add(-orphanGrace), resumeFanoutBatch)
			if err != nil {
				return err
			}
			type key struct {
				id   string
				lane int
			}
			seen := make(map[key]bool, len(lanes))
			for _, l := range lanes {
				seen[key{l.NotificationID, l.Lane}] = true
			}
			for _, o := range orphans {
				if !seen[key{o.NotificationID, o.Lane}] {
					lanes = append(lanes, o)
				}
			}
		}
		if len(lanes) == 0 {
			return nil
		}
		params := make([]river.InsertManyParams, len(lanes))
		for i, l := range lanes {
			opts := &river.InsertOpts{}
			if l.SendAt != nil && l.SendAt.After(now) {
				opts.ScheduledAt = *l.SendAt
			}
			params[i] = river.InsertManyParams{Args: FanoutArgs{NotificationID: l.NotificationID, Lane: l.Lane}, InsertOpts: opts}
		}
		return insertJobs(ctx, tx, client, params)
	})
	if err != nil {
		if scan {
			d.orphansScanned.Store(0) // the next run scans again
		}
		return 0, fmt.Errorf("resume fan-outs: %w", err)
	}
	if len(lanes) > 0 {
		d.logger().WarnContext(ctx, "resumed fan-outs whose job ended before the notification was fanned out",
			"lanes", len(lanes), "scan", scan)
	}
	return len(lanes), nil
}

// PeriodicJobs returns the sweeps, each on its configured cron schedule (the
// config loader parsed them). River runs periodic jobs on the elected leader
// only; each sweep is data-driven, so a missed or doubled run after a leader
// change neither loses nor duplicates work.
func PeriodicJobs(deps *Deps) []*river.PeriodicJob {
	cfg := deps.Config
	var jobs []*river.PeriodicJob
	if cfg.Retry.SweepCron != nil {
		jobs = append(jobs, river.NewPeriodicJob(cfg.Retry.SweepCron, func() (river.JobArgs, *river.InsertOpts) {
			return RetrySweepArgs{}, nil
		}, &river.PeriodicJobOpts{ID: "notify.retry_sweep", RunOnStart: true}))
	}
	if cfg.Digest.SweepCron != nil {
		jobs = append(jobs, river.NewPeriodicJob(cfg.Digest.SweepCron, func() (river.JobArgs, *river.InsertOpts) {
			return DigestSweepArgs{}, nil
		}, &river.PeriodicJobOpts{ID: "notify.digest_sweep"}))
	}
	if cfg.Retention.ScheduleCron != nil {
		jobs = append(jobs, river.NewPeriodicJob(cfg.Retention.ScheduleCron, func() (river.JobArgs, *river.InsertOpts) {
			return RetentionArgs{}, nil
		}, &river.PeriodicJobOpts{ID: "notify.retention"}))
	}
	return jobs
}

// Redrive puts the deliveries matching f (stores.RedriveMatching: only
// stores.RedrivableStatuses, every one of them when f names none) back in the
// queue, at most limit of them, at now — for operators after a provider
// outage (`notifyd retry`, the console's bulk retry). It enqueues their send
// jobs through client, which may be an insert-only River client, in the same
// transaction, and returns how many matched (counted up to 100,000) and how
// many it re-drove. An expired delivery gets one more attempt: its age still
// counts from its creation, so a new temporary failure expires it again.
func Redrive(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], f stores.DeliveryFilter, now time.Time,
	limit, batch int,
) (matched, redriven int, err error) {
	for _, s := range f.Statuses {
		if !slices.Contains(stores.RedrivableStatuses, s) {
			return 0, 0, fmt.Errorf("%w: status %q cannot be re-driven (want one of %s)", stores.ErrNotRetryable, s,
				strings.Join(stores.RedrivableStatuses, ", "))
		}
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		m, ids, err := stores.RedriveMatching(ctx, tx, f, now, limit)
		if err != nil {
			return err
		}
		matched, redriven = m, len(ids)
		if err := insertSendJobsWith(ctx, tx, client, ids, batch); err != nil {
			return err
		}
		stores.AddAuditField(ctx, "matched", m)
		stores.AddAuditField(ctx, "retried", len(ids))
		return stores.WriteAudit(ctx, tx) // the operator's audit row, when ctx carries one
	})
	if err != nil {
		return 0, 0, err
	}
	return matched, redriven, nil
}
