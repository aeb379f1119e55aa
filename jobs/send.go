package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/notifytype"
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

// SendWorker works notify.send. A job goes through named steps: claim its
// batch in the ledger (claim), split it into one lane per target (lanes),
// send every lane at once, each one delivery at a time with no transaction
// open (sendLane, send), record each outcome as soon as it is known (settle,
// group-committed with the other lanes of the process), and end the job
// (finish). See docs/architecture.md, "One target never waits on another".
type SendWorker struct {
	river.WorkerDefaults[SendArgs]
	Deps *Deps

	once    sync.Once
	targets *targets     // every target's gate and breaker, for this process
	settler *settler     // the grouped settle statements, for this process
	active  atomic.Int64 // lanes running in this process
	// stuck counts the lanes whose provider call has run longer than
	// stuckAfter: a lingering settle does not wait for them.
	stuck atomic.Int64
}

// stuckAfter is when a provider call stops counting as about to report: past
// it, a lane is not waited for by the other lanes' lingering settle.
const stuckAfter = 10 * time.Millisecond

func (w *SendWorker) init() {
	w.once.Do(func() {
		w.targets = w.Deps.sendTargets()
		w.settler = newSettler(w.Deps, w.Deps.Config.Queues.SendBatch, func() int {
			return int(w.active.Load() - w.stuck.Load())
		})
	})
}

// Timeout bounds a whole batch well inside River's rescue window: each message
// has its channel's own timeout, the lanes stop attempting new ones past their
// budget (see claim), and a provider call still hanging at the timeout is
// cancelled; the settles run on regardless.
func (w *SendWorker) Timeout(*river.Job[SendArgs]) time.Duration { return w.Deps.RescueAfter() / 2 }

// Work claims the batch's deliveries that can be sent now and sends them, one
// lane per target, each outcome settled as it happens. Only `sent` blocks a
// resend: a crash between a provider's acceptance and the settle of that one
// message leaves its row `sending`, and the retry sweep re-drives it after the
// lease — the one window where a duplicate can happen, one message wide per
// lane. Deliveries a lane never reached stay claimed too, and are re-driven
// the same way, but they were never sent.
func (w *SendWorker) Work(ctx context.Context, job *river.Job[SendArgs]) error {
	w.init()
	run, err := w.claim(ctx, job)
	if err != nil || run == nil {
		return err
	}
	run.prepare(ctx)
	lanes := w.lanes(run.claimed, run.prepared)
	var wg sync.WaitGroup
	for _, l := range lanes[1:] {
		wg.Go(func() { run.sendLane(ctx, l) })
	}
	run.sendLane(ctx, lanes[0])
	wg.Wait()
	return run.finish()
}

// sendRun is one run of a send job: its claimed batch and what its lanes
// report back.
type sendRun struct {
	w       *SendWorker
	job     *river.Job[SendArgs]
	client  *river.Client[pgx.Tx]
	claimed []stores.Claimed
	// budget is when the lanes stop attempting: past half the lease (or the
	// job's run bound) the rest is given back untried rather than left for
	// the sweep to take back as if this worker had died.
	budget time.Time

	// losses is how many times this process had lost its liveness lock
	// before the claim: once it loses it again, the claims may be re-driven
	// by others or by itself (stores.FreeClaims), and the lanes stop.
	losses uint64

	// prepared is what each channels.Preparer among the batch's channels
	// read for the whole batch, by channel; read-only once the lanes start.
	prepared map[string]any

	mu     sync.Mutex
	snooze time.Duration // the longest rate limit a lane met
	err    error         // the first settle that could not be recorded
}

// claim is the first step: it claims whichever of the job's deliveries can be
// sent now, in one statement. A nil run means there is nothing to send (sent,
// cancelled, or claimed by someone else).
func (w *SendWorker) claim(ctx context.Context, job *river.Job[SendArgs]) (*sendRun, error) {
	d := w.Deps
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil, fmt.Errorf("send job without its River client: %w", err)
	}
	losses, lost := d.live.epoch()
	if lost {
		// Other replicas may be taking this process's claims for a dead
		// one's (see RunLiveness): claim nothing until the lock is back.
		return nil, river.JobSnooze(livenessCheck)
	}
	batches, err := d.closeBatches(ctx, job.Args.DeliveryIDs) // workflows: see batch.go
	if err != nil {
		return nil, err
	}
	// Deliveries to a suppressed address settle `suppressed` in the claim.
	// The claim names this River client: once its process is gone, any
	// replica takes the claims back at once (RunLiveness).
	var by string
	if n := len(job.AttemptedBy); n > 0 {
		by = job.AttemptedBy[n-1]
	}
	claimed, err := stores.ClaimDeliveriesSuppressing(ctx, d.Pool, job.Args.DeliveryIDs, d.now(), d.suppressFields(), by)
	if err != nil {
		return nil, err
	}
	if err := withBatches(claimed, batches); err != nil {
		return nil, err
	}
	if len(claimed) == 0 {
		return nil, nil
	}
	return &sendRun{w: w, job: job, client: client, claimed: claimed, losses: losses,
		budget: time.Now().Add(min(d.lease()/2, d.maxRun()))}, nil
}

// lane is a batch's deliveries to one target, in claim order.
type lane struct {
	target     string
	deliveries []*stores.Claimed
}

// lanes is the second step: it splits the claimed batch by target.
func (w *SendWorker) lanes(claimed []stores.Claimed, prepared map[string]any) []lane {
	var lanes []lane
	index := map[string]int{}
	for i := range claimed {
		c := &claimed[i]
		t := w.Deps.targetOf(c, prepared)
		k, ok := index[t]
		if !ok {
			k = len(lanes)
			index[t] = k
			lanes = append(lanes, lane{target: t})
		}
		lanes[k].deliveries = append(lanes[k].deliveries, c)
	}
	return lanes
}

// sendLane sends one lane's deliveries one at a time, each through its
// target's gate, and settles each outcome before the next send. It stops
// early, recording why for the rest, when the job's budget or context ends
// (given back untried), the target's breaker is open or the target failed to
// answer (parked until later), or the target rate-limits (snoozed with the
// job). A settle that cannot be recorded stops the lane and leaves the rest
// claimed for the retry sweep: sending on would only widen the crash window.
func (r *sendRun) sendLane(ctx context.Context, l lane) {
	r.w.active.Add(1)
	defer r.w.active.Add(-1)
	defer func() {
		if p := recover(); p != nil {
			r.fail(fmt.Errorf("send lane to %s panicked: %v", l.target, p))
		}
	}()
	d := r.w.Deps
	waitCtx, cancel := context.WithDeadline(ctx, r.budget)
	defer cancel()
	for i, c := range l.deliveries {
		rest := l.deliveries[i:]
		if ctx.Err() != nil || time.Now().After(r.budget) || r.livenessLost() {
			// Lost liveness since the claim (even if retaken since):
			// these claims may be re-driven already; sending on would
			// send them twice.
			r.giveBack(ctx, rest)
			return
		}
		if send, stop := r.admitCapped(ctx, c); stop {
			return
		} else if !send {
			continue
		}
		park, err := r.w.targets.acquireAt(waitCtx, l.target, r.bulk())
		switch {
		case err != nil:
			r.giveBack(ctx, rest)
			return
		case park != nil:
			r.park(ctx, l.target, rest, park)
			return
		}
		started := time.Now()
		stuck := time.AfterFunc(stuckAfter, func() { r.w.stuck.Add(1) })
		report, sendErr := r.sendWaiting(ctx, c)
		if !stuck.Stop() {
			r.w.stuck.Add(-1)
		}
		observed := sendErr
		if sendErr != nil && ctx.Err() != nil {
			// Cut short by the job's end, not by the target.
			observed = channels.Temporary(context.Cause(ctx), 0)
		}
		r.w.targets.release(l.target, observed)
		outcome := "ok"
		if sendErr != nil {
			kind, _ := channels.Classify(sendErr)
			outcome = kind.String()
		}
		d.metrics().Send(c.Channel, outcome, time.Since(started))

		req, limited := r.outcome(ctx, c, sendErr, report)
		if !r.settle(ctx, req) {
			return
		}
		switch {
		case limited > 0:
			r.rateLimited(ctx, rest[1:], limited)
			return
		case hostFailure(observed) && len(rest) > 1:
			// The next ones would most likely wait out the same timeout: park
			// them until the breaker closes, or for a first retry's wait.
			p := r.w.targets.parkedNow(l.target)
			if p == nil {
				p = &parking{until: d.now().Add(jitter(firstRetry)), reason: fmt.Sprintf(
					"not attempted: %s did not answer the delivery before this one (%s)", l.target, sendErr)}
			}
			r.park(ctx, l.target, rest[1:], p)
			return
		}
	}
}

// bulk reports whether the run is a job of the send_bulk queue (a large
// fan-out's sends): its lanes queue behind interactive ones at a target's
// gate, and what it retries goes back to send_bulk.
func (r *sendRun) bulk() bool { return r.job.Queue == QueueSendBulk }

// livenessLost reports whether this process lost its liveness lock since
// the run's claim.
func (r *sendRun) livenessLost() bool {
	losses, lost := r.w.Deps.live.epoch()
	return lost || losses != r.losses
}

// admitCapped admits c against its channel's per-recipient cap
// (channels.RecipientCapper) and reports whether it may be sent. One over
// the cap is settled `throttled` here (its attempt given back). A cap that
// cannot be read, or a settle that cannot be recorded, fails the run
// (r.fail) and stop says to end the lane, leaving the rest claimed, as a
// failed settle does.
func (r *sendRun) admitCapped(ctx context.Context, c *stores.Claimed) (send, stop bool) {
	d := r.w.Deps
	capper, ok := d.Channels[c.Channel].(channels.RecipientCapper)
	if !ok || c.Recipient == nil {
		return true, false
	}
	limit, per := capper.RecipientCap()
	if limit <= 0 {
		return true, false
	}
	admitted, err := stores.AdmitRecipientCap(ctx, d.Pool, *c.Recipient, c.Channel, c.ID, limit, per, d.now())
	if err != nil {
		r.fail(err)
		return false, true
	}
	if admitted {
		return true, false
	}
	msg := fmt.Sprintf("throttled: %s sends at most %d messages per %s to a recipient (the channel's per-recipient cap)",
		c.Channel, limit, per)
	r.deliveryLog(c).WarnContext(ctx, "delivery over its channel's per-recipient cap", "limit", limit, "per", per)
	ok = r.settle(ctx, settleReq{client: r.client, settled: []stores.Settlement{{ID: c.ID, ClaimedAt: c.ClaimedAt,
		Status: string(notifytype.StatusThrottled), Error: msg, Terminal: true, Refund: true}}})
	return false, !ok
}

// outcome turns a send's result into its settle request, logging it. A rate
// limit also returns how long the target asked to wait. The provider of
// the channel's Report goes on the row whatever the outcome (with its
// message id when sent), and a provider call
// that failed is also kept as a failed attempt (see stores.Settlement.Failed).
func (r *sendRun) outcome(ctx context.Context, c *stores.Claimed, sendErr error, report *channels.Report) (settleReq, time.Duration) {
	d := r.w.Deps
	provider := report.Provider
	req := settleReq{client: r.client}
	log := d.logger()
	if sendErr == nil {
		req.settled = []stores.Settlement{{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusSent), Terminal: true,
			Provider: provider, ProviderMessageID: report.ProviderMessageID}}
		if log.Enabled(ctx, slog.LevelDebug) { // the common case: no attributes built for nothing
			r.deliveryLog(c).DebugContext(ctx, "delivery sent", "attempts", c.Attempts)
		}
		return req, 0
	}
	log = r.deliveryLog(c)
	kind, after := channels.Classify(sendErr)
	msg := sendErr.Error()
	switch kind {
	case channels.KindPermanent, channels.KindGone:
		req.settled = []stores.Settlement{{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusRefused),
			Error: msg, Terminal: true, Provider: provider, Failed: true}}
		if kind == channels.KindGone && c.Recipient != nil {
			req.gone = []string{*c.Recipient}
		}
		if sup := suppression(c.Channel, sendErr); sup != nil && c.Recipient != nil {
			req.suppress = []stores.Suppression{*sup} // settled with the refusal, in its transaction
		}
		log.WarnContext(ctx, "delivery refused", "err", msg)
	case channels.KindRateLimited:
		if after <= 0 {
			after = time.Second
		}
		s := r.rateLimit(c, after)
		s.Provider = provider
		req.settled = []stores.Settlement{s}
		return req, after
	default:
		s := r.failed(c, msg, after)
		s.Provider, s.Failed = provider, true
		req.settled = []stores.Settlement{s}
		if s.NextAttemptAt != nil {
			req.retries = []retryJob{{id: c.ID, at: *s.NextAttemptAt, bulk: r.bulk()}}
		}
		log.InfoContext(ctx, "delivery failed", "err", msg, "attempts", c.Attempts, "status", s.Status)
	}
	return req, 0
}

func (r *sendRun) deliveryLog(c *stores.Claimed) *slog.Logger {
	log := r.w.Deps.logger().With("delivery_id", c.ID, "notification_id", c.NotificationID, "channel", c.Channel,
		"job_id", r.job.ID)
	if c.Recipient != nil {
		log = log.With("recipient", *c.Recipient)
	}
	return log
}

// settle records req (see settler.record) and counts its outcomes. It
// reports false, and remembers the error for finish, when the settle could
// not be recorded.
func (r *sendRun) settle(ctx context.Context, req settleReq) bool {
	if err := r.w.settler.record(ctx, r.w.Deps, req); err != nil {
		r.fail(err)
		return false
	}
	for _, s := range req.settled {
		r.w.Deps.metrics().Delivery(r.channelOf(s.ID), s.Status, 1)
	}
	return true
}

func (r *sendRun) channelOf(id string) string {
	for i := range r.claimed {
		if r.claimed[i].ID == id {
			return r.claimed[i].Channel
		}
	}
	return ""
}

func (r *sendRun) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// giveBack settles deliveries a lane did not attempt (the job's budget or
// context ended) as failed, due now, with the attempt refunded and a new send
// job for them.
func (r *sendRun) giveBack(ctx context.Context, rest []*stores.Claimed) {
	at := r.w.Deps.now()
	req := settleReq{client: r.client}
	for _, c := range rest {
		req.settled = append(req.settled, stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt,
			Status: string(notifytype.StatusFailed), NextAttemptAt: &at, Refund: true})
		req.retries = append(req.retries, retryJob{id: c.ID, at: at, bulk: r.bulk()})
	}
	r.settle(ctx, req)
}

// park settles deliveries that are not attempted because their target is not
// answering: failed, with the attempt refunded, the reason as last_error and
// a send job at p.until — or expired, when that is past retry.max_age.
func (r *sendRun) park(ctx context.Context, target string, rest []*stores.Claimed, p *parking) {
	d := r.w.Deps
	maxAge := d.maxAge()
	req := settleReq{client: r.client}
	for _, c := range rest {
		if p.until.Sub(c.CreatedAt) > maxAge {
			req.settled = append(req.settled, stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusExpired),
				Error: fmt.Sprintf("expired after %d attempts over %s; %s", c.Attempts-1, maxAge, p.reason), Refund: true, Terminal: true})
			continue
		}
		at := p.until
		req.settled = append(req.settled, stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusFailed),
			Error: p.reason, NextAttemptAt: &at, Refund: true})
		req.retries = append(req.retries, retryJob{id: c.ID, at: at, bulk: r.bulk()})
	}
	d.logger().InfoContext(ctx, "deliveries parked", "target", target, "count", len(rest), "until", p.until,
		"job_id", r.job.ID, "reason", p.reason)
	r.settle(ctx, req)
}

// rateLimited settles the rest of a lane whose target rate-limits: the rows
// stay in this job, and snoozing re-runs it (and re-claims them) after the
// limiter's delay, without an attempt spent.
func (r *sendRun) rateLimited(ctx context.Context, rest []*stores.Claimed, after time.Duration) {
	req := settleReq{client: r.client}
	for _, c := range rest {
		req.settled = append(req.settled, r.rateLimit(c, after))
	}
	r.mu.Lock()
	r.snooze = max(r.snooze, after)
	r.mu.Unlock()
	r.settle(ctx, req)
}

// finish is the last step: a settle that could not be recorded fails the job
// (River retries it; what it had not settled is still claimed, and the retry
// sweep re-drives it after the lease), and a rate-limited lane snoozes it.
func (r *sendRun) finish() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return fmt.Errorf("settle send batch: %w", r.err)
	}
	if r.snooze > 0 {
		return river.JobSnooze(r.snooze)
	}
	return nil
}

func (r *sendRun) rateLimit(c *stores.Claimed, after time.Duration) stores.Settlement {
	at := r.w.Deps.now().Add(after)
	return stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusRateLimited),
		NextAttemptAt: &at, Refund: true}
}

// failed settles a temporary failure: retry with backoff, or expired when the
// delivery is older than retry.max_age.
func (r *sendRun) failed(c *stores.Claimed, msg string, after time.Duration) stores.Settlement {
	d := r.w.Deps
	maxAge := d.maxAge()
	next := d.now().Add(d.retryWait(c.Attempts, after))
	if next.Sub(c.CreatedAt) > maxAge {
		return stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusExpired),
			Error: fmt.Sprintf("expired after %d attempts over %s; last error: %s", c.Attempts, maxAge, msg), Terminal: true}
	}
	return stores.Settlement{ID: c.ID, ClaimedAt: c.ClaimedAt, Status: string(notifytype.StatusFailed), Error: msg, NextAttemptAt: &next}
}

// prepare lets each channel of the batch that reads something per recipient
// at send time (channels.Preparer) read it for all of the batch's recipients
// on it at once. A failed Prepare is logged and its channel's sends read for
// themselves.
func (r *sendRun) prepare(ctx context.Context) {
	byChannel := map[string][]string{}
	for _, c := range r.claimed {
		if c.Recipient == nil {
			continue
		}
		if _, ok := r.w.Deps.Channels[c.Channel].(channels.Preparer); ok {
			byChannel[c.Channel] = append(byChannel[c.Channel], *c.Recipient)
		}
	}
	for name, recipients := range byChannel {
		v, err := r.w.Deps.Channels[name].(channels.Preparer).Prepare(ctx, recipients)
		if err != nil {
			r.w.Deps.logger().WarnContext(ctx, "prepare a send batch", "channel", name, "recipients", len(recipients), "err", err)
			continue
		}
		if r.prepared == nil {
			r.prepared = map[string]any{}
		}
		r.prepared[name] = v
	}
}

// maxRateWait is how long a send waits in-process for the channel's rate
// limiter before giving up and snoozing the job. Short waits are far cheaper
// than snoozing: a snooze re-claims and re-settles the rest of the lane.
const maxRateWait = 2 * time.Second

// sendWaiting is send, waiting out short rate limits (without spending an
// attempt) as long as the job's budget allows. It also returns what the
// channel reported (channels.Report) for its last call: the provider and
// the message id.
func (r *sendRun) sendWaiting(ctx context.Context, c *stores.Claimed) (*channels.Report, error) {
	for {
		rctx, report := channels.WithReport(ctx)
		err := r.send(rctx, c)
		if err == nil {
			return report, nil
		}
		kind, after := channels.Classify(err)
		if kind != channels.KindRateLimited || after <= 0 || after > maxRateWait || time.Now().Add(after).After(r.budget) {
			return report, err
		}
		t := time.NewTimer(after)
		select {
		case <-ctx.Done():
			t.Stop()
			return report, err
		case <-t.C:
		}
	}
}

// send hands one claimed delivery to its channel. A panicking channel is a
// bug, but it must not leave the lane claimed: the rest of it would be
// re-driven by the sweep. The panic becomes a temporary error of this
// delivery.
func (r *sendRun) send(ctx context.Context, c *stores.Claimed) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = channels.Temporary(fmt.Errorf("%s channel panicked: %v", c.Channel, p), 0)
		}
	}()
	d := r.w.Deps
	var params map[string]any
	if len(c.Params) > 0 {
		if err := json.Unmarshal(c.Params, &params); err != nil {
			return channels.Permanent(fmt.Errorf("params of %s are not a JSON object: %w", c.NotificationID, err))
		}
	}
	tenant, err := decodeTenant(c.Tenant)
	if err != nil {
		return channels.Permanent(fmt.Errorf("tenant of %s: %w", c.NotificationID, err))
	}
	msg := channels.Message{DeliveryID: c.ID, NotificationID: c.NotificationID, Notifier: c.Notifier, Key: c.Key,
		Actor: c.Actor, Reason: c.Reason, Params: notifytype.TemplateParams(params, tenant), CreatedAt: c.CreatedAt,
		Attempt: c.Attempts, Tenant: tenant}
	if nf, ok := d.Config.Notifier(c.Notifier); ok {
		msg.Category = nf.Category
	}
	if c.Recipient == nil {
		ch, ok := d.Bulk[c.Channel]
		if !ok {
			return channels.Permanent(fmt.Errorf("%s channel is not configured", c.Channel))
		}
		msg.Params = d.localized(msg.Params, nil, nil)
		return ch.SendBulk(ctx, msg)
	}
	ch, ok := d.Channels[c.Channel]
	if !ok {
		return channels.Permanent(fmt.Errorf("%s channel is not configured", c.Channel))
	}
	var data map[string]any
	_ = json.Unmarshal(c.Data, &data)
	msg.Recipient = &channels.Recipient{ID: *c.Recipient, Email: c.Email, Name: c.Name, Locale: c.Locale,
		Timezone: c.Timezone, WebhookURL: c.Webhook, Phone: c.Phone, Data: data}
	if err := ch.Addressable(c.Notifier, *msg.Recipient); err != nil {
		return channels.Permanent(err) // the address went away after fan-out
	}
	// Templates render in the recipient's locale and zone (t, .Locale).
	msg.Params = d.localized(msg.Params, msg.Recipient, nil)
	if v, ok := r.prepared[c.Channel]; ok {
		ctx = channels.WithPrepared(ctx, v)
	}
	return ch.Send(ctx, msg)
}

// settleBudget is how long a lane keeps trying to record the outcome of
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

// RetryDelivery is an operator's retry of one delivery (the console's retry
// button, POST /v1/deliveries/{id}/retry): from a re-drivable status (see
// stores.RedrivableStatuses) it becomes failed, due now, and a send job for
// it is enqueued through client (an insert-only client will do) in the same
// transaction. It returns the delivery's status, with stores.ErrNotFound or
// stores.ErrNotRetryable when it was not retried. An expired delivery gets
// one more attempt: its age still counts from its creation.
func RetryDelivery(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], id string, now time.Time) (string, error) {
	var status string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if status, err = stores.RetryDelivery(ctx, tx, id, now); err != nil {
			return err
		}
		if err := insertSendJobsWith(ctx, tx, client, []string{id}, 1); err != nil {
			return err
		}
		stores.AddAuditField(ctx, "before", status)
		stores.AddAuditField(ctx, "after", "failed, due now")
		return stores.WriteAudit(ctx, tx) // the operator's audit row, when ctx carries one
	})
	return status, err
}
