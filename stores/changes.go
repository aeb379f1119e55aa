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
// fan-out chunk created or a cancel deleted, one row for all their
// recipients), numbered by seq. Writers take no lock: a row's seq is made
// from its writer's transaction id, (xid8 << 16) | n, n counting the change
// rows the transaction wrote before it (sql/migrations/00009). So seq order is
// not commit order: a transaction that got its id first may commit last. What
// keeps a reader's single position ("everything up to seq n has been read")
// sound is the watermark: every read passes only rows below the oldest
// transaction id still running in this database, << 16
// (notify_inbox_changes_below, read in a statement before the read). Every
// transaction that could still add a row below it has ended, so a row that
// commits late always lands above a position a reader already holds, never
// below it. docs/architecture.md ("The inbox change log") has the whole
// argument and what it costs: a long transaction in the database holds the
// readers back (never loses a row) until it ends.

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
	// Data is the JSON object an updated change carries; for a deleted
	// change of one tenant's items, {"tenant": id}; nil for the others.
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
	// full read every matching row below the watermark when it ran (see
	// MaxChangeSeq): the rows after Last that will ever exist are all beyond
	// the head it saw.
	More bool
}

// DefaultChangePage is the page size of ChangesAfter and ChangesAfterFor when
// a limit of zero or less is given; MaxChangePage is the largest.
const (
	DefaultChangePage = 500
	MaxChangePage     = 5000
)

// The change-log reads. Each passes only rows below the watermark (a
// parameter, read by changeWatermarkSQL just before), plus the rows of its
// own transaction, which it sees anyway and which no other transaction can
// add to: a reader inside a writing transaction (a test's) reads what it
// wrote. The range "seq < greatest(...)" is an index condition (the
// watermark a parameter, the own transaction's start an init plan: a join
// with a CTE would not be one, and max(seq) would scan a whole index); the
// OR leaves out other transactions' rows between the watermark and the
// reader's own.
// A row naming many recipients (a fan-out chunk's created items, a cancel's
// deleted ones; recipient null) is read as one change per recipient asked
// for, with the same seq: such a row names each recipient once, so seq still
// names one change of a recipient. A created change is joined with the item
// it names, within the same recipient (the recipient is the scope, not an
// optimisation); the item columns are those of the inbox page statements, in
// the same order, so scanChanges reads them like scanInboxItems does. A page's
// limit counts log rows, so a row is never split between two pages.
const (
	changesAfterSQL = `
WITH c AS (
    (SELECT c.seq, c.kind, c.item_ids, c.data, c.created_at
     FROM notify_inbox_changes c
     WHERE c.recipient = $1 AND c.seq > $2
       AND c.seq < greatest($4::bigint, (SELECT pg_current_xact_id_if_assigned()::text::bigint << 16) + 65536) AND (c.seq < $4 OR c.seq >= (SELECT pg_current_xact_id_if_assigned()::text::bigint << 16))
     ORDER BY c.seq
     LIMIT $3)
    UNION ALL
    (SELECT c.seq, c.kind, ARRAY[c.item_ids[array_position(c.recipients, $1::text)]], c.data, c.created_at
     FROM notify_inbox_changes c
     WHERE c.recipient IS NULL AND c.seq > $2 AND c.recipients @> ARRAY[$1::text]
       AND c.seq < greatest($4::bigint, (SELECT pg_current_xact_id_if_assigned()::text::bigint << 16) + 65536) AND (c.seq < $4 OR c.seq >= (SELECT pg_current_xact_id_if_assigned()::text::bigint << 16))
     ORDER BY c.seq
     LIMIT $3)
)
SELECT c.seq, $1::text, c.kind, c.item_ids::text[], c.data, c.created_at,
       i.id::text, i.notifier, i.key, i.category, i.reason, i.actor, i.title, i.body, i.url, i.params,
       i.created_at, i.seen_at, i.read_at, i.archived_at, i.tenant
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
      AND c.seq < greatest($4::bigint, (SELECT pg_current_xact_id_if_assigned()::text::bigint << 16) + 65536) AND (c.seq < $4 OR c.seq >= (SELECT pg_current_xact_id_if_assigned()::text::bigint << 16))
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
       i.created_at, i.seen_at, i.read_at, i.archived_at, i.tenant
FROM x
LEFT JOIN notify_inbox i ON x.kind = 'created' AND i.id = x.item_ids[1] AND i.recipient = x.recipient
ORDER BY x.seq, x.recipient`

	// maxChangeSeqSQL reads the head of the log: the newest row below the
	// watermark (or of the reader's own transaction). Not the newest row:
	// one above the watermark may still get a row below it, and a reader
	// starting there would skip that.
	maxChangeSeqSQL = `
SELECT coalesce(max(c.seq), 0)
FROM notify_inbox_changes c
WHERE c.seq < greatest($1::bigint, (SELECT pg_current_xact_id_if_assigned()::text::bigint << 16) + 65536) AND (c.seq < $1 OR c.seq >= (SELECT pg_current_xact_id_if_assigned()::text::bigint << 16))`

	// changeWatermarkSQL reads the watermark as a seq
	// (sql/migrations/00009_change_log_positions.sql). It is a statement of
	// its own, before the read it bounds: a read must not start before the
	// watermark was taken.
	changeWatermarkSQL = `SELECT notify_inbox_changes_below()`

	newestChangeSeqSQL = `SELECT coalesce(max(seq), 0) FROM notify_inbox_changes`

	// changeHeadSQL is maxChangeSeqSQL and newestChangeSeqSQL in one round
	// trip.
	changeHeadSQL = `
SELECT coalesce((SELECT max(c.seq)
                 FROM notify_inbox_changes c
                 WHERE c.seq < greatest($1::bigint, (SELECT pg_current_xact_id_if_assigned()::text::bigint << 16) + 65536) AND (c.seq < $1 OR c.seq >= (SELECT pg_current_xact_id_if_assigned()::text::bigint << 16))), 0),
       coalesce((SELECT max(seq) FROM notify_inbox_changes), 0)`

	oldestChangeSeqSQL = `SELECT coalesce(min(seq), 0) FROM notify_inbox_changes`

	trimmedThroughSQL = `SELECT coalesce((SELECT through FROM notify_inbox_changes_trimmed), 0)`

	// deleteChangesBeforeSQL trims the log from its old end, in bounded
	// batches: of the first $2 rows in seq order, those before the first row
	// created at or after $1. What is left is always a contiguous tail, and
	// the same statement records the newest seq it deleted in
	// notify_inbox_changes_trimmed (TrimmedThrough), so a stream knows
	// whether it can resume. The read is a walk of the primary key from its
	// start (no index on created_at to keep up on every write).
	deleteChangesBeforeSQL = `
WITH head AS (
    SELECT seq, created_at FROM notify_inbox_changes ORDER BY seq LIMIT $2
), del AS (
    DELETE FROM notify_inbox_changes
    WHERE seq IN (SELECT seq FROM head
                  WHERE seq < coalesce((SELECT min(seq) FROM head WHERE created_at >= $1), 9223372036854775807))
    RETURNING seq
), mark AS (
    UPDATE notify_inbox_changes_trimmed SET through = greatest(through, (SELECT max(seq) FROM del))
    WHERE EXISTS (SELECT 1 FROM del)
)
SELECT count(*) FROM del`
)

// ChangesAfter reads recipient's changes with seq > after, oldest first, at
// most limit rows (zero or less reads DefaultChangePage; more than
// MaxChangePage reads MaxChangePage). Page on with the returned Last while
// More is set.
func ChangesAfter(ctx context.Context, db DB, recipient string, after int64, limit int) (*ChangePage, error) {
	limit = changePageLimit(limit)
	below, err := changeWatermark(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read inbox changes of %s after %d: %w", recipient, after, err)
	}
	rows, err := db.Query(ctx, changesAfterSQL, recipient, after, limit, below)
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
	below, err := changeWatermark(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read inbox changes of %d recipients after %d: %w", len(recipients), after, err)
	}
	rows, err := db.Query(ctx, changesAfterForSQL, recipients, after, limit, below)
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
			tenant                                            *string
		)
		if err := rows.Scan(&c.Seq, &c.Recipient, &kind, &c.ItemIDs, &c.Data, &c.CreatedAt,
			&itemID, &notifier, &key, &category, &reason, &it.Actor, &title, &body, &url, &it.Params,
			&createdAt, &it.SeenAt, &it.ReadAt, &it.ArchivedAt, &tenant); err != nil {
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
			if tenant != nil {
				it.Tenant = *tenant
			}
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

// MaxChangeSeq returns the head of the log: the seq of the newest change
// below the watermark, or 0 when there is none. Every transaction that could
// still write a row at or below the head has ended, so a reader that has seen
// everything up to it and then reads seq > it misses nothing. A change that
// committed after an older transaction that is still running is beyond the
// head until that transaction ends.
//
// Read it, like every change-log read, in READ COMMITTED (the pool, or a
// read-committed transaction); a repeatable-read transaction gets a head
// that only the transactions running when its snapshot was taken hold back.
func MaxChangeSeq(ctx context.Context, db DB) (int64, error) {
	below, err := changeWatermark(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("read the head of the inbox change log: %w", err)
	}
	var seq int64
	if err := db.QueryRow(ctx, maxChangeSeqSQL, below).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read the head of the inbox change log: %w", err)
	}
	return seq, nil
}

// changeWatermark reads the seq below which every change row that will ever
// exist is committed already (see the top of this file).
func changeWatermark(ctx context.Context, db DB) (int64, error) {
	var below int64
	if err := db.QueryRow(ctx, changeWatermarkSQL).Scan(&below); err != nil {
		return 0, err
	}
	return below, nil
}

// ChangeHead is where the change log stands for a reader.
type ChangeHead struct {
	// Seq is the head, as MaxChangeSeq returns it.
	Seq int64
	// Newest is the newest committed change, as NewestChangeSeq returns it.
	// Newest > Seq means committed changes wait for an older transaction
	// still running.
	Newest int64
}

// ReadChangeHead reads MaxChangeSeq and NewestChangeSeq together (Newest
// read at the same moment as Seq or later).
func ReadChangeHead(ctx context.Context, db DB) (ChangeHead, error) {
	below, err := changeWatermark(ctx, db)
	if err != nil {
		return ChangeHead{}, fmt.Errorf("read the head of the inbox change log: %w", err)
	}
	var h ChangeHead
	if err := db.QueryRow(ctx, changeHeadSQL, below).Scan(&h.Seq, &h.Newest); err != nil {
		return ChangeHead{}, fmt.Errorf("read the head of the inbox change log: %w", err)
	}
	return h, nil
}

// NewestChangeSeq returns the seq of the newest change in the log, committed
// but possibly beyond the head (MaxChangeSeq), or 0 when the log is empty. No
// stream position this log handed out is beyond both it and TrimmedThrough.
func NewestChangeSeq(ctx context.Context, db DB) (int64, error) {
	var seq int64
	if err := db.QueryRow(ctx, newestChangeSeqSQL).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read newest inbox change: %w", err)
	}
	return seq, nil
}

// OldestChangeSeq returns the seq of the oldest change still in the log, or 0
// when the log is empty. Seqs are not consecutive: whether a stream can
// resume is TrimmedThrough's question, not this one's.
func OldestChangeSeq(ctx context.Context, db DB) (int64, error) {
	var seq int64
	if err := db.QueryRow(ctx, oldestChangeSeqSQL).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read oldest inbox change: %w", err)
	}
	return seq, nil
}

// TrimmedThrough returns the newest seq retention has deleted from the log (0
// when it never deleted anything). A stream that has seen everything up to
// seq n can resume from the log exactly when n >= it: no change after n was
// deleted. Erasing a recipient deletes that recipient's rows without moving
// it: nobody else's stream lost anything.
func TrimmedThrough(ctx context.Context, db DB) (int64, error) {
	var seq int64
	if err := db.QueryRow(ctx, trimmedThroughSQL).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read how far the inbox change log was trimmed: %w", err)
	}
	return seq, nil
}

// CountInboxes returns the unread and unseen counts (as CountInbox defines
// them, with the default cap) of each of recipients, in one round trip. A
// recipient without items gets zero counts; duplicates are read once.
func CountInboxes(ctx context.Context, db DB, recipients []string) (map[string]InboxCounts, error) {
	out := make(map[string]InboxCounts, len(recipients))
	if len(recipients) == 0 {
		return out, nil
	}
	const max = DefaultInboxCountsMax
	b := countsBatch()
	for _, r := range recipients {
		if _, dup := out[r]; dup {
			continue
		}
		out[r] = InboxCounts{}
		// The statement of GET /v1/inbox/counts, with its default cap, so
		// the stream's counts events and that endpoint can never disagree.
		b.Queue(countInboxSQL, r, max+1).QueryRow(func(row pgx.Row) error {
			var unread, unseen int
			if err := row.Scan(&unread, &unseen); err != nil {
				return fmt.Errorf("count inbox of %s: %w", r, err)
			}
			out[r] = capped(unread, unseen, max)
			return nil
		})
	}
	if err := sendCounts(ctx, db, b); err != nil {
		return nil, fmt.Errorf("count inboxes: %w", err)
	}
	return out, nil
}

// DeleteChangesBefore deletes at most limit change-log rows created before
// before, oldest first, and returns how many it deleted; loop until it
// returns less than limit. A stream whose Last-Event-ID is before the newest
// deleted row (TrimmedThrough) is told to reset. A limit of zero or less deletes nothing.
func DeleteChangesBefore(ctx context.Context, db DB, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	if err := db.QueryRow(ctx, deleteChangesBeforeSQL, before, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("delete inbox changes before %s: %w", before.Format(time.RFC3339), err)
	}
	return n, nil
}

// InboxChangesChannel is the NOTIFY channel every stream hub listens on. A
// notification carries no payload and only says "look": the log is the
// truth. Marks and cancels do not notify in their transactions (PostgreSQL
// serialises the commits of transactions that NOTIFY); hubs poll the head of
// the log for them, and anything may send a wake after its commit with
// WakeInboxStreams. A fan-out chunk notifies in its transaction
// (LogInboxCreated).
const InboxChangesChannel = "notifyd_inbox"

const (
	listenInboxChangesSQL = `LISTEN notifyd_inbox`
	wakeInboxStreamsSQL   = `SELECT pg_notify('notifyd_inbox', '')`
)

// ListenInboxChanges subscribes conn, a connection of its own (never a pooled
// one returned to the pool), to InboxChangesChannel.
func ListenInboxChanges(ctx context.Context, conn DB) error {
	if _, err := conn.Exec(ctx, listenInboxChangesSQL); err != nil {
		return fmt.Errorf("listen for inbox changes: %w", err)
	}
	return nil
}

// WakeInboxStreams notifies InboxChangesChannel, so every replica's stream
// hub reads the log now rather than at its next poll. Call it on the pool
// after the commit of inbox changes, never inside a writer's transaction:
// there it would serialise that commit with every other notifying one. One
// call covers any number of commits before it.
func WakeInboxStreams(ctx context.Context, db DB) error {
	if _, err := db.Exec(ctx, wakeInboxStreamsSQL); err != nil {
		return fmt.Errorf("wake inbox streams: %w", err)
	}
	return nil
}

// logDeletedSQL appends one "deleted" change per recipient, for items of
// recipients that may repeat.
const logDeletedSQL = `
INSERT INTO notify_inbox_changes (recipient, kind, item_ids, data)
SELECT u.recipient, 'deleted', array_agg(u.id::uuid ORDER BY u.id),
       CASE WHEN $3::text <> '' THEN jsonb_build_object('tenant', $3::text) END
FROM unnest($1::text[], $2::text[]) AS u(id, recipient)
GROUP BY u.recipient
ORDER BY u.recipient`

// logDeletedManySQL appends "deleted" changes naming many items, each of a
// different recipient, changeRowRecipients to a row (the shape of a fan-out
// chunk's created row): a cancel of a notification to a million recipients
// writes 500 rows, well within a transaction's 65,536.
const logDeletedManySQL = `
INSERT INTO notify_inbox_changes (recipients, kind, item_ids, data)
SELECT array_agg(u.recipient ORDER BY u.ord), 'deleted', array_agg(u.id::uuid ORDER BY u.ord),
       CASE WHEN $4::text <> '' THEN jsonb_build_object('tenant', $4::text) END
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(id, recipient, ord)
GROUP BY (u.ord - 1) / $3
ORDER BY min(u.ord)`

// changeRowRecipients is the most recipients a "deleted" row names.
const changeRowRecipients = 2000

// LogInboxDeleted appends the change log's record of deleted inbox items:
// ids[i] was recipients[i]'s, every one of tenant ("" for none, or items of
// several tenants). A tenant's deletion carries {"tenant"} as its data: a
// stream confined to a tenant forwards only its tenant's deletions. Items of distinct recipients (a cancel's: one
// item per recipient) are logged in rows naming many, others in one row per
// recipient. It takes no lock and sends no notification: call it anywhere in
// the transaction. Nothing is written for no ids.
func LogInboxDeleted(ctx context.Context, tx DB, ids, recipients []string, tenant string) error {
	if len(ids) == 0 {
		return nil
	}
	var err error
	if len(ids) > 1 && distinct(recipients) {
		_, err = tx.Exec(ctx, logDeletedManySQL, ids, recipients, changeRowRecipients, tenant)
	} else {
		_, err = tx.Exec(ctx, logDeletedSQL, ids, recipients, tenant)
	}
	if err != nil {
		return fmt.Errorf("log inbox deletions: %w", err)
	}
	return nil
}
