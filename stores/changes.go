package stores

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The inbox change log (notify_inbox_changes) is what the realtime stream
// reads: one row per change to a recipient's inbox (or, for the items a
// fan-out chunk created, one row for all their recipients), numbered by seq. Writers
// insert under ChangeLogLock, so seq order is commit order: once a reader sees
// row n, every row below n that will ever exist is visible too. That is what
// lets a reader keep a single position ("everything up to seq n has been
// read") and resume with seq > n without missing a row that committed late.

// ChangeKind says what happened to the items of a change.
type ChangeKind string

// Change kinds, as stored in notify_inbox_changes.kind.
const (
	// ChangeCreated is a new inbox item. A created change names exactly one
	// item (LogInboxCreated writes one row per item, or one row for many
	// recipients that readers split into one change each).
	ChangeCreated ChangeKind = "created"
	// ChangeUpdated is a state change of one or more items; Data says which
	// timestamp changed and to what ({"read_at": "..."}, {"read_at": null},
	// {"seen_at": ...}, {"archived_at": ...}).
	ChangeUpdated ChangeKind = "updated"
	// ChangeDeleted is the removal of one or more items (a cancelled
	// notification).
	ChangeDeleted ChangeKind = "deleted"
)

// Change is one row of the inbox change log.
type Change struct {
	Seq       int64
	Recipient string
	Kind      ChangeKind
	// ItemIDs are the items the change is about, as written (created: one).
	ItemIDs []string
	// Data is the JSON object an updated change carries; nil for the others.
	Data json.RawMessage
	// Item is, for a created change, the item as it is now (later updates
	// already applied), in the shape GET /v1/inbox lists. Nil for the others.
	Item      *InboxItem
	CreatedAt time.Time
}

// ChangePage is one page of the change log, in seq order.
type ChangePage struct {
	// Changes are the rows read, except created rows whose item no longer
	// exists (deleted by a cancel, which logged a deleted row after it, or by
	// retention): there is nothing left to show for them.
	Changes []Change
	// Last is the seq of the last row read, whether it is in Changes or was
	// left out; the next page starts after it. It is the after argument when
	// nothing was read.
	Last int64
	// More reports a full page: rows after Last may exist. A page that is not
	// full read every matching row that was committed when it ran.
	More bool
}

// DefaultChangePage is the page size of ChangesAfter and ChangesAfterFor when
// a limit of zero or less is given; MaxChangePage is the largest.
const (
	DefaultChangePage = 500
	MaxChangePage     = 5000
)

// The change-log reads. A row naming many recipients (a fan-out chunk's
// created items, recipient null) is read as one change per recipient asked
// for, with the same seq: a chunk reaches each recipient once, so seq still
// names one change of a recipient. A created change is joined with the item it
// names, within the same recipient (the recipient is the scope, not an
// optimisation); the item columns are those of the inbox page statements, in
// the same order, so scanChanges reads them like scanInboxItems does. A page's
// limit counts log rows, so a row is never split between two pages.
const (
	changesAfterSQL = `
WITH c AS (
    (SELECT c.seq, c.kind, c.item_ids, c.data, c.created_at
     FROM notify_inbox_changes c
     WHERE c.recipient = $1 AND c.seq > $2
     ORDER BY c.seq
     LIMIT $3)
    UNION ALL
    (SELECT c.seq, c.kind, ARRAY[c.item_ids[array_position(c.recipients, $1::text)]], c.data, c.created_at
     FROM notify_inbox_changes c
     WHERE c.recipient IS NULL AND c.seq > $2 AND c.recipients @> ARRAY[$1::text]
     ORDER BY c.seq
     LIMIT $3)
)
SELECT c.seq, $1::text, c.kind, c.item_ids::text[], c.data, c.created_at,
       i.id::text, i.notifier, i.key, i.category, i.reason, i.actor, i.title, i.body, i.url, i.params,
       i.created_at, i.seen_at, i.read_at, i.archived_at
FROM c
LEFT JOIN notify_inbox i ON c.kind = 'created' AND i.id = c.item_ids[1] AND i.recipient = $1::text
ORDER BY c.seq
LIMIT $3`

	// changesAfterForSQL serves a stream hub: one read per wake for every
	// recipient with a connected client. $2 is close to the head of the log,
	// so walking the primary key from $2 touches only the newest rows.
	changesAfterForSQL = `
WITH c AS (
    SELECT c.seq, c.recipient, c.recipients, c.kind, c.item_ids, c.data, c.created_at
    FROM notify_inbox_changes c
    WHERE c.seq > $2
      AND (c.recipient = ANY($1::text[]) OR (c.recipient IS NULL AND c.recipients && $1::text[]))
    ORDER BY c.seq
    LIMIT $3
), x AS (
    SELECT c.seq, c.recipient, c.kind, c.item_ids, c.data, c.created_at
    FROM c WHERE c.recipient IS NOT NULL
    UNION ALL
    SELECT c.seq, u.rid, c.kind, ARRAY[u.item], c.data, c.created_at
    FROM c, unnest(c.recipients, c.item_ids) AS u(rid, item)
    WHERE c.recipient IS NULL AND u.rid = ANY($1::text[])
)
SELECT x.seq, x.recipient, x.kind, x.item_ids::text[], x.data, x.created_at,
       i.id::text, i.notifier, i.key, i.category, i.reason, i.actor, i.title, i.body, i.url, i.params,
       i.created_at, i.seen_at, i.read_at, i.archived_at
FROM x
LEFT JOIN notify_inbox i ON x.kind = 'created' AND i.id = x.item_ids[1] AND i.recipient = x.recipient
ORDER BY x.seq, x.recipient`

	// maxChangeSeqSQL reads the newest committed seq. It is not the
	// sequence's last value: that may belong to a transaction that has not
	// committed yet, and a reader starting there would skip its row.
	maxChangeSeqSQL = `SELECT coalesce(max(seq), 0) FROM notify_inbox_changes`

	oldestChangeSeqSQL = `SELECT coalesce(min(seq), 0) FROM notify_inbox_changes`

	// deleteChangesBeforeSQL trims the log from its old end, in bounded
	// batches: of the first $2 rows in seq order, those before the first row
	// created at or after $1. What is left is always a contiguous tail, so
	// OldestChangeSeq tells how far back a stream can resume, and the read is
	// a walk of the primary key from its start (no index on created_at to
	// keep up on every write).
	deleteChangesBeforeSQL = `
WITH head AS (
    SELECT seq, created_at FROM notify_inbox_changes ORDER BY seq LIMIT $2
)
DELETE FROM notify_inbox_changes
WHERE seq IN (SELECT seq FROM head
              WHERE seq < coalesce((SELECT min(seq) FROM head WHERE created_at >= $1), 9223372036854775807))`
)

// ChangesAfter reads recipient's changes with seq > after, oldest first, at
// most limit rows (zero or less reads DefaultChangePage; more than
// MaxChangePage reads MaxChangePage). Page on with the returned Last while
// More is set.
func ChangesAfter(ctx context.Context, db DB, recipient string, after int64, limit int) (*ChangePage, error) {
	limit = changePageLimit(limit)
	rows, err := db.Query(ctx, changesAfterSQL, recipient, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read inbox changes of %s after %d: %w", recipient, after, err)
	}
	page, err := scanChanges(rows, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read inbox changes of %s after %d: %w", recipient, after, err)
	}
	return page, nil
}

// ChangesAfterFor is ChangesAfter for several recipients at once: every
// change with seq > after whose recipient is one of recipients, in seq order,
// at most limit rows. No recipients read nothing (and no database).
func ChangesAfterFor(ctx context.Context, db DB, recipients []string, after int64, limit int) (*ChangePage, error) {
	limit = changePageLimit(limit)
	if len(recipients) == 0 {
		return &ChangePage{Changes: []Change{}, Last: after}, nil
	}
	rows, err := db.Query(ctx, changesAfterForSQL, recipients, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read inbox changes of %d recipients after %d: %w", len(recipients), after, err)
	}
	page, err := scanChanges(rows, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read inbox changes of %d recipients after %d: %w", len(recipients), after, err)
	}
	return page, nil
}

func changePageLimit(limit int) int {
	if limit <= 0 {
		return DefaultChangePage
	}
	return min(limit, MaxChangePage)
}

func scanChanges(rows pgx.Rows, after int64, limit int) (*ChangePage, error) {
	defer rows.Close()
	page := &ChangePage{Changes: []Change{}, Last: after}
	n := 0 // log rows read: changes of one row share its seq
	for rows.Next() {
		var (
			c      Change
			kind   string
			itemID *string
			it     InboxItem
			// The item columns are all nullable here (LEFT JOIN).
			notifier, key, category, reason, title, body, url *string
			createdAt                                         *time.Time
		)
		if err := rows.Scan(&c.Seq, &c.Recipient, &kind, &c.ItemIDs, &c.Data, &c.CreatedAt,
			&itemID, &notifier, &key, &category, &reason, &it.Actor, &title, &body, &url, &it.Params,
			&createdAt, &it.SeenAt, &it.ReadAt, &it.ArchivedAt); err != nil {
			return nil, err
		}
		if n == 0 || c.Seq != page.Last {
			n++
		}
		page.Last = c.Seq
		c.Kind = ChangeKind(kind)
		c.CreatedAt = c.CreatedAt.UTC()
		if c.Kind == ChangeCreated {
			if itemID == nil {
				continue // the item is gone; see ChangePage.Changes
			}
			it.ID, it.Notifier, it.Key, it.Category = *itemID, *notifier, *key, *category
			it.Reason, it.Title, it.Body, it.URL = *reason, *title, *body, *url
			it.CreatedAt = createdAt.UTC()
			it.SeenAt, it.ReadAt, it.ArchivedAt = utcPtr(it.SeenAt), utcPtr(it.ReadAt), utcPtr(it.ArchivedAt)
			c.Item = &it
		}
		page.Changes = append(page.Changes, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	page.More = n == limit
	return page, nil
}

// MaxChangeSeq returns the seq of the newest committed change, or 0 when the
// log is empty. A reader that has seen everything up to it and then reads
// seq > it misses nothing.
func MaxChangeSeq(ctx context.Context, db DB) (int64, error) {
	var seq int64
	if err := db.QueryRow(ctx, maxChangeSeqSQL).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read newest inbox change: %w", err)
	}
	return seq, nil
}

// OldestChangeSeq returns the seq of the oldest change still in the log, or 0
// when the log is empty. A stream that has seen everything up to seq n can
// resume from the log only if no row after n was trimmed: n+1 >= the oldest
// seq (and, for an empty log, n = 0).
func OldestChangeSeq(ctx context.Context, db DB) (int64, error) {
	var seq int64
	if err := db.QueryRow(ctx, oldestChangeSeqSQL).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read oldest inbox change: %w", err)
	}
	return seq, nil
}

// CountInboxes returns the unread and unseen counts (as CountInbox defines
// them) of each of recipients, in one round trip. A recipient without items
// gets zero counts; duplicates are read once.
func CountInboxes(ctx context.Context, db DB, recipients []string) (map[string]InboxCounts, error) {
	out := make(map[string]InboxCounts, len(recipients))
	if len(recipients) == 0 {
		return out, nil
	}
	b := &pgx.Batch{}
	var order []string
	for _, r := range recipients {
		if _, dup := out[r]; dup {
			continue
		}
		out[r] = InboxCounts{}
		order = append(order, r)
		// The statement of GET /v1/inbox/counts, so the stream's counts
		// events and that endpoint can never disagree.
		b.Queue(countInboxSQL, r)
	}
	br := db.SendBatch(ctx, b)
	for _, r := range order {
		var c InboxCounts
		if err := br.QueryRow().Scan(&c.Unread, &c.Unseen); err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("count inbox of %s: %w", r, err)
		}
		out[r] = c
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("count inboxes: %w", err)
	}
	return out, nil
}

// DeleteChangesBefore deletes at most limit change-log rows created before
// before, oldest first, and returns how many it deleted; loop until it
// returns less than limit. A stream whose Last-Event-ID falls in the deleted
// range is told to reset. A limit of zero or less deletes nothing.
func DeleteChangesBefore(ctx context.Context, db DB, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	tag, err := db.Exec(ctx, deleteChangesBeforeSQL, before, limit)
	if err != nil {
		return 0, fmt.Errorf("delete inbox changes before %s: %w", before.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}

// InboxChangesChannel is the NOTIFY channel every change-log writer signals
// in its transaction (notifyInboxSQL) and every stream hub listens on. The
// notification carries no payload: the log is the truth, the notification
// only says "look".
const InboxChangesChannel = "notifyd_inbox"

const listenInboxChangesSQL = `LISTEN notifyd_inbox`

// ListenInboxChanges subscribes conn, a connection of its own (never a pooled
// one returned to the pool), to InboxChangesChannel.
func ListenInboxChanges(ctx context.Context, conn DB) error {
	if _, err := conn.Exec(ctx, listenInboxChangesSQL); err != nil {
		return fmt.Errorf("listen for inbox changes: %w", err)
	}
	return nil
}
