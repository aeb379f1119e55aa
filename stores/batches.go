package stores

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// BatchJoin is one fan-out chunk's notification joining (or opening) its
// recipients' batches (sql/migrations/00015_workflows.sql).
type BatchJoin struct {
	Notifier       string
	Key            string // the rendered batch key
	NotificationID string
	Actor          string
	Params         json.RawMessage
	Window         time.Duration
	Max            int // 0: only the window closes a batch
	// Recipients (parallel slices): who the chunk reaches, a fresh id for
	// the batch each would open, and the inbox item the chunk creates for
	// them ("" for none).
	Recipients []string
	BatchIDs   []string
	InboxIDs   []string
}

// BatchState is a recipient's batch after the chunk's notification joined it.
type BatchState struct {
	ID        string
	Recipient string
	// Opened: this notification is the batch's first; its deliveries carry
	// the batch. Otherwise it joined a batch opened before.
	Opened   bool
	Count    int
	Actors   []string
	Items    json.RawMessage // the members' params, oldest first
	InboxID  *string         // the batch's in-app item
	ClosesAt time.Time
	// Full: the batch reached max with this notification; its message is
	// due now.
	Full bool
}

// expireBatchesSQL ends the joining window of the chunk's recipients'
// batches whose window has passed (their message is sent at closes_at; a
// notification from now on opens the next batch).
const expireBatchesSQL = `
UPDATE notify_batches SET state = 'full', updated_at = now()
WHERE recipient = ANY($1::text[]) AND notifier = $2 AND batch_key = $3 AND state = 'open' AND closes_at <= now()`

// joinBatchesSQL opens or joins each recipient's open batch of (notifier,
// key). The upsert queues concurrent fan-outs on the open batch's row, and
// DO UPDATE sees its latest committed version, so every member is counted
// exactly once and no two batches of a key are open. A notification already
// in the batch (a replayed chunk) changes nothing and is read back by
// memberBatchesSQL; a batch whose window passed after expireBatchesSQL (an
// older transaction opened it) is not joined, and the caller tries again.
const joinBatchesSQL = `
INSERT INTO notify_batches AS b (id, recipient, notifier, batch_key, closes_at, max_members, members, actors, items,
                                 inbox_id, state)
SELECT u.id::uuid, u.recipient, $1, $2, now() + $3::float8 * interval '1 second', $4, ARRAY[$5::uuid],
       CASE WHEN $6 = '' THEN '{}'::text[] ELSE ARRAY[$6] END, jsonb_build_array($7::jsonb), nullif(u.inbox, '')::uuid,
       CASE WHEN $4 = 1 THEN 'full' ELSE 'open' END
FROM unnest($8::text[], $9::text[], $10::text[]) AS u(id, recipient, inbox)
ON CONFLICT (recipient, notifier, batch_key) WHERE state = 'open' DO UPDATE
SET count = b.count + 1,
    members = b.members || EXCLUDED.members,
    actors = CASE WHEN cardinality(EXCLUDED.actors) = 0 OR EXCLUDED.actors[1] = ANY(b.actors) THEN b.actors
                  ELSE b.actors || EXCLUDED.actors END,
    items = b.items || EXCLUDED.items,
    state = CASE WHEN b.max_members > 0 AND b.count + 1 >= b.max_members THEN 'full' ELSE 'open' END,
    updated_at = now()
WHERE b.closes_at > now() AND NOT ($5::uuid = ANY(b.members))
RETURNING b.id::text, b.recipient, b.members[1] = $5::uuid, b.count, b.actors, b.items, b.inbox_id::text, b.closes_at,
          b.state = 'full' AND b.members[cardinality(b.members)] = $5::uuid`

// memberBatchesSQL reads the batches notification $3 is a member of, for
// recipients $1 of (notifier $2, key $4).
const memberBatchesSQL = `
SELECT b.id::text, b.recipient, b.members[1] = $3::uuid, b.count, b.actors, b.items, b.inbox_id::text, b.closes_at, false
FROM notify_batches b
WHERE b.recipient = ANY($1::text[]) AND b.notifier = $2 AND b.batch_key = $4 AND $3::uuid = ANY(b.members)`

// JoinBatches opens or joins the batch of every recipient of j in tx and
// returns each one's batch, in no particular order. It takes the batches'
// row locks until tx ends, in recipient order (j's recipients are sorted
// first, with their batch and item ids): write the chunk in the same
// transaction.
func JoinBatches(ctx context.Context, tx DB, j *BatchJoin) ([]BatchState, error) {
	j.sortByRecipient()
	params := j.Params
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	index := make(map[string]int, len(j.Recipients))
	for i, r := range j.Recipients {
		index[r] = i
	}
	out := make([]BatchState, 0, len(j.Recipients))
	missing := j.Recipients
	for attempt := 0; len(missing) > 0; attempt++ {
		if attempt == 5 {
			return nil, fmt.Errorf("join batches of %s: %d recipients' batches keep closing under the join", j.NotificationID, len(missing))
		}
		ids, inbox := make([]string, len(missing)), make([]string, len(missing))
		for k, r := range missing {
			ids[k], inbox[k] = j.BatchIDs[index[r]], j.InboxIDs[index[r]]
		}
		if _, err := tx.Exec(ctx, expireBatchesSQL, missing, j.Notifier, j.Key); err != nil {
			return nil, fmt.Errorf("join batches of %s: %w", j.NotificationID, err)
		}
		got, err := scanBatches(tx.Query(ctx, joinBatchesSQL, j.Notifier, j.Key, j.Window.Seconds(), j.Max,
			j.NotificationID, j.Actor, string(params), ids, missing, inbox))
		if err != nil {
			return nil, fmt.Errorf("join batches of %s: %w", j.NotificationID, err)
		}
		out = append(out, got...)
		missing = without(missing, got)
		if len(missing) == 0 {
			break
		}
		got, err = scanBatches(tx.Query(ctx, memberBatchesSQL, missing, j.Notifier, j.NotificationID, j.Key))
		if err != nil {
			return nil, fmt.Errorf("join batches of %s: %w", j.NotificationID, err)
		}
		out = append(out, got...)
		missing = without(missing, got)
	}
	return out, nil
}

// sortByRecipient orders j's parallel recipient slices by recipient in
// byte order (the C collation of notify_batches.recipient), the order its
// upsert then locks the batch rows in.
func (j *BatchJoin) sortByRecipient() {
	if slices.IsSorted(j.Recipients) {
		return
	}
	idx := make([]int, len(j.Recipients))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(j.Recipients[a], j.Recipients[b]) })
	rs, bs, is := make([]string, len(idx)), make([]string, len(idx)), make([]string, len(idx))
	for k, i := range idx {
		rs[k], bs[k], is[k] = j.Recipients[i], j.BatchIDs[i], j.InboxIDs[i]
	}
	j.Recipients, j.BatchIDs, j.InboxIDs = rs, bs, is
}

func without(rs []string, got []BatchState) []string {
	if len(got) == 0 {
		return rs
	}
	seen := make(map[string]bool, len(got))
	for _, b := range got {
		seen[b.Recipient] = true
	}
	var out []string
	for _, r := range rs {
		if !seen[r] {
			out = append(out, r)
		}
	}
	return out
}

func scanBatches(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close()
}, err error) ([]BatchState, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []BatchState
	for rows.Next() {
		var b BatchState
		if err := rows.Scan(&b.ID, &b.Recipient, &b.Opened, &b.Count, &b.Actors, &b.Items, &b.InboxID, &b.ClosesAt, &b.Full); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

const batchLeadsSQL = `
SELECT batch_id::text, channel, id::text FROM notify_deliveries
WHERE batch_id = ANY($1::text[]::uuid[]) AND status <> 'cancelled'`

// BatchLeads returns the deliveries that carry batches ids, by batch id and
// channel. A cancelled one (its notification was cancelled) carries nothing
// more: later members are sent on their own.
func BatchLeads(ctx context.Context, tx DB, ids []string) (map[[2]string]string, error) {
	out := map[[2]string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, batchLeadsSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("batch leads: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b, ch, id string
		if err := rows.Scan(&b, &ch, &id); err != nil {
			return nil, err
		}
		out[[2]string{b, ch}] = id
	}
	return out, rows.Err()
}

// dueFullBatchesSQL makes the deliveries of batches that reached max due
// now, and returns them for send jobs.
const dueFullBatchesSQL = `
UPDATE notify_deliveries SET next_attempt_at = now(), updated_at = now()
WHERE batch_id = ANY($1::text[]::uuid[]) AND status = 'scheduled'
RETURNING id::text`

// DueFullBatches makes the scheduled deliveries of batches ids due now and
// returns their ids.
func DueFullBatches(ctx context.Context, tx DB, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, dueFullBatchesSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("batches due: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// rewriteBatchedInboxSQL writes batches' in-app items rendered again (title,
// body, url) and logs one "updated" change per item with what changed, so
// streams show it. With $7 (a member joined) the items take the joiner's
// params $6 and are unread and unseen again, and every item is logged; without
// (a member left, notify.batch_render) read state and params stay, and only
// items whose text changed are written.
const rewriteBatchedInboxSQL = `
WITH u AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(id, recipient, title, body, url)
), changed AS (
    UPDATE notify_inbox i
    SET title = u.title, body = u.body, url = u.url,
        params = CASE WHEN $7 THEN $6::jsonb ELSE i.params END,
        read_at = CASE WHEN $7 THEN NULL ELSE i.read_at END,
        seen_at = CASE WHEN $7 THEN NULL ELSE i.seen_at END
    FROM u
    WHERE i.id = u.id::uuid AND i.recipient = u.recipient
      AND ($7 OR (i.title, i.body, i.url) IS DISTINCT FROM (u.title, u.body, u.url))
    RETURNING i.id, i.recipient, i.title, i.body, i.url
)
INSERT INTO notify_inbox_changes (recipient, kind, item_ids, data)
SELECT c.recipient, 'updated', ARRAY[c.id],
       jsonb_build_object('title', c.title, 'body', c.body, 'url', c.url)
       || CASE WHEN $7 THEN jsonb_build_object('read_at', NULL, 'seen_at', NULL) ELSE '{}'::jsonb END
FROM changed c
ORDER BY c.recipient`

// InboxRewrite is a batch's in-app item rendered again.
type InboxRewrite struct {
	IDs, Recipients, Titles, Bodies, URLs []string
	Params                                json.RawMessage
}

// lockBatchItemsSQL locks batches' in-app items in recipient order before
// they are written: a join's re-render, a notify.batch_render job and
// notify_cancel (which moves an item to the batch's next member) write the
// same items, and in one order none of them deadlocks with another.
const lockBatchItemsSQL = `
SELECT 1 FROM notify_inbox i
WHERE i.id = ANY($1::text[]::uuid[])
ORDER BY i.recipient, i.id
FOR UPDATE`

// UpdateBatchedInbox applies u in tx after a member joined (see
// rewriteBatchedInboxSQL) and wakes the stream hubs when it commits.
func UpdateBatchedInbox(ctx context.Context, tx DB, u *InboxRewrite) error {
	return rewriteBatchedInbox(ctx, tx, u, true)
}

// rewriteBatchedInbox locks u's items (lockBatchItemsSQL), writes them
// (rewriteBatchedInboxSQL, unread as that says) and wakes the stream hubs
// when tx commits.
func rewriteBatchedInbox(ctx context.Context, tx DB, u *InboxRewrite, unread bool) error {
	if len(u.IDs) == 0 {
		return nil
	}
	params := u.Params
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	if _, err := tx.Exec(ctx, lockBatchItemsSQL, u.IDs); err != nil {
		return fmt.Errorf("rewrite batched inbox items: %w", err)
	}
	if _, err := tx.Exec(ctx, rewriteBatchedInboxSQL, u.IDs, u.Recipients, u.Titles, u.Bodies, u.URLs, string(params), unread); err != nil {
		return fmt.Errorf("rewrite batched inbox items: %w", err)
	}
	if _, err := tx.Exec(ctx, wakeInboxStreamsSQL); err != nil {
		return fmt.Errorf("rewrite batched inbox items: %w", err)
	}
	return nil
}

// BatchContent is what a batch holds when its message is sent.
type BatchContent struct {
	Count  int
	Actors []string
	Items  json.RawMessage
}

// closeBatchesSQL closes the batches carried by deliveries $1 that are due
// at $2 (a claim is about to take them) and returns their contents. It locks
// the batch rows in recipient order, as a fan-out chunk's join (JoinBatches)
// and notify_cancel do, so that none of the three deadlocks with another. A
// notification that arrives after this statement opens the next batch; one
// that joined before it committed is counted: its join holds the row's lock,
// and this update waits for it and reads the row it left.
const closeBatchesSQL = `
WITH due AS (
    SELECT d.id, d.batch_id FROM notify_deliveries d
    WHERE d.id = ANY($1::text[]::uuid[]) AND d.batch_id IS NOT NULL
      AND d.status IN ('scheduled', 'pending', 'failed', 'rate_limited')
      AND (d.next_attempt_at IS NULL OR d.next_attempt_at <= $2)
), locked AS (
    SELECT b.id FROM notify_batches b
    WHERE b.id IN (SELECT batch_id FROM due)
    ORDER BY b.recipient, b.id
    FOR UPDATE
), closed AS (
    UPDATE notify_batches b SET state = 'closed', updated_at = $2
    WHERE b.id IN (SELECT id FROM locked)
    RETURNING b.id, b.count, b.actors, b.items
)
SELECT due.id::text, c.count, c.actors, c.items FROM due JOIN closed c ON c.id = due.batch_id`

// CloseBatches closes the batches of whichever of deliveries ids carry one
// and are due at now, and returns their contents by delivery id. Closing
// again (a retry of the message) returns the same contents.
func CloseBatches(ctx context.Context, db DB, ids []string, now time.Time) (map[string]BatchContent, error) {
	rows, err := db.Query(ctx, closeBatchesSQL, ids, now)
	if err != nil {
		return nil, fmt.Errorf("close batches: %w", err)
	}
	defer rows.Close()
	out := map[string]BatchContent{}
	for rows.Next() {
		var id string
		var c BatchContent
		if err := rows.Scan(&id, &c.Count, &c.Actors, &c.Items); err != nil {
			return nil, err
		}
		out[id] = c
	}
	return out, rows.Err()
}

// BatchRender is what renders a batch's in-app item again: the batch's
// contents and its first member's params.
type BatchRender struct {
	BatchID, Recipient, Notifier, InboxID string
	Content                               BatchContent
	Params                                json.RawMessage
}

const batchRendersSQL = `
SELECT b.id::text, b.recipient, b.notifier, b.inbox_id::text, b.count, b.actors, b.items, n.params
FROM notify_batches b
JOIN notify_notifications n ON n.id = b.members[1]
WHERE b.id = ANY($1::text[]::uuid[]) AND b.inbox_id IS NOT NULL`

// BatchRenders reads what renders the in-app items of batches ids again; a
// batch left without members or without an item is not returned.
func BatchRenders(ctx context.Context, db DB, ids []string) ([]BatchRender, error) {
	rows, err := db.Query(ctx, batchRendersSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("read batches to render: %w", err)
	}
	defer rows.Close()
	var out []BatchRender
	for rows.Next() {
		var r BatchRender
		if err := rows.Scan(&r.BatchID, &r.Recipient, &r.Notifier, &r.InboxID, &r.Content.Count, &r.Content.Actors,
			&r.Content.Items, &r.Params); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// RerenderBatchedInbox applies u (its Params unused) in tx after a member
// left, leaving read state as it is (see rewriteBatchedInboxSQL), and wakes
// the stream hubs when tx commits.
func RerenderBatchedInbox(ctx context.Context, tx DB, u *InboxRewrite) error {
	return rewriteBatchedInbox(ctx, tx, u, false)
}
