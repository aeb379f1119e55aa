package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
	"github.com/notifyd/notifyd/templates"
)

// Digests are race-free by construction, not by timing:
//
//   - The sweep enqueues each (recipient, oldest pending row) at most once:
//     sweeps take turns under an advisory lock and skip what an unfinished
//     notify.digest job carries already, so two sweeps at the same moment, a
//     doubled run after a leader change, or a run while the last one's jobs
//     still wait in the queue enqueue a recipient's digest once between them.
//   - Whatever the number of jobs, rows are taken by a claim: one UPDATE moves
//     them from digest_pending to digest_sending under a new digest id. A
//     second job, replica or sweep for the same recipient finds them gone, so
//     no row is ever in two digests. The claim is the guard, not the job: a
//     job carries a batch of recipients, and a recipient in two jobs gets one
//     digest.
//   - The digest id is stored on the rows. It is the email's Message-ID, and a
//     retry or a re-driven claim resends the same rows under the same id.

// DigestBatch is the most digests (recipients) one notify.digest job
// carries. A batch is claimed in one statement and its retries settled in
// one; each digest is still its own email, settled as soon as it is sent.
const DigestBatch = 50

// DigestArgs is the notify.digest job: send the digests in Digests, each
// recipient's as its own message.
//
// Recipient, DueAt, OldestID and DigestID are the single-digest form of the
// job (before jobs carried batches): a job with Recipient set also sends that
// digest, as if it were the first entry of Digests.
type DigestArgs struct {
	Digests []DigestRef `json:"digests,omitempty"`

	Recipient string    `json:"recipient,omitempty"`
	DueAt     time.Time `json:"due_at,omitzero"`
	OldestID  string    `json:"oldest_id,omitempty"`
	DigestID  string    `json:"digest_id,omitempty"`
}

// DigestRef is one digest a notify.digest job sends.
//
// A digest from the sweep has no DigestID: it claims the recipient's fresh
// rows created before DueAt under a new digest id. One with DigestID resends
// that digest (a retry after a temporary failure, or a claim the sweep
// re-drove): it claims exactly that digest's rows again.
type DigestRef struct {
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

// InsertOpts puts digests on their own queue. The jobs are not unique: the
// sweep skips digests a job carries already (stores.EnqueuedDigests), and the
// claim keeps a recipient in two jobs to one digest.
func (DigestArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueDigest, MaxAttempts: 25}
}

// refs is every digest the job carries, the single-digest form first.
func (a DigestArgs) refs() []DigestRef {
	if a.Recipient == "" {
		return a.Digests
	}
	one := DigestRef{Recipient: a.Recipient, DueAt: a.DueAt, OldestID: a.OldestID, DigestID: a.DigestID}
	return append([]DigestRef{one}, a.Digests...)
}

// DigestWorker works notify.digest: claim the batch, send each digest outside
// any transaction, settle.
type DigestWorker struct {
	river.WorkerDefaults[DigestArgs]
	Deps *Deps
}

// Timeout stops a digest batch well inside the claim's lease, so the sweep
// never takes back the claim of a worker that is still alive.
func (w *DigestWorker) Timeout(*river.Job[DigestArgs]) time.Duration {
	return w.Deps.lease() / 2
}

// Work sends a batch of digests in three steps:
//
//  1. claim: one round trip (one implicit transaction, shared with the jobs
//     claiming at the same time) claims every digest's rows (rows of
//     cancelled notifications become digest_dropped) and reads the first
//     digest.max_items of each with their inbox texts, and the profiles;
//  2. send each digest, one after the other, with no transaction open, and
//     settle it as soon as its channel answered: digest_sent or digest_failed
//     (permanent failure, or temporary past retry.max_age), in a statement
//     shared with the digest jobs running at the same time. A crash therefore
//     leaves at most one sent but unsettled digest per job behind, as with a
//     job per digest;
//  3. settle the retries (temporary failure, rate limit, or not attempted
//     because the batch ran out of time or the daemon is stopping) in one
//     statement: back to digest_pending under the same id, with the jobs that
//     will resend them inserted in the same transaction.
//
// Without rows there is no email.
func (w *DigestWorker) Work(ctx context.Context, job *river.Job[DigestArgs]) error {
	d := w.Deps
	if d.Digests == nil {
		return errors.New("notify.digest: email is not configured (channels.email is absent), so the digest cannot be sent; its rows stay digest_pending")
	}
	// A quarter of the lease after the claim, stop attempting: the last send
	// then has until the job's Timeout (half the lease) to finish and the
	// batch is settled long before the sweep would take its claims back. The
	// rest is given back untried.
	budget := time.Now().Add(d.lease() / 4)
	if d.live.isLost() {
		// As a send job's claim: nothing is claimed while this process's
		// liveness lock may be taken for a dead process's.
		return river.JobSnooze(livenessCheck)
	}
	reqs, claims, err := w.claim(ctx, job.Args.refs())
	if err != nil || len(reqs) == 0 {
		return err
	}
	var retries []digestRetry
	var limited time.Duration // once the channel rate-limits, the rest wait too
	params := paramsCache{}   // the batch's digests list the same notifications
	for i, claim := range claims {
		req := reqs[i]
		if claim.Count == 0 {
			d.metrics().DigestRun("empty")
			continue // nothing pending (taken by another job, or dropped): no email
		}
		if limited > 0 || ctx.Err() != nil || time.Now().After(budget) {
			retries = append(retries, w.giveBack(req, claim, limited))
			continue
		}
		var sendErr error
		var s stores.DigestSettlement
		var wait time.Duration
		if claim.Suppressed != "" {
			// The address is on the suppression list: no email, the rows
			// settle `suppressed` with the list's reason.
			s = stores.DigestSettlement{DigestID: req.DigestID, ClaimedAt: claim.ClaimedAt,
				Status: string(notifytype.StatusSuppressed), Error: claim.Suppressed}
		} else {
			rctx, report := channels.WithReport(ctx)
			sendErr = w.send(rctx, req, claim, params)
			s, wait = w.outcome(claim, req.DigestID, sendErr)
			// Who answered goes on the rows, and a send that failed (not a rate
			// limit, which spends no attempt) is kept as a failed attempt of each.
			s.Provider, s.Failed = report.Provider, sendErr != nil && !s.Refund
		}
		if s.Status == string(notifytype.StatusDigestPending) {
			if s.Refund { // rate limited
				limited = wait
			}
			retries = append(retries, digestRetry{req: req, claim: claim, settlement: s, wait: wait, err: sendErr})
			continue
		}
		held, err := w.settle(ctx, s)
		if err != nil {
			// The rest of the batch stays claimed: the sweep takes it back
			// after the lease.
			return fmt.Errorf("settle digest %s of %s: %w", req.DigestID, req.Recipient, err)
		}
		log := d.logger().With("recipient", req.Recipient, "digest_id", req.DigestID, "job_id", job.ID)
		if sup := suppression(d.Registry.Digest(), sendErr); sup != nil && held > 0 {
			// Right after the settle: the digest is refused either way.
			if err := d.putSuppressions(ctx, []stores.Suppression{*sup}); err != nil {
				log.WarnContext(ctx, "could not suppress the address the digest was refused for", "err", err)
			}
		}
		w.record(ctx, log, claim, s, held, sendErr)
	}
	return w.settleRetries(ctx, job, retries)
}

// claim claims the digests of refs in one round trip and returns the claim
// requests (with the new digests' ids) and their claims, in the same order.
func (w *DigestWorker) claim(ctx context.Context, refs []DigestRef) ([]stores.DigestClaimRequest, []*stores.ClaimedDigest, error) {
	if len(refs) == 0 {
		return nil, nil, nil
	}
	d := w.Deps
	// The claim time is the claim token: truncated to what timestamptz
	// stores, so it compares equal to itself.
	now := d.now().Truncate(time.Microsecond)
	ids := uuidv7.Strings(len(refs))
	// The claim names this process's River client: once the process is
	// gone, any replica takes the claim back at once (RunLiveness).
	var by string
	if client, err := river.ClientFromContextSafely[pgx.Tx](ctx); err == nil {
		by = client.ID()
	}
	reqs := make([]stores.DigestClaimRequest, len(refs))
	for i, r := range refs {
		reqs[i] = stores.DigestClaimRequest{Recipient: r.Recipient, DigestID: r.DigestID, Resend: r.DigestID != "",
			DueAt: r.DueAt, Now: now, MaxItems: d.Config.Digest.MaxItems, Suppress: d.digestSuppressFields(), By: by}
		if !reqs[i].Resend {
			reqs[i].DigestID = ids[i]
		}
	}
	claims, err := d.digestGroups().claims.do(reqs)
	if err != nil {
		return nil, nil, err
	}
	return reqs, claims, nil
}

// send hands one claimed digest to the digest channel. A panicking channel
// is a bug, but it must not leave the rest of the batch claimed (the sweep
// would re-drive them): the panic becomes a temporary error of this digest.
func (w *DigestWorker) send(ctx context.Context, req stores.DigestClaimRequest, claim *stores.ClaimedDigest, params paramsCache) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = channels.Temporary(fmt.Errorf("digest channel panicked: %v", p), 0)
		}
	}()
	r := digestRecipient(req.Recipient, claim.Profile)
	loc := w.Deps.locale(r.Locale, r.Timezone, nil)
	return w.Deps.Digests.SendDigest(ctx, channels.Digest{ID: req.DigestID, Recipient: r,
		Items: w.items(ctx, claim.Items, params, loc), Count: claim.Count, Attempt: claim.Attempts, Locale: loc})
}

// settle records a terminal outcome in the statement shared with the digest
// jobs running at the same time (digestGroups), and reports how many rows the
// claim still held. It runs in a fresh context: the send happened, the ledger
// must say so even while the daemon is shutting down; like a send batch's
// settle it is retried, or waits for a row lock, for settleBudget (a lost
// settle means a resend).
func (w *DigestWorker) settle(ctx context.Context, s stores.DigestSettlement) (int64, error) {
	d := w.Deps
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.settleBudget())
	defer cancel()
	var held int64
	err := retrySettle(sctx, func() error {
		var err error
		held, err = d.digestGroups().settles.do(s)
		return err
	})
	return held, err
}

// digestRetry is a claimed digest going back to digest_pending: its
// settlement, the wait before the job that resends it, and the send's error
// (nil when it was not attempted).
type digestRetry struct {
	req        stores.DigestClaimRequest
	claim      *stores.ClaimedDigest
	settlement stores.DigestSettlement
	wait       time.Duration
	err        error
}

// giveBack is the retry of a digest that was not attempted: due again after
// wait (zero: at once), with the attempt its claim counted given back.
func (w *DigestWorker) giveBack(req stores.DigestClaimRequest, claim *stores.ClaimedDigest, wait time.Duration) digestRetry {
	next := w.Deps.now().Add(wait)
	return digestRetry{req: req, claim: claim, wait: wait, settlement: stores.DigestSettlement{DigestID: req.DigestID,
		ClaimedAt: claim.ClaimedAt, Status: string(notifytype.StatusDigestPending), NextAttemptAt: &next, Refund: true}}
}

// settleRetries puts the batch's retries back to digest_pending in one
// statement and, in the same transaction, enqueues the jobs that resend them:
// one for those due at once (given back untried) and one for the rest, at the
// longest of their waits (each row's next attempt is moved to it, so the
// ledger says when the job will run).
func (w *DigestWorker) settleRetries(ctx context.Context, job *river.Job[DigestArgs], retries []digestRetry) error {
	if len(retries) == 0 {
		return nil
	}
	d := w.Deps
	var later time.Duration
	for _, r := range retries {
		later = max(later, r.wait)
	}
	now := d.now()
	ss := make([]stores.DigestSettlement, len(retries))
	for i := range retries {
		r := &retries[i]
		if r.wait > 0 {
			r.wait = later
			next := now.Add(later)
			r.settlement.NextAttemptAt = &next
		}
		ss[i] = r.settlement
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.settleBudget())
	defer cancel()
	var held []int64
	err := retrySettle(sctx, func() error {
		return pgx.BeginFunc(sctx, d.Pool, func(tx pgx.Tx) error {
			var err error
			if held, err = stores.SettleDigestRetries(sctx, tx, ss, d.now()); err != nil {
				return err
			}
			var soon, wait []DigestRef
			for i, r := range retries {
				if held[i] == 0 {
					continue
				}
				ref := DigestRef{Recipient: r.req.Recipient, DueAt: r.claim.DueAt.UTC(), DigestID: r.req.DigestID}
				if r.wait > 0 {
					wait = append(wait, ref)
				} else {
					soon = append(soon, ref)
				}
			}
			// River schedules on the database's clock, the ledger on d.now(),
			// which tests move: the job waits the retry's wait of real time.
			params := digestJobs(soon, nil)
			params = append(params, digestJobs(wait, &river.InsertOpts{ScheduledAt: time.Now().Add(later)})...)
			if len(params) == 0 {
				return nil
			}
			return insertDigestJobs(sctx, tx, params)
		})
	})
	if err != nil {
		return fmt.Errorf("settle %d digest retries: %w", len(retries), err)
	}
	for i, r := range retries {
		log := d.logger().With("recipient", r.req.Recipient, "digest_id", r.req.DigestID, "job_id", job.ID)
		w.record(ctx, log, r.claim, r.settlement, held[i], r.err)
	}
	return nil
}

// record counts and logs the settled outcome of one digest.
func (w *DigestWorker) record(ctx context.Context, log *slog.Logger, claim *stores.ClaimedDigest, s stores.DigestSettlement, held int64, sendErr error) {
	d := w.Deps
	log = log.With("count", claim.Count, "attempts", claim.Attempts)
	switch {
	case held == 0:
		d.metrics().DigestRun("lost_claim")
		log.WarnContext(ctx, "digest claim was taken back before the settle (lease expired); the re-drive owns it",
			"err", errString(sendErr))
	case s.Status == string(notifytype.StatusDigestSent):
		d.metrics().DigestRun("sent")
		d.metrics().Delivery(d.Registry.Digest(), s.Status, int(held))
		log.DebugContext(ctx, "digest sent")
	case s.Status == string(notifytype.StatusSuppressed):
		d.metrics().DigestRun("suppressed")
		d.metrics().Delivery(d.Registry.Digest(), s.Status, int(held))
		log.InfoContext(ctx, "digest not sent: the address is suppressed", "reason", s.Error)
	case s.Status == string(notifytype.StatusDigestPending) && sendErr == nil:
		d.metrics().DigestRun("retried")
		log.DebugContext(ctx, "digest not attempted (batch out of time, stopping, or rate limited); resend scheduled",
			"next_attempt_at", s.NextAttemptAt)
	case s.Status == string(notifytype.StatusDigestPending):
		d.metrics().DigestRun("retried")
		log.InfoContext(ctx, "digest failed, retry scheduled", "err", sendErr, "next_attempt_at", s.NextAttemptAt)
	default:
		d.metrics().DigestRun("failed")
		d.metrics().Delivery(d.Registry.Digest(), s.Status, int(held))
		log.WarnContext(ctx, "digest failed", "err", sendErr)
	}
}

// digestJobs splits refs into notify.digest jobs of at most DigestBatch
// digests each, inserted with opts (nil: the kind's own).
func digestJobs(refs []DigestRef, opts *river.InsertOpts) []river.InsertManyParams {
	var params []river.InsertManyParams
	for len(refs) > 0 {
		n := min(len(refs), DigestBatch)
		params = append(params, river.InsertManyParams{Args: DigestArgs{Digests: refs[:n:n]}, InsertOpts: opts})
		refs = refs[n:]
	}
	return params
}

// digestGroupMax is the most digests one grouped settle statement carries.
const digestGroupMax = 128

// digestClaimGroupMax is the most jobs whose claims one grouped claim
// statement carries: up to 4 × DigestBatch digests.
const digestClaimGroupMax = 4

// digestGroupSlots is how many grouped claims, and how many grouped settles,
// may run at once. One of each: with many workers the batches grow instead
// (measured: a second settle slot halves the batch size and costs more
// database time per digest than it saves in waiting). Claims of batches
// running side by side were worse still: each moves every row it claims to
// a new tuple version, and concurrent claims of a freshly written table all
// extend it at once, queueing on the relation's extension lock and its last
// page.
const digestGroupSlots = 1

// digestGroups coalesce the claims of digest jobs starting at the same time
// into one statement, and the terminal settles of digests sent at the same
// time by different jobs into another (see group). Each job settles a digest
// as soon as it is sent, so that a crash leaves at most one sent digest
// unsettled, and alone that would be a round trip and a transaction per
// digest.
type digestGroups struct {
	claims  *group[[]stores.DigestClaimRequest, []*stores.ClaimedDigest]
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
			claims: newGroup(digestClaimGroupMax, digestGroupSlots, func(batches [][]stores.DigestClaimRequest) ([][]*stores.ClaimedDigest, error) {
				ctx, cancel := bounded()
				defer cancel()
				var all []stores.DigestClaimRequest
				for _, b := range batches {
					all = append(all, b...)
				}
				claimed, err := stores.ClaimDigests(ctx, d.Pool, all)
				if err != nil {
					return nil, err
				}
				out := make([][]*stores.ClaimedDigest, len(batches))
				for i, b := range batches {
					out[i], claimed = claimed[:len(b):len(b)], claimed[len(b):]
				}
				return out, nil
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
func (w *DigestWorker) items(ctx context.Context, rows []stores.DigestItem, cache paramsCache, loc *templates.Locale) []channels.DigestItem {
	out := make([]channels.DigestItem, len(rows))
	for i, r := range rows {
		params := cache.params(r.Params)
		it := channels.DigestItem{Notifier: r.Notifier, Key: r.Key, Category: r.Category, Reason: r.Reason,
			Title: r.Title, Body: r.Body, URL: r.URL, Params: params, CreatedAt: r.CreatedAt}
		if nf, ok := w.Deps.Config.Notifier(r.Notifier); ok && !r.HasInbox {
			it.Category = nf.Category
			if w.Deps.Inbox != nil && channels.Uses(nf, w.Deps.Registry.Inbox()) {
				item, err := w.Deps.Inbox.RenderInbox(nf.Name, templates.WithLocale(params, loc))
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

// paramsCache decodes each notification's params once for a batch of
// digests, which list the same notifications over and over (a like of a post
// goes into every follower's digest): decoding the JSON was an eighth of a
// digest job's CPU. Each digest gets a copy of its own, so a channel that
// changes an item's Params changes nothing of another digest.
type paramsCache map[string]map[string]any

// params returns a copy of raw decoded; a malformed raw is empty params.
func (c paramsCache) params(raw json.RawMessage) map[string]any {
	decoded, ok := c[string(raw)]
	if !ok {
		var err error
		if decoded, err = decodeParams(raw); err != nil {
			decoded = map[string]any{}
		}
		c[string(raw)] = decoded
	}
	return cloneJSON(decoded).(map[string]any)
}

// cloneJSON copies a decoded JSON value: its objects and arrays anew, its
// strings, numbers, booleans and nulls as they are (immutable).
func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = cloneJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneJSON(e)
		}
		return out
	}
	return v
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
	if err := insertJobs(ctx, tx, client, params); err != nil {
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
// digests it enqueued, through client. First it re-drives digests whose claim
// outlived retry.lease (a killed worker) or whose retry is overdue (a lost
// job): their rows go back to digest_pending under the same digest id, with
// jobs to resend them. Then it reads every recipient with fresh digest rows,
// a page at a time in recipient order, works out in Go whether their digest
// is due (DigestDue: cron runs Go-side, in their zone) and enqueues the due
// ones that no unfinished job carries yet, in notify.digest jobs of up to
// DigestBatch recipients, each page in one transaction. The whole run holds
// the sweep lock (stores.LockDigestSweep), on one connection.
//
// It is data-driven: a missed run is caught up by the next, and a doubled or
// concurrent run enqueues nothing twice (see DigestRef.OldestID).
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
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		return n, fmt.Errorf("digest sweep: %w", err)
	}
	defer conn.Release()
	unlock, err := stores.LockDigestSweep(ctx, conn.Conn())
	if err != nil {
		return n, fmt.Errorf("digest sweep: %w", err)
	}
	defer unlock()
	// What the queue holds already: normally nothing, as the queue drains
	// between sweeps; after a backlog, or a concurrent sweep that held the
	// lock before this one, the digests its jobs carry.
	enqueued := digestSet{}
	if err := stores.EnqueuedDigests(ctx, conn, QueueDigest, enqueued.add); err != nil {
		return n, fmt.Errorf("digest sweep: %w", err)
	}

	zones := map[string]*time.Location{}
	after := ""
	var jobs int
	for {
		var page []stores.DigestCandidate
		var due []DigestRef
		var params []river.InsertManyParams
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var err error
			if page, err = stores.DigestCandidates(ctx, tx, after, DigestSweepBatch); err != nil {
				return err
			}
			due = due[:0]
			for _, c := range page {
				if enqueued.has(c.Recipient, c.OldestID) {
					continue
				}
				loc, ok := zones[c.Timezone]
				if !ok {
					loc = DigestLocation(c.Timezone, dg.Location)
					zones[c.Timezone] = loc
				}
				if instant, ok := DigestDue(dg.ScheduleCron, c.Oldest, loc, now); ok {
					due = append(due, DigestRef{Recipient: c.Recipient, DueAt: instant, OldestID: c.OldestID})
				}
			}
			if params = digestJobs(due, nil); len(params) == 0 {
				return nil
			}
			if err := insertJobs(ctx, tx, client, params); err != nil {
				return fmt.Errorf("enqueue %d digests: %w", len(due), err)
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("digest sweep: %w", err)
		}
		n += len(due)
		jobs += len(params)
		if len(page) < DigestSweepBatch {
			break
		}
		after = page[len(page)-1].Recipient
	}
	if jobs > 0 {
		d.logger().InfoContext(ctx, "digest sweep enqueued digests", "count", n, "jobs", jobs)
	}
	return n, nil
}

// digestSet holds the new digests, by recipient and oldest fresh row, that
// the queue carries already. It keeps a 64-bit hash of each, so that a
// backlog of a million costs megabytes, not the ids; a collision (as likely
// as none at all) only leaves one recipient's digest to the next sweep.
type digestSet map[uint64]struct{}

func digestKey(recipient, oldestID string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(recipient))
	h.Write([]byte{0})
	h.Write([]byte(oldestID))
	return h.Sum64()
}

func (s digestSet) add(recipient, oldestID string) { s[digestKey(recipient, oldestID)] = struct{}{} }

func (s digestSet) has(recipient, oldestID string) bool {
	_, ok := s[digestKey(recipient, oldestID)]
	return ok
}

// redriveDigests takes back stuck and orphaned digests (one bounded batch; the
// next run takes the rest) and enqueues jobs to resend them, up to
// DigestBatch digests each, in the same transaction. The row transition is
// the mutual exclusion: of two concurrent sweeps only one re-drives a digest,
// so the jobs need no unique key.
func (d *Deps) redriveDigests(ctx context.Context, client *river.Client[pgx.Tx], now time.Time) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		re, err := stores.RedriveDigests(ctx, tx, now, d.lease(), d.lease(), DigestSweepBatch)
		if err != nil || len(re) == 0 {
			return err
		}
		refs := make([]DigestRef, len(re))
		for i, r := range re {
			refs[i] = DigestRef{Recipient: r.Recipient, DueAt: r.DueAt.UTC(), DigestID: r.DigestID}
		}
		if err := insertJobs(ctx, tx, client, digestJobs(refs, nil)); err != nil {
			return fmt.Errorf("enqueue %d re-driven digests: %w", len(refs), err)
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
