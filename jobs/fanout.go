package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/notifyd/notifyd/notifytype"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
	"github.com/notifyd/notifyd/templates"
)

// FanoutArgs is the notify.fanout job: resolve a notification's audience and
// write its inbox items, delivery rows and send jobs, chunk by chunk.
//
// SendTx inserts this job with a hand-written statement (stores.InsertNotification)
// so that enqueue is one round trip; keep its kind, queue and args shape in step.
type FanoutArgs struct {
	NotificationID string `json:"notification_id"`
	// Lane is the lane of the audience this job fans out. The job SendTx
	// inserts is lane 0: it normalises the audience, splits a large one into
	// lanes and inserts a job for each other lane (see FanoutWorker).
	Lane int `json:"lane,omitempty"`
}

// Kind is the River job kind.
func (FanoutArgs) Kind() string { return "notify.fanout" }

// InsertOpts puts fan-outs on their own queue.
func (FanoutArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueFanout, MaxAttempts: 25}
}

// FanoutWorker works notify.fanout.
//
// Lane 0's first transaction normalises the audience (sorted, deduplicated,
// counted against max_recipients) and splits it into lanes: ranges of
// recipient ids of about equal size, one per fan-out worker up to the number
// of CPUs, when the audience is larger than two chunks per lane (otherwise a
// single lane). It inserts a notify.fanout job for every other lane in the
// same transaction, so the lanes' chunks are written on several connections at
// once.
//
// Each chunk is ONE transaction that share-locks the notification row (a
// cancel waits for it), locks its lane, reads the lane's next window of the
// audience (inline recipients and topic subscribers, merged in recipient
// order), resolves every recipient's mode per channel, writes inbox items and
// delivery rows set-based, enqueues the chunk's send jobs and records the
// lane's cursor. The lane's last chunk marks it done and, when the other lanes
// are done too, marks the notification fanned_out — or, when it cannot tell,
// leaves that to a transaction after its commit (stores.FinishFanout). The
// River job is completed by River's batched completer once Work returns, not
// inside the chunk's transaction: JobCompleteTx was one more statement in
// every small fan-out's transaction (a tenth of PostgreSQL's time for
// one-recipient notifications), and a job that runs again after a crash
// between the commit and the completion finds the notification fanned_out,
// or its lane's cursor, and writes nothing. A crash at any point replays from
// the lane's last committed cursor; the unique keys make even a replay of a
// committed chunk write nothing twice.
type FanoutWorker struct {
	river.WorkerDefaults[FanoutArgs]
	Deps *Deps
}

// Timeout is River's rescue window: a run bounds itself well inside it (it
// snoozes after Deps.maxRun and resumes from its cursor), and it must be
// positive — River's rescuer never takes back a job without a timeout, so a
// fan-out on a SIGKILLed replica would wait forever.
func (w *FanoutWorker) Timeout(*river.Job[FanoutArgs]) time.Duration { return w.Deps.RescueAfter() }

// Work runs the fan-out to completion (or until ctx ends; the next attempt
// resumes from the cursor).
//
// A statement over one of PostgreSQL's program limits (SQLSTATE class 54:
// an index row too large for its btree, from a value rendered from params)
// fails the same way on every attempt: the notification is rejected at once
// with that reason instead of being retried MaxAttempts times while nobody
// gets anything.
func (w *FanoutWorker) Work(ctx context.Context, job *river.Job[FanoutArgs]) error {
	err := w.work(ctx, job)
	if err != nil && ctx.Err() == nil && programLimit(err) {
		w.giveUp(job, err)
		return nil
	}
	if err != nil && job.Attempt >= job.MaxAttempts && ctx.Err() == nil {
		w.giveUp(job, err)
	}
	return err
}

// programLimit reports whether err is PostgreSQL's "program limit exceeded"
// (SQLSTATE class 54), which no retry can get past.
func programLimit(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "54")
}

func (w *FanoutWorker) work(ctx context.Context, job *river.Job[FanoutArgs]) error {
	yieldAt := time.Now().Add(w.Deps.maxRun())
	// Chunks are written unguarded (see stores.WriteChunk) until one meets
	// rows that exist already.
	guarded := false
	// Lane 0's first transaction of its first attempt normalises the
	// audience: it locks the notification for update from the start.
	normalizing := job.Args.Lane == 0 && job.Attempt <= 1
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(yieldAt) {
			// Checkpointed: give the worker slot back and resume from the
			// cursor at once, so no run outlives River's rescue window.
			return river.JobSnooze(time.Millisecond)
		}
		done, err := w.step(ctx, job, guarded, normalizing)
		normalizing = false
		if errors.Is(err, stores.ErrChunkConflict) && !guarded {
			// Rows of this chunk exist already (a replayed fan-out): from
			// here on, write guarded, skipping what exists.
			w.Deps.logger().InfoContext(ctx, "fan-out chunk met rows written before; writing guarded",
				"notification_id", job.Args.NotificationID, "lane", job.Args.Lane, "err", err)
			guarded = true
			continue
		}
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if hook := w.Deps.AfterFanoutStep; hook != nil {
			if err := hook(job.Args.NotificationID); err != nil {
				return err
			}
		}
	}
}

// step runs one transaction: normalisation, or one chunk of the job's lane.
// It reports whether the job is finished (its work committed).
//
// With normalizing, the notification is locked for update at once (what a
// normalisation needs) rather than shared and then upgraded: one round trip
// fewer in the only transaction of a small notification.
func (w *FanoutWorker) step(ctx context.Context, job *river.Job[FanoutArgs], guarded, normalizing bool) (done bool, err error) {
	d := w.Deps
	id, lane := job.Args.NotificationID, job.Args.Lane
	log := d.logger().With("notification_id", id, "lane", lane, "job_id", job.ID)
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	st, err := stores.LockFanout(ctx, tx, id, lane, normalizing)
	if errors.Is(err, stores.ErrNotFound) {
		log.WarnContext(ctx, "fan-out of a notification that does not exist")
		return true, w.complete(ctx, tx)
	}
	if err != nil {
		return false, err
	}
	switch notifytype.NotificationStatus(st.Status) {
	case notifytype.NotificationCancelled:
		if nf, ok := d.Config.Notifier(st.Notifier); ok && nf.Audience != nil {
			if err := stores.DropAudience(ctx, tx, id); err != nil {
				return false, err
			}
		}
		return true, w.complete(ctx, tx)
	case notifytype.NotificationRejected, notifytype.NotificationFannedOut:
		return true, w.complete(ctx, tx)
	}

	nf, item, off, reason := w.resolve(st)
	if reason != "" {
		return true, w.reject(ctx, tx, job, st, reason)
	}
	if !st.Normalized {
		if lane != 0 {
			return false, fmt.Errorf("fan-out lane %d of %s before its normalisation", lane, id)
		}
		if nf.Audience != nil {
			if err := tx.Rollback(ctx); err != nil {
				return false, err
			}
			return w.normalizeWithAudience(ctx, job, st, nf, item, off, guarded, log)
		}
		return w.normalize(ctx, tx, job, st, nf, item, off, guarded, log)
	}
	if st.Lane == nil {
		// Lanes are created with the normalisation, for every lane a job
		// exists for; a re-normalisation replaced them with fewer.
		log.WarnContext(ctx, "fan-out lane does not exist (the audience was split again); nothing to do")
		return true, w.complete(ctx, tx)
	}
	if st.Lane.Done {
		// The lane's last chunk committed but not the finish (a crash, or a
		// lane that finished at the same time). The share lock goes first:
		// two lanes finishing at once would each hold one while waiting for
		// the other's to update the row, a deadlock PostgreSQL breaks only
		// after deadlock_timeout (a second).
		if err := tx.Rollback(ctx); err != nil {
			return false, err
		}
		return true, w.finishAlone(ctx, job)
	}
	return w.writeChunk(ctx, tx, job, st, nf, item, off, guarded, log)
}

// resolve finds the notification's notifier, checks its params against the
// notifier's schema, renders its inbox item and its channels' `if`
// conditions (off: the channels whose condition is not true). A non-empty
// reason rejects the notification: each is deterministic, so retrying cannot
// help. The conditions depend on the params only, so every chunk of a
// notification leaves out the same channels.
func (w *FanoutWorker) resolve(st *stores.FanoutState) (nf *config.Notifier, item channels.InboxItem, off conditions, reason string) {
	d := w.Deps
	nf, ok := d.Config.Notifier(st.Notifier)
	if !ok {
		return nil, item, nil, fmt.Sprintf("unknown notifier %q", st.Notifier)
	}
	params, err := decodeParams(st.Params)
	if err != nil {
		return nil, item, nil, "invalid params: " + err.Error()
	}
	if err := nf.ValidateParams(params); err != nil {
		return nil, item, nil, err.Error() // a *config.ParamsError: "invalid params: /x: …"
	}
	if nf.Batch != nil {
		// The first of a batch renders as a batch of one; see batch.go.
		if _, err := templates.RenderText(nf.Batch.KeyTmpl, params); err != nil {
			return nil, item, nil, "batch key does not render: " + err.Error()
		}
		params = templates.BatchParams(params, 1, nonEmpty(st.Actor), []any{params})
	}
	if off, err = conditionsOf(nf, params); err != nil {
		return nil, item, nil, err.Error()
	}
	if inbox := d.Registry.Inbox(); d.Inbox != nil && channels.Uses(nf, inbox) && !off[inbox] {
		tenant, err := decodeTenant(st.TenantRecord)
		if err != nil {
			return nil, item, nil, "tenant does not decode: " + err.Error()
		}
		// In the default locale: localizeChunk renders the others.
		if item, err = d.Inbox.RenderInbox(nf.Name, d.localized(notifytype.TemplateParams(params, tenant), nil, nil)); err != nil {
			return nil, item, nil, inbox + " templates do not render: " + err.Error()
		}
	}
	return nf, item, off, ""
}

// writeChunk is one chunk of the lane in tx: the next recipients (inline
// and topic subscribers, merged), each one's mode per channel, their inbox
// items, delivery rows and send jobs, and the lane's cursor, committed
// together. It reports whether the job is finished.
func (w *FanoutWorker) writeChunk(ctx context.Context, tx pgx.Tx, job *river.Job[FanoutArgs], st *stores.FanoutState,
	nf *config.Notifier, item channels.InboxItem, off conditions, guarded bool, log *slog.Logger,
) (done bool, err error) {
	d := w.Deps
	chunkSize := d.Config.Queues.FanoutChunk
	if chunkSize <= 0 {
		chunkSize = 1000
	}
	profiles := d.needsProfiles(nf)
	// Mutes are read at the fan-out's clock, as its delays and quiet hours are.
	// The audience query's members are one more source, after the topics.
	sources, audienceSource := len(st.Topics), 0
	if nf.Audience != nil {
		sources++
		audienceSource = sources
	}
	cands, err := stores.FanoutCandidates(ctx, tx, st.ID, job.Args.Lane, chunkSize, scopesOf(nf), profiles, d.now(),
		d.registrationsOf(nf), audienceSource)
	if err != nil {
		return false, err
	}
	m := mergeChunk(cands, chunkSize, sources, d.Config.ReasonRank)
	chunk, err := w.buildChunk(st, nf, m, off)
	if err != nil {
		return false, err
	}
	chunk.Title, chunk.Body, chunk.URL = item.Title, item.Body, item.URL
	if err := d.localizeChunk(chunk, st, nf, m); err != nil {
		return false, err
	}
	var batches *batchStep
	if nf.Batch != nil {
		if batches, err = d.joinBatches(ctx, tx, st, nf, chunk); err != nil {
			return false, err
		}
	}
	res, err := stores.WriteChunk(ctx, tx, chunk, guarded)
	if err != nil {
		return false, err
	}
	if audienceSource > 0 && res.Finished {
		// The notification is fanned out: its staged audience is spent.
		if err := stores.DropAudience(ctx, tx, st.ID); err != nil {
			return false, err
		}
	}
	if err := batches.finish(ctx, tx, d); err != nil {
		return false, err
	}
	// A chunk's sends go at bulk priority: see bulkSendPriority.
	if err := insertBulkSendJobs(ctx, tx, res.PendingIDs, d.Config.Queues.SendBatch); err != nil {
		return false, err
	}
	if err := insertScheduledSendJobs(ctx, tx, res.ScheduledIDs, res.ScheduledDue, d.Config.Queues.SendBatch); err != nil {
		return false, err
	}
	// The chunk's one change-log row, and the wake-up of the stream hubs that
	// its commit sends (the log's position comes from this transaction's id).
	if err := stores.LogInboxCreated(ctx, tx, res.InboxIDs, res.InboxRecipients); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	d.metrics().FanoutRows(len(res.InboxIDs), len(chunk.DeliveryIDs))
	countTerminal(d.metrics(), chunk)
	for _, ch := range res.ThrottledChannels {
		d.metrics().Delivery(ch, string(notifytype.StatusThrottled), 1)
	}
	log.DebugContext(ctx, "fan-out chunk written", "recipients", len(m.recipients), "inbox", len(res.InboxIDs),
		"deliveries", len(chunk.DeliveryIDs), "sends", len(res.PendingIDs), "done", m.done)
	// A done lane that did not finish the notification goes round once more:
	// the next step sees the lane done and runs the finish after this commit.
	return res.Finished, nil
}

// smallAudience is the largest audience whose normalisation and only chunk
// are one transaction: most notifications go to a handful of recipients, and
// for them the second transaction (its round trips, its locks taken again)
// was a third of the fan-out's statements. Larger audiences keep the
// normalisation on its own, so it stays short and a crash after it resumes
// from the lanes.
const smallAudience = 100

// normalize is lane 0's first transaction: the audience rewritten once
// (stores.NormalizeAudience) and checked against max_recipients, the bulk
// deliveries, the lanes and a job for each lane but 0. A small audience
// (smallAudience) is written in the same transaction (writeChunk). It reports
// whether the job is finished (the notification was rejected, or written).
func (w *FanoutWorker) normalize(ctx context.Context, tx pgx.Tx, job *river.Job[FanoutArgs], st *stores.FanoutState,
	nf *config.Notifier, item channels.InboxItem, off conditions, guarded bool, log *slog.Logger) (done bool, err error) {
	d := w.Deps
	// The share lock becomes an update lock: this transaction rewrites the row.
	if !st.ForUpdate {
		if err := stores.LockNotificationForUpdate(ctx, tx, st.ID); err != nil {
			return false, err
		}
	}
	if nf.Audience != nil {
		// Staged by normalizeWithAudience; a second run of the job staging
		// it again waits for this transaction, and then sees it normalised.
		if err := stores.LockAudienceStaging(ctx, tx, st.ID); err != nil {
			return false, err
		}
	}
	lanes := w.maxLanes()
	aud, err := stores.NormalizeAudience(ctx, tx, st.ID, d.Config.Reasons, nf.NotifyActor, lanes, nf.Audience != nil)
	if err != nil {
		return false, err
	}
	audience := aud.Size
	if audience > nf.MaxRecipients {
		return true, w.reject(ctx, tx, job, st, fmt.Sprintf(
			"audience of %d recipients exceeds max_recipients %d", audience, nf.MaxRecipients))
	}
	st.Topics = aud.Topics
	var bounds []string
	if audience >= 2*lanes*max(d.Config.Queues.FanoutChunk, 1) {
		bounds = aud.Bounds
	}
	if err := stores.CreateLanes(ctx, tx, st.ID, bounds); err != nil {
		return false, err
	}
	if len(bounds) > 0 {
		params := make([]river.InsertManyParams, len(bounds))
		for i := range bounds {
			params[i] = river.InsertManyParams{Args: FanoutArgs{NotificationID: st.ID, Lane: i + 1}}
		}
		client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
		if err != nil {
			return false, fmt.Errorf("enqueue fan-out lanes: %w", err)
		}
		if err := insertJobs(ctx, tx, client, params); err != nil {
			return false, fmt.Errorf("enqueue %d fan-out lanes: %w", len(params), err)
		}
	}
	if err := w.writeBulk(ctx, tx, st, nf, off); err != nil {
		return false, err
	}
	if len(bounds) == 0 && audience <= smallAudience {
		// The one lane was created above with its cursor at the start.
		st.Normalized, st.Lane = true, &stores.FanoutLane{}
		if done, err = w.writeChunk(ctx, tx, job, st, nf, item, off, guarded, log); err != nil {
			return false, err
		}
		d.metrics().Notification(st.Notifier, "accepted")
		return done, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	d.metrics().Notification(st.Notifier, "accepted")
	log.DebugContext(ctx, "fan-out started", "audience", audience, "lanes", len(bounds)+1)
	return false, nil
}

// maxLanes is how many lanes a large audience is split into: one per fan-out
// worker, up to the number of CPUs (the database's work per chunk is what
// runs in parallel). An audience smaller than two chunks per lane gets one.
func (w *FanoutWorker) maxLanes() int {
	return min(max(w.Deps.Config.Queues.Fanout, 1), max(runtime.NumCPU(), 2))
}

// finishAlone completes a lane whose chunks are all written, in a
// transaction of its own that takes no lock before its update: it marks the
// notification fanned_out if every lane is done (of lanes finishing together,
// the last to commit sees them all; a second finisher waits for the first's
// update and then finds the notification fanned_out) and commits; River
// then completes the job.
func (w *FanoutWorker) finishAlone(ctx context.Context, job *river.Job[FanoutArgs]) error {
	tx, err := w.Deps.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	finished, err := stores.FinishFanout(ctx, tx, job.Args.NotificationID)
	if err != nil {
		return err
	}
	if finished {
		// What is left of an audience staged for it (none without one).
		if err := stores.DropAudience(ctx, tx, job.Args.NotificationID); err != nil {
			return err
		}
	}
	return w.complete(ctx, tx)
}

// complete commits tx and reports the job done: River's completer marks it
// completed when Work returns (see FanoutWorker).
func (w *FanoutWorker) complete(ctx context.Context, tx pgx.Tx) error {
	return tx.Commit(ctx)
}

// giveUp marks the notification rejected after the job's last attempt failed,
// so it does not stay pending forever; what earlier chunks wrote stays (and is
// delivered), the error says where it stopped. Best effort: the job fails
// either way.
func (w *FanoutWorker) giveUp(job *river.Job[FanoutArgs], cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reason := fmt.Sprintf("fan-out gave up after %d attempts (recipients before the cursor were written): %v", job.Attempt, cause)
	if programLimit(cause) {
		reason = fmt.Sprintf("fan-out gave up: a value is over a database limit, which no retry can change (recipients before the cursor were written): %v", cause)
	}
	if err := stores.RejectNotification(ctx, w.Deps.Pool, job.Args.NotificationID, reason); err != nil {
		w.Deps.logger().ErrorContext(ctx, "could not mark a failed fan-out rejected", "notification_id",
			job.Args.NotificationID, "job_id", job.ID, "err", err)
	}
}

// reject marks the notification rejected and commits (the job is done).
func (w *FanoutWorker) reject(ctx context.Context, tx pgx.Tx, job *river.Job[FanoutArgs], st *stores.FanoutState, reason string) error {
	w.Deps.logger().WarnContext(ctx, "notification rejected", "notification_id", st.ID, "notifier", st.Notifier,
		"key", st.Key, "reason", reason)
	if err := stores.RejectNotification(ctx, tx, st.ID, reason); err != nil {
		return err
	}
	if err := w.complete(ctx, tx); err != nil {
		return err
	}
	w.Deps.metrics().Notification(w.Deps.notifierLabel(st.Notifier), "rejected")
	return nil
}

// UnknownNotifierLabel is the notifier label of the metrics of a
// notification whose notifier is not configured: label values come from the
// config, never from what a request named, so that a stream of made-up
// names cannot grow the series without bound. No notifier can be named so.
const UnknownNotifierLabel = "(unknown)"

// notifierLabel is name when it is a configured notifier, else
// UnknownNotifierLabel.
func (d *Deps) notifierLabel(name string) string {
	if _, ok := d.Config.Notifier(name); ok {
		return name
	}
	return UnknownNotifierLabel
}

// countTerminal counts the deliveries a chunk settled at fan-out time
// (unavailable, skipped).
func countTerminal(m Metrics, c *stores.Chunk) {
	if m == nil {
		return
	}
	for i, status := range c.DeliveryStatuses {
		if notifytype.DeliveryStatus(status).Terminal() {
			m.Delivery(c.DeliveryChannels[i], status, 1)
		}
	}
}

// writeBulk writes the notification's bulk deliveries (Slack, notifier-level
// webhook) and their send jobs in the normalisation transaction.
func (w *FanoutWorker) writeBulk(ctx context.Context, tx pgx.Tx, st *stores.FanoutState, nf *config.Notifier, off conditions) error {
	c := &stores.Chunk{NotificationID: st.ID, Notifier: st.Notifier, Key: st.Key, Category: nf.Category,
		Actor: st.Actor, Tenant: st.Tenant, Lane: -1}
	add := func(channel, status, why string) {
		c.DeliveryIDs = append(c.DeliveryIDs, uuidv7.String())
		c.DeliveryRecipients = append(c.DeliveryRecipients, "")
		c.DeliveryChannels = append(c.DeliveryChannels, channel)
		c.DeliveryReasons = append(c.DeliveryReasons, "")
		c.DeliveryModes = append(c.DeliveryModes, string(notifytype.ModeImmediate))
		c.DeliveryStatuses = append(c.DeliveryStatuses, status)
		c.DeliveryErrors = append(c.DeliveryErrors, why)
	}
	wf := w.Deps.newWorkflow()
	for _, p := range w.Deps.Registry.Plugins() {
		if !p.Bulk || !channels.Uses(nf, p.Name) {
			continue
		}
		b, ok := w.Deps.Bulk[p.Name]
		switch {
		case off[p.Name] && (ok && b.Configured(nf.Name) || !ok && !p.PerRecipient):
			add(p.Name, string(notifytype.StatusSkipped), config.ConditionFalse)
		case ok && b.Configured(nf.Name):
			add(p.Name, string(notifytype.StatusPending), "")
			wf.apply(c, nf, p, "", nil)
		case !ok && !p.PerRecipient:
			add(p.Name, string(notifytype.StatusUnavailable), p.Name+" channel is not configured")
		}
		// A channel that is per-recipient too and has no bulk destination
		// for this notifier sends only per-recipient messages.
	}
	if len(c.DeliveryIDs) == 0 {
		return nil
	}
	res, err := stores.WriteChunk(ctx, tx, c, true)
	if err != nil {
		return err
	}
	if err := insertScheduledSendJobs(ctx, tx, res.ScheduledIDs, res.ScheduledDue, w.Deps.Config.Queues.SendBatch); err != nil {
		return err
	}
	return insertSendJobs(ctx, tx, res.PendingIDs, w.Deps.Config.Queues.SendBatch)
}

// buildChunk resolves every merged recipient's mode per channel and lays out
// the rows to write.
func (w *FanoutWorker) buildChunk(st *stores.FanoutState, nf *config.Notifier, m merged, off conditions) (*stores.Chunk, error) {
	c := &stores.Chunk{NotificationID: st.ID, Notifier: st.Notifier, Key: st.Key, Category: nf.Category,
		Actor: st.Actor, Params: st.Params, Tenant: st.Tenant, Lane: st.Lane.Lane, Cursor: m.cursor,
		InlinePos: st.Lane.InlinePos + m.inlineTaken, Done: m.done}
	if m.cursor == nil {
		c.Cursor = st.Lane.Cursor
	}
	n := len(m.recipients)
	ids := uuidv7.Batch{Size: n + 16}
	c.InboxIDs, c.InboxRecipients, c.InboxReasons = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	addRow := func(r *mergedRecipient, channel string, mode notifytype.Mode, status notifytype.DeliveryStatus, why string) {
		c.DeliveryIDs = append(c.DeliveryIDs, ids.Next())
		c.DeliveryRecipients = append(c.DeliveryRecipients, r.ID)
		c.DeliveryChannels = append(c.DeliveryChannels, channel)
		c.DeliveryReasons = append(c.DeliveryReasons, r.Reason)
		c.DeliveryModes = append(c.DeliveryModes, string(mode))
		c.DeliveryStatuses = append(c.DeliveryStatuses, string(status))
		c.DeliveryErrors = append(c.DeliveryErrors, why)
	}
	reg := w.Deps.Registry
	wf := w.Deps.newWorkflow()
	defaults, err := tenantDefaults(st.TenantRecord)
	if err != nil {
		return nil, fmt.Errorf("default preferences of tenant %s: %w", st.Tenant, err)
	}
	var perRecipient []channels.Plugin
	for _, p := range reg.Plugins() {
		if p.PerRecipient {
			perRecipient = append(perRecipient, p)
		}
	}
	for i := range m.recipients {
		r := &m.recipients[i]
		if r.ID == st.Actor && !nf.NotifyActor {
			continue // reached through a topic; the inline list is already actor-free
		}
		rules, err := decodeRules(r.Rules)
		if err != nil {
			return nil, fmt.Errorf("preferences of %s: %w", r.ID, err)
		}
		muted := isMuted(nf.Name, st.Topics, r)
		for _, p := range perRecipient {
			ch := p.Name
			res := reg.ResolveTenant(nf, ch, rules, defaults, muted)
			if res.Mode == notifytype.ModeOff {
				if res.Why != "default" {
					addRow(r, ch, notifytype.ModeOff, notifytype.StatusSkipped, offReason(res.Why))
				}
				continue
			}
			if off[ch] {
				// The channel's `if` is not true for this notification.
				addRow(r, ch, res.Mode, notifytype.StatusSkipped, config.ConditionFalse)
				continue
			}
			if p.Inbox {
				c.InboxIDs = append(c.InboxIDs, ids.Next())
				c.InboxRecipients = append(c.InboxRecipients, r.ID)
				c.InboxReasons = append(c.InboxReasons, r.Reason)
				continue
			}
			sender, ok := w.Deps.Channels[ch]
			if !ok {
				addRow(r, ch, res.Mode, notifytype.StatusUnavailable, ch+" channel is not configured")
				continue
			}
			profile := r.profile()
			if p.Address != "" && profile.Address(p.Address) == "" {
				addRow(r, ch, res.Mode, notifytype.StatusUnavailable, channels.MissingAddress(p.Address))
				continue
			}
			if err := sender.Addressable(nf.Name, profile); err != nil {
				addRow(r, ch, res.Mode, notifytype.StatusUnavailable, err.Error())
				continue
			}
			if res.Mode == notifytype.ModeDigest {
				addRow(r, ch, res.Mode, notifytype.StatusDigestPending, "")
			} else {
				addRow(r, ch, res.Mode, notifytype.StatusPending, "")
			}
			wf.apply(c, nf, p, r.ID, quietOf(r))
		}
	}
	return c, nil
}

// needsProfiles reports whether the fan-out of nf reads recipients'
// profiles: only a channel that sends (not the inbox) uses them.
func (d *Deps) needsProfiles(nf *config.Notifier) bool {
	if d.Config.Catalog != nil && d.Inbox != nil && channels.Uses(nf, d.Registry.Inbox()) {
		return true // the inbox item is rendered in each recipient's locale
	}
	for _, p := range d.Registry.Plugins() {
		if p.PerRecipient && !p.Inbox && channels.Uses(nf, p.Name) {
			return true
		}
	}
	return false
}

// registrationsOf lists the registrations (browser push subscriptions,
// devices of a platform) that the configured channels nf uses need: the
// fan-out asks which of them each recipient has, so that one without is
// `unavailable` rather than refused at send time.
func (d *Deps) registrationsOf(nf *config.Notifier) []string {
	var out []string
	for _, p := range d.Registry.Plugins() {
		if !p.PerRecipient || !channels.IsRegistration(p.Address) || !channels.Uses(nf, p.Name) {
			continue
		}
		if _, ok := d.Channels[p.Name]; ok {
			out = append(out, p.Address)
		}
	}
	return out
}

func offReason(why string) string {
	switch why {
	case "muted":
		return "muted by the recipient"
	case "tenant":
		return "turned off by the tenant's default preferences"
	}
	return "turned off by the recipient's preferences"
}

// isMuted: the notifier is muted, or every source that reached the recipient
// is a topic they muted (addressing someone directly is not silenced by a topic
// mute).
func isMuted(notifier string, topics []string, r *mergedRecipient) bool {
	if len(r.Mutes) == 0 {
		return false
	}
	if slices.Contains(r.Mutes, "notifier:"+notifier) {
		return true
	}
	for _, src := range r.Sources {
		if src == 0 || src > len(topics) || !slices.Contains(r.Mutes, "topic:"+topics[src-1]) {
			return false
		}
	}
	return len(r.Sources) > 0
}

// scopesOf lists the preference scopes that can apply to nf.
func scopesOf(nf *config.Notifier) []string {
	s := []string{"*", "notifier:" + nf.Name}
	if nf.Category != "" {
		s = append(s, "category:"+nf.Category)
	}
	return s
}

func decodeParams(raw json.RawMessage) (map[string]any, error) {
	params := map[string]any{}
	if len(raw) == 0 {
		return params, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&params); err != nil {
		return nil, err
	}
	return params, nil
}

func decodeRules(raw json.RawMessage) ([]notifytype.Rule, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	// [scope, channel, mode], or [scope, channel, mode, "tenant"] for a
	// rule scoped to the notification's tenant (see stores.Candidate).
	var triples [][]string
	if err := json.Unmarshal(raw, &triples); err != nil {
		return nil, err
	}
	rules := make([]notifytype.Rule, len(triples))
	for i, t := range triples {
		if len(t) < 3 {
			return nil, fmt.Errorf("rule %d: %d elements", i, len(t))
		}
		rules[i] = notifytype.Rule{Scope: t[0], Channel: t[1], Mode: notifytype.Mode(t[2])}
		if len(t) > 3 {
			rules[i].Tenant = t[3]
		}
	}
	return rules, nil
}

// mergedRecipient is one recipient of a chunk after merging the sources.
type mergedRecipient struct {
	stores.Candidate
	ID      string
	Sources []int
	rank    int
}

func (r *mergedRecipient) profile() channels.Recipient {
	return channels.Recipient{ID: r.ID, Email: r.Email, Name: r.Name, Locale: r.Locale, Timezone: r.Timezone,
		WebhookURL: r.WebhookURL, Phone: r.Phone, Registrations: r.Registrations}
}

// quietOf is r's quiet hours in r's zone, nil for none (or a stored value
// this version cannot read: it never holds a delivery back).
func quietOf(r *mergedRecipient) *quiet {
	if r.QuietHours == "" {
		return nil
	}
	q, err := notifytype.ParseQuietHours([]byte(r.QuietHours))
	if err != nil || q == nil {
		return nil
	}
	return &quiet{hours: *q, zone: r.Timezone}
}

type merged struct {
	recipients  []mergedRecipient
	cursor      *string // new cursor (nil: unchanged)
	inlineTaken int
	done        bool
}

// mergeChunk merges the windows read by FanoutCandidates. Each source returned
// at most window rows in recipient order; a source that returned a full window
// may have more past its last row, so only recipients up to the smallest such
// last row are complete — that boundary is the new cursor. When no source was
// full, everything read is complete and the fan-out is done. A recipient
// reached by several sources keeps its strongest reason.
func mergeChunk(cands []stores.Candidate, window, topics int, reasonRank func(string) int) merged {
	counts := make([]int, topics+1)
	last := make([]string, topics+1)
	for _, c := range cands {
		counts[c.Source]++
		if c.Recipient > last[c.Source] {
			last[c.Source] = c.Recipient
		}
	}
	var boundary *string
	for s, n := range counts {
		if n >= window && (boundary == nil || last[s] < *boundary) {
			b := last[s]
			boundary = &b
		}
	}
	m := merged{done: boundary == nil, recipients: make([]mergedRecipient, 0, len(cands))}
	byID := make(map[string]int, len(cands))
	// Most recipients come from one source: their Sources share this slab
	// (capacity 1 each, so a second source copies out instead of clobbering).
	slab := make([]int, len(cands))
	var maxID string
	for _, c := range cands {
		if boundary != nil && c.Recipient > *boundary {
			continue
		}
		if c.Source == 0 {
			m.inlineTaken++
		}
		if c.Recipient > maxID {
			maxID = c.Recipient
		}
		rank := reasonRank(c.Reason)
		if i, ok := byID[c.Recipient]; ok {
			r := &m.recipients[i]
			r.Sources = append(r.Sources, c.Source)
			if rank < r.rank {
				r.rank, r.Reason = rank, c.Reason
			}
			continue
		}
		i := len(m.recipients)
		byID[c.Recipient] = i
		slab[i] = c.Source
		m.recipients = append(m.recipients, mergedRecipient{Candidate: c, ID: c.Recipient, Sources: slab[i : i+1 : i+1], rank: rank})
	}
	slices.SortFunc(m.recipients, func(a, b mergedRecipient) int { return strings.Compare(a.ID, b.ID) })
	if boundary != nil {
		m.cursor = boundary
	} else if maxID != "" {
		m.cursor = &maxID
	}
	return m
}
