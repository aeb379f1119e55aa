package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/stores"
)

// DefaultFanoutClaim is how many small notifications one claimer
// transaction takes at most.
const DefaultFanoutClaim = 500

// FanoutClaimer fans out small notifications (1 to 100 inline recipients, no
// topics: what notify_enqueue writes with batch_fanout and no River job) many
// at a time. One transaction claims every due one, up to a bound, with FOR
// UPDATE SKIP LOCKED (claimers of other replicas, and this one's other loops,
// take other rows instead of waiting), reads all their recipients' profiles,
// preferences and mutes in one statement, resolves modes in Go, writes every
// inbox item and delivery row and marks every notification fanned out in one
// statement, inserts the send jobs (a job per send_batch deliveries, across
// notifications) and one change-log record, and commits. The per-transaction
// cost (River's fetch and completion, the transaction, the statements'
// round trips) is paid once per batch rather than per notification.
//
// A notification's fan-out is its part of that transaction: all of it or
// none. A crash before the commit rolls the batch back, the notifications
// stay claimable and the next claim writes them once. A batch whose write
// fails is retried one notification per transaction, so one bad notification
// cannot hold the others: one over a database limit (SQLSTATE class 54) is
// rejected with the reason, any other failure hands it to a notify.fanout
// job, whose retries and give-up apply. A claimed notification the batch does
// not fan out itself (its notifier has an audience query, batching, a
// throttle or a bulk channel) is handed to a notify.fanout job in the same
// transaction.
//
// Each loop claims again at once after a full batch, otherwise waits for
// Wake or the poll interval (queues.fetch_poll_interval, 50 ms by default),
// which also bounds how late a scheduled notification is claimed after its
// send_at.
type FanoutClaimer struct {
	deps   *Deps
	client *river.Client[pgx.Tx]
	// Limit is the batch bound (DefaultFanoutClaim when zero); Loops how many
	// claim loops Run starts (one when zero); Poll the idle wait (the fetch
	// poll interval when zero). Set them before Run.
	Limit int
	Loops int
	Poll  time.Duration
	// BeforeCommit, when set, runs before each batch's commit with the ids
	// of the notifications fanned out; an error rolls the batch back, as a
	// crash would. A fault-injection point for tests.
	BeforeCommit func(ids []string) error

	mu    sync.Mutex
	wakes []chan struct{}
}

// NewFanoutClaimer returns a claimer that writes with deps and inserts jobs
// through client (which needs no workers of its own), with one loop per two
// fan-out workers (queues.fanout; at least one).
func NewFanoutClaimer(deps *Deps, client *river.Client[pgx.Tx]) *FanoutClaimer {
	c := &FanoutClaimer{deps: deps, client: client, Loops: max(deps.Config.Queues.Fanout/2, 1)}
	deps.onFanoutWake(c.Wake)
	return c
}

// Start runs the claimer until ctx ends or stop is called; stop waits for
// its loops to end.
func (c *FanoutClaimer) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	return func() { cancel(); <-done }
}

// Wake makes every idle loop claim at once instead of at its next poll. It
// never blocks, and wakes that arrive while a loop is busy fold into one. A
// wake with nothing to claim costs one index probe.
func (c *FanoutClaimer) Wake() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Run claims and fans out small notifications until ctx ends.
func (c *FanoutClaimer) Run(ctx context.Context) {
	loops := max(c.Loops, 1)
	var wg sync.WaitGroup
	for range loops {
		w := make(chan struct{}, 1)
		c.mu.Lock()
		c.wakes = append(c.wakes, w)
		c.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(ctx, w)
		}()
	}
	wg.Wait()
}

func (c *FanoutClaimer) limit() int {
	if c.Limit > 0 {
		return c.Limit
	}
	return DefaultFanoutClaim
}

func (c *FanoutClaimer) poll() time.Duration {
	if c.Poll > 0 {
		return c.Poll
	}
	if p := c.deps.Config.Queues.FetchPollInterval.D(); p > 0 {
		return p
	}
	return 50 * time.Millisecond
}

func (c *FanoutClaimer) loop(ctx context.Context, wake chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C:
		}
		for ctx.Err() == nil {
			n, err := c.ClaimOnce(ctx)
			if err != nil {
				if ctx.Err() == nil {
					failures++
					c.deps.logger().WarnContext(ctx, "fan-out claim failed", "err", err, "failures", failures)
				}
				break
			}
			failures = 0
			if n < c.limit() {
				break
			}
		}
		wait := c.poll()
		if failures > 0 {
			wait = min(wait<<min(failures, 5), 5*time.Second)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// ClaimOnce runs one batch: it claims up to the bound, fans them out and
// commits, and reports how many notifications it claimed. When the batch
// fails after its claim, each of its notifications is retried alone (see
// FanoutClaimer); the error is returned only when that could not run.
func (c *FanoutClaimer) ClaimOnce(ctx context.Context) (int, error) {
	ids, err := c.batch(ctx, "")
	if err == nil || len(ids) == 0 {
		return len(ids), err
	}
	c.deps.logger().WarnContext(ctx, "fan-out batch failed; fanning out its notifications one at a time",
		"notifications", len(ids), "err", err)
	for _, id := range ids {
		if _, err := c.batch(ctx, id); err != nil {
			if ctx.Err() != nil {
				return len(ids), ctx.Err()
			}
			if err := c.settleAlone(ctx, id, err); err != nil {
				return len(ids), err
			}
		}
	}
	return len(ids), nil
}

// settleAlone ends the claim of notification id, whose fan-out failed alone
// with cause: rejected when cause is over a database limit, otherwise handed
// to a notify.fanout job (which retries and, at its last attempt, gives up).
func (c *FanoutClaimer) settleAlone(ctx context.Context, id string, cause error) error {
	d := c.deps
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	claimed, err := stores.ClaimSmallNotifications(ctx, tx, 1, id)
	if err != nil || len(claimed) == 0 {
		return err // gone meanwhile, or held by another claimer
	}
	b := &stores.FanoutBatch{}
	if programLimit(cause) {
		reason := fmt.Sprintf("fan-out gave up: a value is over a database limit, which no retry can change: %v", cause)
		b.RejectedIDs, b.RejectedReasons = []string{id}, []string{reason}
		d.logger().WarnContext(ctx, "notification rejected", "notification_id", id, "notifier", claimed[0].Notifier,
			"reason", reason)
	} else {
		b.HandedOffIDs = []string{id}
		d.logger().WarnContext(ctx, "fan-out of a notification failed; a notify.fanout job takes it",
			"notification_id", id, "err", cause)
	}
	if _, err := stores.WriteFanoutBatch(ctx, tx, b); err != nil {
		return err
	}
	if err := c.handOff(ctx, tx, b.HandedOffIDs); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if len(b.RejectedIDs) > 0 {
		d.metrics().Notification(d.notifierLabel(claimed[0].Notifier), "rejected")
	}
	return nil
}

// handOff inserts a notify.fanout job (lane 0) for each of ids in tx.
func (c *FanoutClaimer) handOff(ctx context.Context, tx pgx.Tx, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: FanoutArgs{NotificationID: id}}
	}
	if err := insertJobs(ctx, tx, c.client, params); err != nil {
		return fmt.Errorf("hand %d notifications to fan-out jobs: %w", len(ids), err)
	}
	return nil
}

// claimedOne is a claimed notification on its way through the batch.
type claimedOne struct {
	st    *stores.ClaimedNotification
	nf    *config.Notifier
	item  channels.InboxItem
	off   conditions
	first int // index of its first recipient in the candidates
	n     int // its recipients
}

// batch runs one claim transaction (only notification only, when not "")
// and returns the ids it claimed, also when it fails after the claim.
func (c *FanoutClaimer) batch(ctx context.Context, only string) (ids []string, err error) {
	d := c.deps
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	limit := c.limit()
	if only != "" {
		limit = 1
	}
	claimed, err := stores.ClaimSmallNotifications(ctx, tx, limit, only)
	if err != nil {
		return nil, err
	}
	if len(claimed) == 0 {
		return nil, nil
	}
	ids = make([]string, len(claimed))
	for i := range claimed {
		ids[i] = claimed[i].ID
	}
	w := &FanoutWorker{Deps: d}
	b := &stores.FanoutBatch{}
	q := &stores.BatchCandidates{}
	var fast []claimedOne
	var rejected []string // the rejected notifications' notifiers
	registrations := map[string]bool{}
	for i := range claimed {
		st := &claimed[i]
		nf, item, off, reason := w.resolve(&st.FanoutState)
		if reason != "" {
			d.logger().WarnContext(ctx, "notification rejected", "notification_id", st.ID, "notifier", st.Notifier,
				"key", st.Key, "reason", reason)
			b.RejectedIDs = append(b.RejectedIDs, st.ID)
			b.RejectedReasons = append(b.RejectedReasons, reason)
			rejected = append(rejected, st.Notifier)
			continue
		}
		if !c.batchable(nf) {
			b.HandedOffIDs = append(b.HandedOffIDs, st.ID)
			continue
		}
		if n := audienceOf(st, nf); n > nf.MaxRecipients {
			reason := fmt.Sprintf("audience of %d recipients exceeds max_recipients %d", n, nf.MaxRecipients)
			b.RejectedIDs = append(b.RejectedIDs, st.ID)
			b.RejectedReasons = append(b.RejectedReasons, reason)
			rejected = append(rejected, st.Notifier)
			continue
		}
		one := claimedOne{st: st, nf: nf, item: item, off: off, first: len(q.Recipients), n: len(st.Recipients)}
		ni := int32(len(q.Notifiers))
		q.Notifiers = append(q.Notifiers, nf.Name)
		q.Categories = append(q.Categories, nf.Category)
		q.Tenants = append(q.Tenants, st.Tenant)
		for j, r := range st.Recipients {
			q.Notification = append(q.Notification, ni)
			q.Recipients = append(q.Recipients, r)
			reason := ""
			if j < len(st.Reasons) {
				reason = st.Reasons[j]
			}
			q.Reasons = append(q.Reasons, reason)
		}
		for _, r := range d.registrationsOf(nf) {
			registrations[r] = true
		}
		fast = append(fast, one)
	}
	var cands []stores.Candidate
	if len(fast) > 0 {
		regs := make([]string, 0, len(registrations))
		for r := range registrations {
			regs = append(regs, r)
		}
		if cands, err = stores.FanoutBatchCandidates(ctx, tx, q, d.now(), regs); err != nil {
			return ids, err
		}
	}
	var fanned []string
	for _, one := range fast {
		m := mergeChunk(cands[one.first:one.first+one.n], one.n+1, 0, d.Config.ReasonRank)
		st := &one.st.FanoutState
		st.Lane = &stores.FanoutLane{}
		chunk, err := w.buildChunk(st, one.nf, m, one.off)
		if err != nil {
			return ids, err
		}
		if len(chunk.ThrottleIDs) > 0 {
			// A throttle counts per recipient across notifications: written
			// by the notification's own job, one notification at a time.
			b.HandedOffIDs = append(b.HandedOffIDs, st.ID)
			continue
		}
		chunk.Title, chunk.Body, chunk.URL = one.item.Title, one.item.Body, one.item.URL
		if err := d.localizeChunk(chunk, st, one.nf, m); err != nil {
			return ids, err
		}
		b.Chunks = append(b.Chunks, chunk)
		fanned = append(fanned, st.ID)
	}
	res, err := stores.WriteFanoutBatch(ctx, tx, b)
	if err != nil {
		return ids, err
	}
	if err := c.handOff(ctx, tx, b.HandedOffIDs); err != nil {
		return ids, err
	}
	batchSize := d.Config.Queues.SendBatch
	if err := insertSendJobsWith(ctx, tx, c.client, res.PendingIDs, batchSize); err != nil {
		return ids, err
	}
	if err := insertScheduledSendJobsWith(ctx, tx, c.client, res.ScheduledIDs, res.ScheduledDue, batchSize); err != nil {
		return ids, err
	}
	if err := stores.LogInboxCreated(ctx, tx, res.InboxIDs, res.InboxRecipients); err != nil {
		return ids, err
	}
	if c.BeforeCommit != nil {
		if err := c.BeforeCommit(fanned); err != nil {
			return ids, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return ids, err
	}
	c.record(ctx, b, res, rejected)
	return ids, nil
}

// record counts what a committed batch did.
func (c *FanoutClaimer) record(ctx context.Context, b *stores.FanoutBatch, res *stores.FanoutBatchResult, rejected []string) {
	d := c.deps
	m := d.metrics()
	deliveries := 0
	for _, chunk := range b.Chunks {
		m.Notification(chunk.Notifier, "accepted")
		countTerminal(m, chunk)
		deliveries += len(chunk.DeliveryIDs)
	}
	m.FanoutRows(len(res.InboxIDs), deliveries)
	for _, name := range rejected {
		m.Notification(d.notifierLabel(name), "rejected")
	}
	if d.logger().Enabled(ctx, slog.LevelDebug) {
		d.logger().DebugContext(ctx, "fan-out batch written", "notifications", len(b.Chunks),
			"rejected", len(b.RejectedIDs), "handed_off", len(b.HandedOffIDs), "inbox", len(res.InboxIDs),
			"sends", len(res.PendingIDs))
	}
}

// batchable reports whether the batch fans out a notification of nf itself:
// not one whose notifier reads an audience query, batches notifications or
// has a bulk channel (each of those needs statements of its own, which the
// notification's own job runs).
func (c *FanoutClaimer) batchable(nf *config.Notifier) bool {
	if nf.Audience != nil || nf.Batch != nil {
		return false
	}
	for _, p := range c.deps.Registry.Plugins() {
		if p.Bulk && channels.Uses(nf, p.Name) {
			return false
		}
	}
	return true
}

// audienceOf counts the distinct recipients of a claimed notification, the
// actor left out unless nf notifies the actor.
func audienceOf(st *stores.ClaimedNotification, nf *config.Notifier) int {
	seen := make(map[string]struct{}, len(st.Recipients))
	for _, r := range st.Recipients {
		if r == st.Actor && !nf.NotifyActor {
			continue
		}
		seen[r] = struct{}{}
	}
	return len(seen)
}

// errNoClaimer is returned by StartFanoutClaimer without a River client.
var errNoClaimer = errors.New("fan-out claimer: no River client")

// StartFanoutClaimer builds a claimer for deps and client and starts it (see
// Start). A test harness runs one beside its River client, as the daemon does.
func StartFanoutClaimer(ctx context.Context, deps *Deps, client *river.Client[pgx.Tx]) (claimer *FanoutClaimer, stop func(), err error) {
	if client == nil {
		return nil, nil, errNoClaimer
	}
	c := NewFanoutClaimer(deps, client)
	return c, c.Start(ctx), nil
}
