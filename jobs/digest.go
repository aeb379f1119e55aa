package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/notifyd/notifyd/notifytype"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/uuidv7"
	"github.com/notifyd/notifyd/stores"
)

// Digests (SPEC §9) are race-free by construction, not by timing:
//
//   - The sweep enqueues at most one job per (recipient, schedule instant,
//     oldest pending row): a River unique key, enforced by a unique index, so
//     two sweeps at the same moment, or a doubled run after a leader change,
//     insert one job between them.
//   - Whatever the number of jobs, rows are taken by a claim: one UPDATE moves
//     them from digest_pending to digest_sending under a new digest id. A
//     second job, replica or sweep for the same recipient finds them gone, so
//     no row is ever in two digests.
//   - The digest id is stored on the rows. It is the email's Message-ID, and a
//     retry or a re-driven claim resends the same rows under the same id.

// DigestArgs is the notify.digest job: send one recipient's digest.
//
// A job from the sweep has no DigestID: it claims the recipient's fresh rows
// created before DueAt under a new digest id. A job with DigestID resends that
// digest (a retry after a temporary failure, or a claim the sweep re-drove):
// it claims exactly that digest's rows again.
type DigestArgs struct {
	Recipient string `json:"recipient"`
	// DueAt is the schedule instant the digest is for, in UTC (a zone in the
	// args would change River's unique key for the same instant).
	DueAt time.Time `json:"due_at"`
	// OldestID is the recipient's oldest fresh row when the sweep enqueued the
	// job. It is in the unique key so that a row that commits late, after the
	// digest for its instant was sent, gets a job of its own instead of
	// colliding with the completed one.
	OldestID string `json:"oldest_id,omitempty"`
	DigestID string `json:"digest_id,omitempty"`
}

// Kind is the River job kind.
func (DigestArgs) Kind() string { return "notify.digest" }

// InsertOpts puts digests on their own queue. Uniqueness is the sweep's, per
// insert (digestUnique): a retry job must not collide with the job inserting it.
func (DigestArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueDigest, MaxAttempts: 25}
}

// digestUnique is how the sweep inserts: one job per args — recipient, due
// instant and oldest row — in every state but cancelled and discarded (River's
// default ByState), so a digest that was already sent for that instant is not
// enqueued again either.
var digestUnique = river.UniqueOpts{ByArgs: true}

// DigestWorker works notify.digest: claim, send outside any transaction, settle.
type DigestWorker struct {
	river.WorkerDefaults[DigestArgs]
	Deps *Deps
}

// Timeout stops a digest well inside the claim's lease, so the sweep never
// takes back the claim of a worker that is still alive.
func (w *DigestWorker) Timeout(*river.Job[DigestArgs]) time.Duration {
	return w.Deps.lease() / 2
}

// Work sends one digest. In one round trip (one implicit transaction) it
// claims the rows (rows of cancelled notifications become digest_dropped) and
// reads the first digest.max_items of them with their inbox texts, and the
// profile; then it calls the email channel with no transaction open, and
// settles all the rows in one statement: digest_sent, digest_failed
// (permanent failure, or temporary past retry.max_age) or back to
// digest_pending under the same id with a retry job, inserted in the settling
// transaction. Without rows there is no email.
func (w *DigestWorker) Work(ctx context.Context, job *river.Job[DigestArgs]) error {
	d := w.Deps
	if d.Digests == nil {
		return errors.New("notify.digest: email is not configured (channels.email is absent), so the digest cannot be sent; its rows stay digest_pending")
	}
	a := job.Args
	digestID := a.DigestID
	if digestID == "" {
		digestID = uuidv7.String()
	}
	log := d.logger().With("recipient", a.Recipient, "digest_id", digestID, "job_id", job.ID)

	// Claim and read in one round trip. The claim time is the claim token:
	// truncated to what timestamptz stores, so it compares equal to itself.
	req := stores.DigestClaimRequest{Recipient: a.Recipient, DigestID: digestID,
		Resend: a.DigestID != "", DueAt: a.DueAt, Now: d.now().Truncate(time.Microsecond), MaxItems: d.Config.Digest.MaxItems}
	var claim *stores.ClaimedDigest
	var err error
	if req.Resend {
		claim, err = stores.ClaimDigest(ctx, d.Pool, req)
	} else {
		claim, err = d.digestGroups().claims.do(req)
	}
	if err != nil {
		return err
	}
	if claim.Count == 0 {
		d.Metrics.DigestRun("empty")
		return nil // nothing pending (taken by another job, or dropped): no email
	}

	msg := channels.Digest{DeliveryID: digestID, Recipient: digestRecipient(a.Recipient, claim.Profile),
		Data: config.DigestData{Items: w.items(ctx, claim.Items), Count: claim.Count}}
	sendErr := d.Digests.SendDigest(ctx, msg)

	s, retryIn := w.outcome(claim, digestID, sendErr)
	// Settle in a fresh context: the send happened, the ledger must say so
	// even while the daemon is shutting down; like a send batch's settle it
	// is retried, or waits for a row lock, for settleBudget (a lost settle
	// means a resend).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.settleBudget())
	defer cancel()
	var held int64
	err = retrySettle(sctx, func() error {
		if s.Status != string(notifytype.StatusDigestPending) {
			var err error
			held, err = d.digestGroups().settles.do(s)
			return err
		}
		// A retry: the rows go back to digest_pending and the job that will
		// resend them is inserted in the same transaction, or neither is.
		return pgx.BeginFunc(sctx, d.Pool, func(tx pgx.Tx) error {
			var err error
			if held, err = stores.SettleDigest(sctx, tx, s, d.now()); err != nil || held == 0 {
				return err
			}
			// River schedules on the database's clock, the ledger on d.now(),
			// which tests move: the job waits retryIn of real time.
			retry := DigestArgs{Recipient: a.Recipient, DueAt: claim.DueAt.UTC(), DigestID: digestID}
			return insertDigestJobs(sctx, tx, []river.InsertManyParams{{Args: retry,
				InsertOpts: &river.InsertOpts{ScheduledAt: time.Now().Add(retryIn)}}})
		})
	})
	if err != nil {
		return fmt.Errorf("settle digest %s of %s: %w", digestID, a.Recipient, err)
	}
	log = log.With("count", claim.Count, "attempts", claim.Attempts)
	switch {
	case held == 0:
		d.Metrics.DigestRun("lost_claim")
		log.WarnContext(ctx, "digest claim was taken back before the settle (lease expired); the re-drive owns it",
			"err", errString(sendErr))
	case sendErr == nil:
		d.Metrics.DigestRun("sent")
		d.Metrics.Delivery(d.Registry.Digest(), s.Status, int(held))
		log.DebugContext(ctx, "digest sent")
	case s.Status == string(notifytype.StatusDigestPending):
		d.Metrics.DigestRun("retried")
		log.InfoContext(ctx, "digest failed, retry scheduled", "err", sendErr, "retry_in", retryIn)
	default:
		d.Metrics.DigestRun("failed")
		d.Metrics.Delivery(d.Registry.Digest(), s.Status, int(held))
		log.WarnContext(ctx, "digest failed", "err", sendErr)
	}
	return nil
}

// digestGroupMax is the most digests one grouped claim or settle statement
// carries.
const digestGroupMax = 128

// digestGroupSlots is how many grouped claims (and settles) may run at once.
// One of each: with many workers the batches grow instead (measured: a second
// slot halves the batch size and costs more database time per digest than it
// saves in waiting).
const digestGroupSlots = 1

// digestGroups coalesce the claims of new digests and the terminal settles of
// digest jobs running at the same time into one statement each (see group):
// with many recipients due at once, two round trips and two transactions per
// digest would otherwise be most of a digest's cost.
type digestGroups struct {
	claims  *group[stores.DigestClaimRequest, *stores.ClaimedDigest]
	settles *group[stores.DigestSettlement, int64]
}

func (d *Deps) digestGroups() *digestGroups {
	d.digestOnce.Do(func() {
		// A grouped statement runs for every job in it, so no single job's
		// context bounds it; the claim's lease does.
		bounded := func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), d.lease()/2)
		}
		d.digest = &digestGroups{
			claims: newGroup(digestGroupMax, digestGroupSlots, func(reqs []stores.DigestClaimRequest) ([]*stores.ClaimedDigest, error) {
				ctx, cancel := bounded()
				defer cancel()
				return stores.ClaimDigests(ctx, d.Pool, reqs)
			}),
			settles: newGroup(digestGroupMax, digestGroupSlots, func(ss []stores.DigestSettlement) ([]int64, error) {
				ctx, cancel := bounded()
				defer cancel()
				return stores.SettleDigests(ctx, d.Pool, ss, d.now())
			}),
		}
	})
	return d.digest
}

// outcome turns the send's result into the settlement of the claim and, for a
// retry, the wait before it. Temporary failures back off on the send schedule
// (Backoff) until retry.max_age past the digest's due instant; rate limiting
// waits without spending an attempt.
func (w *DigestWorker) outcome(claim *stores.ClaimedDigest, digestID string, sendErr error) (stores.DigestSettlement, time.Duration) {
	d := w.Deps
	s := stores.DigestSettlement{DigestID: digestID, ClaimedAt: claim.ClaimedAt}
	if sendErr == nil {
		s.Status = string(notifytype.StatusDigestSent)
		return s, 0
	}
	msg := sendErr.Error()
	now := d.now()
	kind, after := channels.Classify(sendErr)
	switch kind {
	case channels.KindPermanent, channels.KindGone:
		s.Status, s.Error = string(notifytype.StatusDigestFailed), msg
		return s, 0
	case channels.KindRateLimited:
		if after <= 0 {
			after = time.Second
		}
		next := now.Add(after)
		s.Status, s.NextAttemptAt, s.Refund = string(notifytype.StatusDigestPending), &next, true
		return s, after
	}
	wait := d.retryWait(claim.Attempts, after)
	maxAge := d.maxAge()
	next := now.Add(wait)
	if next.Sub(claim.DueAt) > maxAge {
		s.Status = string(notifytype.StatusDigestFailed)
		s.Error = fmt.Sprintf("expired after %d attempts over %s; last error: %s", claim.Attempts, maxAge, msg)
		return s, 0
	}
	s.Status, s.Error, s.NextAttemptAt = string(notifytype.StatusDigestPending), msg, &next
	return s, wait
}

// items turns the claimed rows into what the digest templates list. An item
// shows what the recipient's inbox showed for it; without an inbox item (in_app
// turned off) its texts are rendered from the notifier's in_app templates.
func (w *DigestWorker) items(ctx context.Context, rows []stores.DigestItem) []config.DigestItem {
	out := make([]config.DigestItem, len(rows))
	for i, r := range rows {
		params, err := decodeParams(r.Params)
		if err != nil {
			params = map[string]any{}
		}
		it := config.DigestItem{Notifier: r.Notifier, Key: r.Key, Category: r.Category, Reason: r.Reason,
			Title: r.Title, Body: r.Body, URL: r.URL, Params: params, CreatedAt: r.CreatedAt}
		if nf, ok := w.Deps.Config.Notifier(r.Notifier); ok && !r.HasInbox {
			it.Category = nf.Category
			if w.Deps.Inbox != nil && channels.Uses(nf, w.Deps.Registry.Inbox()) {
				item, err := w.Deps.Inbox.RenderInbox(nf.Name, params)
				if err != nil {
					w.Deps.logger().WarnContext(ctx, "digest item: inbox templates failed; listed by notifier name",
						"delivery_id", r.DeliveryID, "err", err)
				}
				it.Title, it.Body, it.URL = item.Title, item.Body, item.URL
			}
		}
		if it.Title == "" {
			it.Title = r.Notifier
		}
		out[i] = it
	}
	return out
}

func digestRecipient(id string, p *stores.RecipientProfile) channels.Recipient {
	r := channels.Recipient{ID: id}
	if p == nil {
		return r
	}
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	r.Email, r.Name, r.Locale, r.Timezone = str(p.Email), str(p.Name), str(p.Locale), str(p.Timezone)
	_ = json.Unmarshal(p.Data, &r.Data) // a JSON object by construction; a bad one renders as empty
	return r
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// insertDigestJobs enqueues digest jobs in tx through the River client of ctx
// (the worker's), with River's fast multi-row insert: these are never unique.
func insertDigestJobs(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) error {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("enqueue digest jobs: %w", err)
	}
	if _, err := client.InsertManyFastTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue %d digest jobs: %w", len(params), err)
	}
	return nil
}

// Schedule is a parsed cron schedule, as config holds digest.schedule
// (config.Digest.ScheduleCron): Next works in the zone of the time it is given.
type Schedule interface {
	Next(time.Time) time.Time
}

// DigestLocation is the zone a recipient's digest schedule is read in: their
// profile timezone (an IANA name), or fallback (digest.timezone) when it is
// empty, unknown, or "Local" (the daemon's own zone is nobody's). A nil
// fallback is UTC.
func DigestLocation(timezone string, fallback *time.Location) *time.Location {
	if fallback == nil {
		fallback = time.UTC
	}
	if timezone == "" || timezone == "Local" {
		return fallback
	}
	loc, err := time.LoadLocation(timezone)
	if err != nil {
		return fallback
	}
	return loc
}

// DigestDue says whether a recipient's digest is due at now and for which
// schedule instant. Their digest first falls due at the first instant of
// schedule strictly after oldest, the creation time of their oldest pending
// row, with the schedule read in loc, the recipient's zone: "0 8 * * *" is
// 08:00 on their wall clock, so it moves in UTC across a daylight-saving
// change. When that instant has come (due), instant is the LAST instant at or
// before now: a sweep that missed several instants sends one digest covering
// everything created before it, not one per missed instant. When it has not
// come, instant is when it will. A wall-clock time that a spring-forward
// skips does not occur that day (robfig/cron): the digest waits for the next.
// Instants are returned in UTC.
func DigestDue(schedule Schedule, oldest time.Time, loc *time.Location, now time.Time) (instant time.Time, due bool) {
	next := func(t time.Time) time.Time { return schedule.Next(t.In(loc)) }
	first := next(oldest)
	if first.IsZero() || first.After(now) {
		return first.UTC(), false
	}
	// Step to the last instant <= now from a point shortly before now, so a
	// frequent schedule after a long outage costs a few steps, not thousands.
	from := first
	for _, back := range []time.Duration{time.Hour, 25 * time.Hour, 8 * 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour} {
		p := now.Add(-back)
		if !p.After(first) {
			break
		}
		if n := next(p); !n.IsZero() && !n.After(now) {
			from = n
			break
		}
	}
	for {
		n := next(from)
		if n.IsZero() || n.After(now) {
			return from.UTC(), true
		}
		from = n
	}
}

// DigestSweepArgs is the notify.digest_sweep periodic job.
type DigestSweepArgs struct{}

// Kind is the River job kind.
func (DigestSweepArgs) Kind() string { return "notify.digest_sweep" }

// InsertOpts runs the sweep on the maintenance queue, once per minute at most.
func (DigestSweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance}
}

// DigestSweepBatch is how many recipients one candidate page (and one
// enqueueing transaction) holds, and how many digests one run re-drives.
const DigestSweepBatch = 1000

// DigestSweepWorker works notify.digest_sweep (see Deps.DigestSweep).
type DigestSweepWorker struct {
	river.WorkerDefaults[DigestSweepArgs]
	Deps *Deps
}

// Work runs one sweep with the worker's River client.
func (w *DigestSweepWorker) Work(ctx context.Context, job *river.Job[DigestSweepArgs]) error {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	_, err = w.Deps.DigestSweep(ctx, client)
	return err
}

// DigestSweep runs one digest sweep now (Deps.Clock) and returns how many
// notify.digest jobs it enqueued, through client. First it re-drives digests
// whose claim outlived retry.lease (a killed worker) or whose retry is overdue
// (a lost job): their rows go back to digest_pending under the same digest id,
// with a job to resend them. Then it reads every recipient with fresh digest
// rows, a page at a time in recipient order, works out in Go whether their
// digest is due (DigestDue: cron runs Go-side, in their zone) and enqueues one
// unique job per due recipient, each page in one transaction.
//
// It is data-driven: a missed run is caught up by the next, and a doubled or
// concurrent run enqueues nothing twice (see DigestArgs.OldestID).
func (d *Deps) DigestSweep(ctx context.Context, client *river.Client[pgx.Tx]) (int, error) {
	now := d.now()
	n, err := d.redriveDigests(ctx, client, now)
	if err != nil {
		return n, err
	}
	dg := &d.Config.Digest
	if dg.ScheduleCron == nil {
		return n, errors.New("digest sweep: digest.schedule is not parsed (config not loaded through config.Load)")
	}
	zones := map[string]*time.Location{}
	after := ""
	for {
		var page []stores.DigestCandidate
		var enqueued int
		err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
			var err error
			if page, err = stores.DigestCandidates(ctx, tx, after, DigestSweepBatch); err != nil {
				return err
			}
			var params []river.InsertManyParams
			for _, c := range page {
				loc, ok := zones[c.Timezone]
				if !ok {
					loc = DigestLocation(c.Timezone, dg.Location)
					zones[c.Timezone] = loc
				}
				instant, due := DigestDue(dg.ScheduleCron, c.Oldest, loc, now)
				if !due {
					continue
				}
				params = append(params, river.InsertManyParams{
					Args:       DigestArgs{Recipient: c.Recipient, DueAt: instant, OldestID: c.OldestID},
					InsertOpts: &river.InsertOpts{UniqueOpts: digestUnique},
				})
			}
			if len(params) == 0 {
				return nil
			}
			// InsertManyTx, not the fast path: only it honours unique keys.
			// A concurrent sweep inserting the same key waits on the unique
			// index until this commits, then skips it.
			res, err := client.InsertManyTx(ctx, tx, params)
			if err != nil {
				return fmt.Errorf("enqueue %d digests: %w", len(params), err)
			}
			for _, r := range res {
				if !r.UniqueSkippedAsDuplicate {
					enqueued++
				}
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("digest sweep: %w", err)
		}
		n += enqueued
		if len(page) < DigestSweepBatch {
			break
		}
		after = page[len(page)-1].Recipient
	}
	if n > 0 {
		d.logger().InfoContext(ctx, "digest sweep enqueued digests", "count", n)
	}
	return n, nil
}

// redriveDigests takes back stuck and orphaned digests (one bounded batch; the
// next run takes the rest) and enqueues a job for each in the same
// transaction. The row transition is the mutual exclusion: of two concurrent
// sweeps only one re-drives a digest, so the jobs need no unique key.
func (d *Deps) redriveDigests(ctx context.Context, client *river.Client[pgx.Tx], now time.Time) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		re, err := stores.RedriveDigests(ctx, tx, now, d.lease(), d.lease(), DigestSweepBatch)
		if err != nil || len(re) == 0 {
			return err
		}
		params := make([]river.InsertManyParams, len(re))
		for i, r := range re {
			params[i] = river.InsertManyParams{Args: DigestArgs{Recipient: r.Recipient, DueAt: r.DueAt.UTC(), DigestID: r.DigestID}}
		}
		if _, err := client.InsertManyFastTx(ctx, tx, params); err != nil {
			return fmt.Errorf("enqueue %d re-driven digests: %w", len(params), err)
		}
		n = len(re)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("digest sweep: %w", err)
	}
	if n > 0 {
		d.logger().InfoContext(ctx, "digest sweep re-drove digests", "count", n)
	}
	return n, nil
}
