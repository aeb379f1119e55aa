package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/notifyd/notifyd/notifytype"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/stores"
)

// Retry schedule of a temporary failure: 2 s after the first attempt, doubling,
// capped at 5 minutes, each jittered by ±20 %, until retry.max_age.
const (
	firstRetry = 2 * time.Second
	lastRetry  = 5 * time.Minute
)

// Backoff returns the wait after the attempt-th failed attempt (1-based),
// before jitter.
func Backoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 20 {
		return lastRetry
	}
	d := firstRetry << (attempt - 1)
	return min(d, lastRetry)
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// SendWorker works notify.send: claim, send outside any transaction, settle.
type SendWorker struct {
	river.WorkerDefaults[SendArgs]
	Deps *Deps
}

// Timeout bounds a whole batch well inside River's rescue window: each message
// has its channel's own timeout, the worker stops attempting new ones past its
// budget (see Work), and a provider call still hanging at the timeout is
// cancelled; the settle runs on regardless.
func (w *SendWorker) Timeout(*river.Job[SendArgs]) time.Duration { return w.Deps.RescueAfter() / 2 }

// Work claims the batch's deliveries that can be sent now, hands each to its
// channel with no transaction open, and settles every outcome in one
// statement, in the same transaction that enqueues retry jobs. Only `sent`
// blocks a resend: a crash between the provider's acceptance and the settle
// leaves the row `sending`, and the retry sweep re-drives it after the lease —
// the one window where a duplicate can happen.
func (w *SendWorker) Work(ctx context.Context, job *river.Job[SendArgs]) error {
	d := w.Deps
	claimed, err := stores.ClaimDeliveries(ctx, d.Pool, job.Args.DeliveryIDs, d.now())
	if err != nil {
		return err
	}
	if len(claimed) == 0 {
		return nil // sent, cancelled, or claimed by someone else
	}
	// Past half the lease (or the job's run bound), stop attempting: give the
	// rest back untried rather than let the sweep take them back as if this
	// worker had died.
	budget := time.Now().Add(min(d.lease()/2, d.maxRun()))

	settled := make([]stores.Settlement, 0, len(claimed))
	var retryIDs []string
	var retryAt []time.Time
	var gone []string
	var snooze time.Duration
	rateLimited := map[string]time.Duration{} // channel -> retry after, once a channel said so
	for i := range claimed {
		c := &claimed[i]
		log := d.logger().With("delivery_id", c.ID, "notification_id", c.NotificationID, "channel", c.Channel,
			"job_id", job.ID)
		if c.Recipient != nil {
			log = log.With("recipient", *c.Recipient)
		}
		if after, limited := rateLimited[c.Channel]; limited {
			settled = append(settled, w.rateLimited(c, after))
			snooze = max(snooze, after)
			continue
		}
		if ctx.Err() != nil || time.Now().After(budget) {
			at := d.now()
			settled = append(settled, stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusFailed),
				NextAttemptAt: &at, Refund: true})
			retryIDs, retryAt = append(retryIDs, c.ID), append(retryAt, at)
			continue
		}
		started := time.Now()
		sendErr := w.sendWaiting(ctx, c, budget)
		outcome := "ok"
		if sendErr != nil {
			kind, _ := channels.Classify(sendErr)
			outcome = kind.String()
		}
		d.Metrics.Send(c.Channel, outcome, time.Since(started))
		if sendErr == nil {
			settled = append(settled, stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusSent), Terminal: true})
			log.DebugContext(ctx, "delivery sent", "attempts", c.Attempts)
			continue
		}
		kind, after := channels.Classify(sendErr)
		msg := sendErr.Error()
		switch kind {
		case channels.KindPermanent, channels.KindGone:
			settled = append(settled, stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusRefused),
				Error: msg, Terminal: true})
			if kind == channels.KindGone && c.Recipient != nil {
				gone = append(gone, *c.Recipient)
			}
			log.WarnContext(ctx, "delivery refused", "err", msg)
		case channels.KindRateLimited:
			if after <= 0 {
				after = time.Second
			}
			rateLimited[c.Channel] = after
			settled = append(settled, w.rateLimited(c, after))
			snooze = max(snooze, after)
		default:
			s := w.failed(c, msg, after)
			settled = append(settled, s)
			if s.NextAttemptAt != nil {
				retryIDs, retryAt = append(retryIDs, c.ID), append(retryAt, *s.NextAttemptAt)
			}
			log.InfoContext(ctx, "delivery failed", "err", msg, "attempts", c.Attempts, "status", s.Status)
		}
	}

	// Settle in a fresh context: the sends happened, the ledger must say so
	// even while the daemon is shutting down. A failed settle (the database
	// restarting) is retried, and a settle waiting for a row lock waits, for
	// settleBudget: giving up would leave the batch `sending` for the sweep to
	// send again.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.settleBudget())
	defer cancel()
	err = retrySettle(sctx, func() error {
		return pgx.BeginFunc(sctx, d.Pool, func(tx pgx.Tx) error {
			if _, err := stores.SettleDeliveries(sctx, tx, settled, d.now()); err != nil {
				return err
			}
			if err := stores.MarkWebhookGone(sctx, tx, gone, d.now()); err != nil {
				return err
			}
			return insertRetryJobs(sctx, tx, retryIDs, retryAt)
		})
	})
	if err != nil {
		return fmt.Errorf("settle send batch: %w", err)
	}
	if d.Metrics != nil {
		byID := make(map[string]string, len(claimed))
		for i := range claimed {
			byID[claimed[i].ID] = claimed[i].Channel
		}
		for _, s := range settled {
			d.Metrics.Delivery(byID[s.ID], s.Status, 1)
		}
	}
	if snooze > 0 {
		// The rate-limited rows stay in this job: snoozing re-runs it (and
		// re-claims them) after the limiter's delay, without an attempt spent.
		return river.JobSnooze(snooze)
	}
	return nil
}

// settleBudget is how long a worker keeps trying to record the outcome of
// what it sent: as long as its sends may take (the job's Timeout), so the two
// together stay inside River's rescue window.
//
// Waiting is always safe. The settle only touches rows still held by its
// claim token, and the sweeps take a claim back only under the row's lock
// (the retry sweep skips locked rows, the digest sweep waits and re-checks),
// so a settle either records the truth or updates nothing. Giving up is what loses an outcome:
// the rows stay claimed, the sweep re-drives them after the lease, and what
// was sent is sent again (or, for a notification cancelled meanwhile,
// recorded as cancelled although it went out). A row lock can outlast a
// short budget: a cancel's UPDATE that meets a row a claim has just moved to
// `sending` locks the new version before re-checking its WHERE, skips it,
// and keeps the lock until the cancel commits. With the settle bounded by
// half the lease (2.5 s at chaos's 5 s lease) a slow cancel cost ten sent
// emails their `sent`.
func (d *Deps) settleBudget() time.Duration { return d.RescueAfter() / 2 }

// retrySettle runs settle until it succeeds or ctx ends, backing off from
// 100 ms to 5 s. Send and digest settles only match rows still held by their
// claim, so running one again is safe.
func retrySettle(ctx context.Context, settle func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := settle()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (w *SendWorker) rateLimited(c *stores.Claimed, after time.Duration) stores.Settlement {
	at := w.Deps.now().Add(after)
	return stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusRateLimited),
		NextAttemptAt: &at, Refund: true}
}

// failed settles a temporary failure: retry with backoff, or expired when the
// delivery is older than retry.max_age.
func (w *SendWorker) failed(c *stores.Claimed, msg string, after time.Duration) stores.Settlement {
	maxAge := w.Deps.maxAge()
	next := w.Deps.now().Add(w.Deps.retryWait(c.Attempts, after))
	if next.Sub(c.CreatedAt) > maxAge {
		return stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusExpired),
			Error: fmt.Sprintf("expired after %d attempts over %s; last error: %s", c.Attempts, maxAge, msg), Terminal: true}
	}
	return stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusFailed), Error: msg, NextAttemptAt: &next}
}

// maxRateWait is how long a send waits in-process for the channel's rate
// limiter before giving up and snoozing the batch. Short waits are far cheaper
// than snoozing: a snooze re-claims and re-settles the whole batch.
const maxRateWait = 2 * time.Second

// sendWaiting is send, waiting out short rate limits (without spending an
// attempt) as long as the batch's budget allows.
func (w *SendWorker) sendWaiting(ctx context.Context, c *stores.Claimed, budget time.Time) error {
	for {
		err := w.send(ctx, c)
		if err == nil {
			return nil
		}
		kind, after := channels.Classify(err)
		if kind != channels.KindRateLimited || after <= 0 || after > maxRateWait || time.Now().Add(after).After(budget) {
			return err
		}
		t := time.NewTimer(after)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// send hands one claimed delivery to its channel. A panicking channel is a
// bug, but it must not leave the batch claimed: the rest of the batch would be
// re-driven by the sweep and sent twice. The panic becomes a temporary error
// of this delivery.
func (w *SendWorker) send(ctx context.Context, c *stores.Claimed) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = channels.Temporary(fmt.Errorf("%s channel panicked: %v", c.Channel, p), 0)
		}
	}()
	var params map[string]any
	if len(c.Params) > 0 {
		if err := json.Unmarshal(c.Params, &params); err != nil {
			return channels.Permanent(fmt.Errorf("params of %s are not a JSON object: %w", c.NotificationID, err))
		}
	}
	msg := channels.Message{DeliveryID: c.ID, NotificationID: c.NotificationID, Notifier: c.Notifier, Key: c.Key,
		Actor: c.Actor, Reason: c.Reason, Params: params, CreatedAt: c.CreatedAt, Attempt: c.Attempts}
	if nf, ok := w.Deps.Config.Notifier(c.Notifier); ok {
		msg.Category = nf.Category
	}
	if c.Recipient == nil {
		ch, ok := w.Deps.Bulk[c.Channel]
		if !ok {
			return channels.Permanent(fmt.Errorf("%s channel is not configured", c.Channel))
		}
		return ch.SendBulk(ctx, msg)
	}
	ch, ok := w.Deps.Channels[c.Channel]
	if !ok {
		return channels.Permanent(fmt.Errorf("%s channel is not configured", c.Channel))
	}
	var data map[string]any
	_ = json.Unmarshal(c.Data, &data)
	msg.Recipient = &channels.Recipient{ID: *c.Recipient, Email: c.Email, Name: c.Name, Locale: c.Locale,
		Timezone: c.Timezone, WebhookURL: c.Webhook, Data: data}
	if err := ch.Addressable(c.Notifier, *msg.Recipient); err != nil {
		return channels.Permanent(err) // the address went away after fan-out
	}
	return ch.Send(ctx, msg)
}

// insertRetryJobs enqueues one send job per retried delivery, scheduled at its
// retry time.
func insertRetryJobs(ctx context.Context, tx pgx.Tx, ids []string, at []time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(ids))
	for i := range ids {
		params[i] = river.InsertManyParams{Args: SendArgs{DeliveryIDs: []string{ids[i]}},
			InsertOpts: &river.InsertOpts{ScheduledAt: at[i]}}
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("enqueue retries: %w", err)
	}
	if _, err := client.InsertManyFastTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue %d retries: %w", len(ids), err)
	}
	return nil
}
