package jobs

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/stores"
)

// Settles are group-committed across the send lanes of a process: each lane
// records each outcome as soon as its provider call returns, and waits for
// the statement that records it before its next call, so a crash can only
// duplicate the one message per lane whose outcome was not yet committed.
// Lanes that finish a call while a statement is in flight go together in the
// next one (see group): under load one UPDATE … FROM unnest settles the
// outcomes of many lanes, and alone a lane's outcome is written at once.
const (
	// settleGroupMax bounds the requests in one grouped statement.
	settleGroupMax = 256
	// settleGroupSlots is how many grouped statements of retried outcomes run
	// at once: two, so one waiting for a notification's share lock (a
	// cancel's, see stores.SettleDeliveries) holds up only the lanes in it.
	// Terminal outcomes run one statement at a time, lingering: see
	// settleLinger.
	settleGroupSlots = 2
	// settleLinger is how long a terminal settle may wait for the outcomes of
	// other lanes of the process before it runs (unless every lane already
	// waits in it): a statement costs far more than a row, and one lingering
	// statement at a time settles dozens of lanes' messages at once where
	// statements run as each outcome arrives settled four or five (measured:
	// twice the database's CPU per email). It adds at most that to each
	// message's turn, which the other lanes' sends overlap.
	settleLinger = 2 * time.Millisecond
)

// settleReq is what one lane records in one go: the outcome of its latest
// send, or the rest of its deliveries given back or parked together.
type settleReq struct {
	settled []stores.Settlement
	retries []retryJob // a send job for each retried delivery, at its time
	gone    []string   // recipients whose webhook_url answered 410
	// suppress are addresses a refusal put on the suppression list
	// (channels.Suppress): inserted in the settle's transaction.
	suppress []stores.Suppression
	// client inserts the retry jobs: the River client of the running job.
	client *river.Client[pgx.Tx]
}

// retryJob is a delivery to try again at a time. A bulk one (retried by a
// job of the send_bulk queue) goes back to that queue, so a large
// notification's retries and given-back deliveries never take the send
// queue's workers from one-recipient notifications.
type retryJob struct {
	id   string
	at   time.Time
	bulk bool
}

// settler holds a process's two settle groups. Terminal outcomes (sent,
// refused, expired: the common case) are one lock-free statement with no
// transaction around it. Outcomes that retry (failed, parked, rate limited,
// given back) settle with their retry jobs in one transaction, reading their
// notifications FOR SHARE (see stores.SettleDeliveries); they are kept apart
// so that a cancel those share locks wait for never delays a terminal settle.
type settler struct {
	terminal *group[settleReq, struct{}]
	retries  *group[settleReq, struct{}]
}

// newSettler returns the settle groups of a process whose lanes is the
// number of send lanes running in it.
func newSettler(d *Deps, batch int, lanes func() int) *settler {
	// A grouped statement runs for every lane in it, so no single job's
	// context bounds it; the claim's lease does.
	bounded := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), d.lease()/2)
	}
	return &settler{
		terminal: newLingeringGroup(settleGroupMax, 1, settleLinger, lanes, func(reqs []settleReq) ([]struct{}, error) {
			ctx, cancel := bounded()
			defer cancel()
			if _, err := stores.SettleDeliveries(ctx, d.Pool, flatten(reqs), d.now()); err != nil {
				return nil, err
			}
			return make([]struct{}, len(reqs)), nil
		}),
		retries: newGroup(settleGroupMax, settleGroupSlots, func(reqs []settleReq) ([]struct{}, error) {
			ctx, cancel := bounded()
			defer cancel()
			var gone []string
			var suppress []stores.Suppression
			var retries []retryJob
			var client *river.Client[pgx.Tx]
			for _, r := range reqs {
				gone = append(gone, r.gone...)
				suppress = append(suppress, r.suppress...)
				retries = append(retries, r.retries...)
				if client == nil {
					client = r.client
				}
			}
			err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
				if _, err := stores.SettleDeliveries(ctx, tx, flatten(reqs), d.now()); err != nil {
					return err
				}
				if err := stores.MarkWebhookGone(ctx, tx, gone, d.now()); err != nil {
					return err
				}
				if err := stores.PutSuppressions(ctx, tx, suppress, d.now()); err != nil {
					return err
				}
				return insertRetryJobs(ctx, tx, client, retries, batch)
			})
			if err != nil {
				return nil, err
			}
			return make([]struct{}, len(reqs)), nil
		}),
	}
}

func flatten(reqs []settleReq) []stores.Settlement {
	var n int
	for _, r := range reqs {
		n += len(r.settled)
	}
	out := make([]stores.Settlement, 0, n)
	for _, r := range reqs {
		out = append(out, r.settled...)
	}
	return out
}

// record writes req and returns once it is committed. A failed statement (the
// database restarting) is retried, and a statement waiting for a row lock
// waits, for settleBudget: giving up would leave the deliveries `sending` for
// the sweep to send again. It runs on when ctx ends: the sends happened, and
// the ledger must say so even while the daemon shuts down.
func (s *settler) record(ctx context.Context, d *Deps, req settleReq) error {
	if len(req.settled) == 0 {
		return nil
	}
	g := s.terminal
	if len(req.retries) > 0 || len(req.gone) > 0 || len(req.suppress) > 0 || slices.ContainsFunc(req.settled, func(x stores.Settlement) bool { return !x.Terminal }) {
		g = s.retries
	}
	if _, err := g.do(req); err == nil {
		return nil // the common case: no timer for a retry that is not needed
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.settleBudget())
	defer cancel()
	err := retrySettle(sctx, func() error {
		_, err := g.do(req)
		return err
	})
	if err != nil {
		return fmt.Errorf("settle %d deliveries: %w", len(req.settled), err)
	}
	return nil
}

// insertRetryJobs enqueues the send jobs of retried deliveries through
// client, in tx: deliveries due at the same instant (a lane's parked or
// given-back rest) share jobs of up to batch deliveries, the others get one
// job each, scheduled at their retry time.
func insertRetryJobs(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], retries []retryJob, batch int) error {
	if len(retries) == 0 {
		return nil
	}
	if client == nil {
		return fmt.Errorf("enqueue %d retries: no River client", len(retries))
	}
	if batch <= 0 {
		batch = DefaultSendBatch
	}
	type due struct {
		at   time.Time
		bulk bool
	}
	byTime := map[due][]string{}
	var order []due
	for _, r := range retries {
		k := due{r.at, r.bulk}
		if _, ok := byTime[k]; !ok {
			order = append(order, k)
		}
		byTime[k] = append(byTime[k], r.id)
	}
	var params []river.InsertManyParams
	for _, k := range order {
		ids := byTime[k]
		for start := 0; start < len(ids); start += batch {
			opts := &river.InsertOpts{ScheduledAt: k.at}
			if k.bulk {
				opts.Queue, opts.Priority = QueueSendBulk, bulkSendPriority
			}
			params = append(params, river.InsertManyParams{Args: SendArgs{DeliveryIDs: ids[start:min(start+batch, len(ids))]},
				InsertOpts: opts})
		}
	}
	if err := insertJobs(ctx, tx, client, params); err != nil {
		return fmt.Errorf("enqueue %d retries: %w", len(retries), err)
	}
	return nil
}
