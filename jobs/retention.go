package jobs

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/stores"
)

// RetentionArgs is the notify.retention periodic job.
type RetentionArgs struct{}

// Kind is the River job kind.
func (RetentionArgs) Kind() string { return "notify.retention" }

// InsertOpts runs retention on the maintenance queue.
func (RetentionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, UniqueOpts: river.UniqueOpts{ByPeriod: time.Hour}}
}

// retentionBatch bounds one delete statement.
const retentionBatch = 5000

// RetentionWorker deletes inbox items, settled delivery rows, change-log rows
// and spent notifications older than the configured retention (retention:).
// Inbox items are deleted without change-log rows: a stream client whose
// cursor predates them has been reset by the change-log retention already.
type RetentionWorker struct {
	river.WorkerDefaults[RetentionArgs]
	Deps *Deps
}

// Timeout is River's rescue window (a job's timeout is also how long the
// rescuer waits before taking it back from a dead replica); a run stops by
// itself after Deps.maxRun, well inside it.
func (w *RetentionWorker) Timeout(*river.Job[RetentionArgs]) time.Duration {
	return w.Deps.RescueAfter()
}

// Work deletes batch after batch until nothing old is left.
func (w *RetentionWorker) Work(ctx context.Context, job *river.Job[RetentionArgs]) error {
	_, err := w.Deps.Retention(ctx)
	return err
}

// Retention runs one full retention pass now and returns what it deleted.
func (d *Deps) Retention(ctx context.Context) (stores.RetentionResult, error) {
	now := d.now()
	r := d.Config.Retention
	cut := stores.RetentionCutoffs{
		Inbox:      now.Add(-r.Inbox.D()),
		Deliveries: now.Add(-r.Deliveries.D()),
		Changes:    now.Add(-r.Changes.D()),
	}
	var total stores.RetentionResult
	// The change log first: create the days ahead, drop the days past the
	// cutoff whole. Rows older than every day left can only be in the
	// default partition; the batched delete below trims only those.
	if _, err := stores.ExtendChangeLog(ctx, d.Pool); err != nil {
		return total, err
	}
	dropped, oldestKept, err := stores.DropChangeLogDays(ctx, d.Pool, cut.Changes)
	if err != nil {
		return total, err
	}
	total.ChangeDays = int64(dropped)
	if !oldestKept.IsZero() && oldestKept.Before(cut.Changes) {
		cut.Changes = oldestKept
	}
	// The inbox and the ledger next: months ahead, and whole months (or the
	// legacy partition) past retention dropped before the batched deletes,
	// which then only trim the rest.
	if _, err := stores.ExtendLedger(ctx, d.Pool); err != nil {
		return total, err
	}
	inboxMonths, deliveryMonths, err := stores.DropLedgerMonths(ctx, d.Pool, cut.Inbox, cut.Deliveries)
	if err != nil {
		return total, err
	}
	total.InboxMonths, total.DeliveryMonths = int64(inboxMonths), int64(deliveryMonths)
	stopAt := time.Now().Add(d.maxRun())
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		if time.Now().After(stopAt) {
			break // the next run continues; each batch committed on its own
		}
		res, err := stores.DeleteExpired(ctx, d.Pool, cut, retentionBatch)
		if err != nil {
			return total, err
		}
		total.Inbox += res.Inbox
		total.Deliveries += res.Deliveries
		total.Changes += res.Changes
		total.Notifications += res.Notifications
		if res.Inbox < retentionBatch && res.Deliveries < retentionBatch && res.Changes < retentionBatch &&
			res.Notifications < retentionBatch {
			break
		}
	}
	if total != (stores.RetentionResult{}) {
		d.logger().InfoContext(ctx, "retention deleted old rows", "inbox", total.Inbox, "deliveries",
			total.Deliveries, "changes", total.Changes, "change_log_days", total.ChangeDays,
			"inbox_months", total.InboxMonths, "delivery_months", total.DeliveryMonths, "notifications", total.Notifications)
	}
	return total, nil
}
