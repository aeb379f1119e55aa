package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
	"github.com/notifyd/notifyd/templates"
)

// Batches (a notifier's `batch`) are joined in the fan-out's chunk
// transaction, before its rows are written: stores.JoinBatches upserts each
// recipient's open batch of the rendered key, and what it answers decides
// the rows. The first notification of a batch writes its inbox item and
// deliveries as usual, except that the deliveries of the channels that send
// carry the batch and wait (`scheduled`) until the window closes; a later one
// writes no inbox item but re-renders the batch's (unread again, an
// `inbox.updated` change), and its deliveries on those channels are
// `batched` into the first one's. A batch that reaches max makes its
// deliveries due at once. When a carrying delivery is claimed, the claim
// closes its batch first (closeBatches) and the message is rendered with the
// batch's count, actors and items.

// batchStep is what a chunk's batches leave to do after its rows are
// written.
type batchStep struct {
	rewrite stores.InboxRewrite
	full    []string // batches that reached max with this notification
}

// joinBatches joins the chunk's recipients to their batches and rewrites
// the chunk's rows accordingly (see above), in three steps: the join
// itself, the deliveries' routing, the inbox items' rewriting.
func (d *Deps) joinBatches(ctx context.Context, tx pgx.Tx, st *stores.FanoutState, nf *config.Notifier, c *stores.Chunk) (*batchStep, error) {
	params, err := decodeParams(st.Params)
	if err != nil {
		return nil, err
	}
	key, err := templates.RenderText(nf.Batch.KeyTmpl, params)
	if err != nil {
		return nil, fmt.Errorf("batch key of %s: %w", st.ID, err)
	}
	j := batchJoinOf(st, nf, boundedBatchKey(key), c)
	if len(j.Recipients) == 0 {
		return nil, nil
	}
	states, err := stores.JoinBatches(ctx, tx, j)
	if err != nil {
		return nil, err
	}
	step := &batchStep{rewrite: stores.InboxRewrite{Params: st.Params}}
	byRecipient := make(map[string]*stores.BatchState, len(states))
	var joined []string
	for i := range states {
		b := &states[i]
		byRecipient[b.Recipient] = b
		if !b.Opened {
			joined = append(joined, b.ID)
		}
		if b.Full {
			step.full = append(step.full, b.ID)
		}
	}
	leads, err := stores.BatchLeads(ctx, tx, joined)
	if err != nil {
		return nil, err
	}
	grow(c)
	routeBatchedDeliveries(c, byRecipient, leads)
	if err := d.rewriteBatchInbox(nf, params, c, byRecipient, &step.rewrite); err != nil {
		return nil, err
	}
	return step, nil
}

// MaxBatchKey is the longest rendered batch key stored as it is. The key is
// rendered from params, which are bounded only by the request size, and it is
// part of a btree index (notify_batches_open), whose entries cannot exceed
// about 2,700 bytes: a 7,000-character post id made every chunk of its
// fan-out fail, so nobody got the notification on any channel.
const MaxBatchKey = 200

// boundedBatchKey is key when it is at most MaxBatchKey bytes; a longer one
// becomes its first 64 bytes (cut at a character boundary, so short-ish keys
// stay recognisable in the console), "…sha256:" and the SHA-256 of the whole
// key in hex. Equal keys still batch together and different ones apart (up
// to a SHA-256 collision).
func boundedBatchKey(key string) string {
	if len(key) <= MaxBatchKey {
		return key
	}
	cut := 64
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	sum := sha256.Sum256([]byte(key))
	return key[:cut] + "…sha256:" + hex.EncodeToString(sum[:])
}

// batchJoinOf is the join of the chunk's recipients (each once, whether it
// has an inbox item, deliveries or both) to their batches of key.
func batchJoinOf(st *stores.FanoutState, nf *config.Notifier, key string, c *stores.Chunk) *stores.BatchJoin {
	inboxOf := make(map[string]string, len(c.InboxIDs))
	for i, r := range c.InboxRecipients {
		inboxOf[r] = c.InboxIDs[i]
	}
	j := &stores.BatchJoin{Notifier: st.Notifier, Key: key, NotificationID: st.ID, Actor: st.Actor, Params: st.Params,
		Window: nf.Batch.Window.D(), Max: nf.Batch.Max}
	seen := map[string]bool{}
	for _, list := range [][]string{c.InboxRecipients, c.DeliveryRecipients} {
		for _, r := range list {
			if r != "" && !seen[r] {
				seen[r] = true
				j.Recipients = append(j.Recipients, r)
				j.BatchIDs = append(j.BatchIDs, uuidv7.String())
				j.InboxIDs = append(j.InboxIDs, inboxOf[r])
			}
		}
	}
	return j
}

// routeBatchedDeliveries rewrites the chunk's due deliveries: the first of
// a batch carries it and waits (scheduled) until its window closes; a later
// one is batched into the first's delivery on the same channel, and sent on
// its own when the first did not use that channel. Throttle candidates that
// became batched count against no throttle.
func routeBatchedDeliveries(c *stores.Chunk, byRecipient map[string]*stores.BatchState, leads map[[2]string]string) {
	batched := map[string]bool{}
	for i, r := range c.DeliveryRecipients {
		b := byRecipient[r]
		status := notifytype.DeliveryStatus(c.DeliveryStatuses[i])
		if b == nil || (status != notifytype.StatusPending && status != notifytype.StatusScheduled) {
			continue
		}
		if b.Opened {
			c.DeliveryBatch[i] = b.ID
			due := b.ClosesAt
			if cur := c.DeliveryDue[i]; cur != nil && cur.After(due) {
				due = *cur
			}
			c.DeliveryStatuses[i] = string(notifytype.StatusScheduled)
			c.DeliveryDue[i] = &due
			continue
		}
		lead, ok := leads[[2]string{b.ID, c.DeliveryChannels[i]}]
		if !ok {
			continue
		}
		c.DeliveryStatuses[i] = string(notifytype.StatusBatched)
		c.DeliveryBatchedInto[i] = lead
		c.DeliveryDue[i] = nil
		c.DeliveryErrors[i] = ""
		batched[c.DeliveryIDs[i]] = true
	}
	dropThrottled(c, batched)
}

// rewriteBatchInbox drops the inbox items of the chunk's later batch
// members, which write none, and queues the re-rendering of their batch's
// item into rw instead.
func (d *Deps) rewriteBatchInbox(nf *config.Notifier, params map[string]any, c *stores.Chunk, byRecipient map[string]*stores.BatchState, rw *stores.InboxRewrite) error {
	keep := 0
	for i, r := range c.InboxRecipients {
		b := byRecipient[r]
		if b == nil || b.Opened {
			c.InboxIDs[keep], c.InboxRecipients[keep], c.InboxReasons[keep] = c.InboxIDs[i], r, c.InboxReasons[i]
			keep++
			continue
		}
		if b.InboxID == nil || d.Inbox == nil {
			continue
		}
		bp, err := batchParams(params, b.ID, stores.BatchContent{Count: b.Count, Actors: b.Actors, Items: b.Items})
		if err != nil {
			return err
		}
		item, err := d.Inbox.RenderInbox(nf.Name, d.localized(bp, nil, nil))
		if err != nil {
			return fmt.Errorf("render the in-app item of batch %s: %w", b.ID, err)
		}
		rw.IDs, rw.Recipients = append(rw.IDs, *b.InboxID), append(rw.Recipients, r)
		rw.Titles, rw.Bodies, rw.URLs = append(rw.Titles, item.Title), append(rw.Bodies, item.Body), append(rw.URLs, item.URL)
	}
	c.InboxIDs, c.InboxRecipients, c.InboxReasons = c.InboxIDs[:keep], c.InboxRecipients[:keep], c.InboxReasons[:keep]
	return nil
}

// finish runs what the chunk's batches need once its rows are written: the
// batches' inbox items re-rendered, and the messages of batches that
// reached max made due now.
func (s *batchStep) finish(ctx context.Context, tx pgx.Tx, d *Deps) error {
	if s == nil {
		return nil
	}
	if err := stores.UpdateBatchedInbox(ctx, tx, &s.rewrite); err != nil {
		return err
	}
	due, err := stores.DueFullBatches(ctx, tx, s.full)
	if err != nil {
		return err
	}
	return insertSendJobs(ctx, tx, due, d.Config.Queues.SendBatch)
}

// grow makes c's per-delivery workflow slices as long as its deliveries.
func grow(c *stores.Chunk) {
	n := len(c.DeliveryIDs)
	pad := func(s []string) []string { return append(s, make([]string, n-len(s))...) }
	c.DeliveryUnless, c.DeliveryBatch, c.DeliveryBatchedInto = pad(c.DeliveryUnless), pad(c.DeliveryBatch), pad(c.DeliveryBatchedInto)
	if len(c.DeliveryDue) < n {
		c.DeliveryDue = append(c.DeliveryDue, make([]*time.Time, n-len(c.DeliveryDue))...)
	}
}

// dropThrottled takes the deliveries in drop out of c's throttle
// candidates: a batched delivery sends nothing, so it does not count.
func dropThrottled(c *stores.Chunk, drop map[string]bool) {
	if len(drop) == 0 {
		return
	}
	k := 0
	for i, id := range c.ThrottleIDs {
		if drop[id] {
			continue
		}
		c.ThrottleIDs[k], c.ThrottleRecipients[k], c.ThrottleChannels[k] = id, c.ThrottleRecipients[i], c.ThrottleChannels[i]
		c.ThrottleLimits[k], c.ThrottlePers[k], c.ThrottleErrors[k] = c.ThrottleLimits[i], c.ThrottlePers[i], c.ThrottleErrors[i]
		k++
	}
	c.ThrottleIDs, c.ThrottleRecipients, c.ThrottleChannels = c.ThrottleIDs[:k], c.ThrottleRecipients[:k], c.ThrottleChannels[:k]
	c.ThrottleLimits, c.ThrottlePers, c.ThrottleErrors = c.ThrottleLimits[:k], c.ThrottlePers[:k], c.ThrottleErrors[:k]
}

// hasBatches reports whether any notifier batches (only then does a send
// job look for batches to close).
func (d *Deps) hasBatches() bool {
	for _, name := range d.Config.NotifierNames() {
		if d.Config.Notifiers[name].Batch != nil {
			return true
		}
	}
	return false
}

// closeBatches closes the batches that deliveries ids carry, when they are
// due: before the claim, so that a notification arriving after it opens
// the next batch instead of joining one whose message is on its way.
func (d *Deps) closeBatches(ctx context.Context, ids []string) (map[string]stores.BatchContent, error) {
	if !d.hasBatches() {
		return nil, nil
	}
	return stores.CloseBatches(ctx, d.Pool, ids, d.now())
}

// withBatches gives each claimed delivery that carries a batch the batch's
// fields in its params (.Count, .Actors, .Items), for its channel's
// templates.
func withBatches(claimed []stores.Claimed, contents map[string]stores.BatchContent) error {
	for i := range claimed {
		c := &claimed[i]
		b, ok := contents[c.ID]
		if !ok {
			continue
		}
		params := map[string]any{}
		if len(c.Params) > 0 {
			dec := json.NewDecoder(bytes.NewReader(c.Params))
			dec.UseNumber()
			if err := dec.Decode(&params); err != nil {
				return fmt.Errorf("params of %s: %w", c.NotificationID, err)
			}
		}
		bp, err := batchParams(params, "carried by "+c.ID, b)
		if err != nil {
			return err
		}
		raw, err := json.Marshal(bp)
		if err != nil {
			return err
		}
		c.Params = raw
	}
	return nil
}

// batchParams is params with what batch holds (.Count, .Actors, .Items),
// for a batch's templates; batch names it in an error.
func batchParams(params map[string]any, batch string, c stores.BatchContent) (map[string]any, error) {
	var items []any
	if err := json.Unmarshal(c.Items, &items); err != nil {
		return nil, fmt.Errorf("items of batch %s: %w", batch, err)
	}
	return templates.BatchParams(params, c.Count, c.Actors, items), nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// BatchRenderArgs is the notify.batch_render job: render the in-app items of
// batches again after a member left them. notify_cancel enqueues it (in SQL:
// sql/migrations/00019_batch_cancel.sql names the kind and queue).
type BatchRenderArgs struct {
	BatchIDs []string `json:"batch_ids"`
}

// Kind is the River job kind.
func (BatchRenderArgs) Kind() string { return "notify.batch_render" }

// InsertOpts puts the job on the fan-out queue, with the in-app items it
// renders.
func (BatchRenderArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueFanout, MaxAttempts: 25}
}

// BatchRenderWorker works notify.batch_render: each batch's item is rendered
// from what the batch holds now (count, actors, items) with its first
// member's params, as a join renders it, and written in one statement that
// leaves read and seen as they are.
type BatchRenderWorker struct {
	river.WorkerDefaults[BatchRenderArgs]
	Deps *Deps
}

// Work renders and writes the items. A batch whose templates fail to render
// keeps its item as it is (logged): rendering again would fail the same way.
func (w *BatchRenderWorker) Work(ctx context.Context, job *river.Job[BatchRenderArgs]) error {
	d := w.Deps
	if d.Inbox == nil || len(job.Args.BatchIDs) == 0 {
		return nil
	}
	renders, err := stores.BatchRenders(ctx, d.Pool, job.Args.BatchIDs)
	if err != nil {
		return err
	}
	var u stores.InboxRewrite
	for _, r := range renders {
		params, err := decodeParams(r.Params)
		if err != nil {
			return err
		}
		bp, err := batchParams(params, r.BatchID, r.Content)
		if err != nil {
			return err
		}
		item, err := d.Inbox.RenderInbox(r.Notifier, d.localized(bp, nil, nil))
		if err != nil {
			d.logger().WarnContext(ctx, "render a batch's in-app item again", "batch", r.BatchID, "err", err)
			continue
		}
		u.IDs, u.Recipients = append(u.IDs, r.InboxID), append(u.Recipients, r.Recipient)
		u.Titles, u.Bodies, u.URLs = append(u.Titles, item.Title), append(u.Bodies, item.Body), append(u.URLs, item.URL)
	}
	return pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error { return stores.RerenderBatchedInbox(ctx, tx, &u) })
}
