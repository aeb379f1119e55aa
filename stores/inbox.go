package stores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/notifyd/notifyd/stores/uuidv7"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// InboxItem is one in-app notification as a recipient sees it.
type InboxItem struct {
	ID         string
	Notifier   string
	Key        string
	Category   string
	Reason     string
	Actor      *string
	Title      string
	Body       string
	URL        string
	Params     json.RawMessage
	CreatedAt  time.Time
	SeenAt     *time.Time
	ReadAt     *time.Time
	ArchivedAt *time.Time
	// Tenant is the tenant of the item's notification, "" for none.
	Tenant string
}

// InboxFilter selects which of a recipient's items a page lists.
type InboxFilter string

// Inbox filters. InboxAll lists every item that is not archived; InboxUnread
// the ones neither read nor archived; InboxArchived only archived ones.
const (
	InboxAll      InboxFilter = "all"
	InboxUnread   InboxFilter = "unread"
	InboxArchived InboxFilter = "archived"
)

// Inbox page sizes.
const (
	// DefaultInboxLimit is the page size when none is asked for.
	DefaultInboxLimit = 50
	// MaxInboxLimit is the largest page ListInbox reads.
	MaxInboxLimit = 200
)

// InboxCursor is the position after the last item of a page: the item's
// created_at (microsecond precision, as stored) and id. Pages are ordered by
// created_at descending, then id ascending; the cursor is the pair of the last
// item read, and the next page starts strictly after it.
type InboxCursor struct {
	CreatedAt time.Time
	ID        string
}

// InboxPage is one page of a recipient's inbox. Next is nil on the last page.
type InboxPage struct {
	Items []InboxItem
	Next  *InboxCursor
}

// The page statements, one per filter. Order and keyset use the same total
// order, (created_at DESC, id ASC), which is the order of notify_inbox_page_idx
// (recipient, created_at DESC, id): the index is read in order and the scan
// stops after $4 rows. $2/$3 is the cursor; the first page passes 'infinity'
// and the nil uuid, which every row passes. "created_at <= $2" is the index
// condition; the OR resolves the ties at exactly $2 by id.
//
// params is read as text: it is valid JSON by construction (a jsonb column),
// and read as jsonb pgx would decode and check it again for every item of
// every page.
//
// The ORDER BY names i.id, not id: a bare "id" would be the output column
// id::text, sorted as text, which neither matches the index nor the uuid
// comparison of the keyset.
//
// The recipient condition is the scope, not an optimisation: a recipient
// token reaches only rows whose recipient is its subject.
const (
	listInboxAllSQL = `
SELECT i.id::text, i.notifier, i.key, i.category, i.reason, i.actor, i.title, i.body, i.url, i.params::text,
       i.created_at, i.seen_at, i.read_at, i.archived_at, coalesce(i.tenant, '')
FROM notify_inbox i
WHERE i.recipient = $1
  AND i.created_at <= $2 AND (i.created_at < $2 OR i.id > $3)
  AND i.archived_at IS NULL
ORDER BY i.created_at DESC, i.id ASC
LIMIT $4`

	listInboxUnreadSQL = `
SELECT i.id::text, i.notifier, i.key, i.category, i.reason, i.actor, i.title, i.body, i.url, i.params::text,
       i.created_at, i.seen_at, i.read_at, i.archived_at, coalesce(i.tenant, '')
FROM notify_inbox i
WHERE i.recipient = $1
  AND i.created_at <= $2 AND (i.created_at < $2 OR i.id > $3)
  AND i.read_at IS NULL AND i.archived_at IS NULL
ORDER BY i.created_at DESC, i.id ASC
LIMIT $4`

	listInboxArchivedSQL = `
SELECT i.id::text, i.notifier, i.key, i.category, i.reason, i.actor, i.title, i.body, i.url, i.params::text,
       i.created_at, i.seen_at, i.read_at, i.archived_at, coalesce(i.tenant, '')
FROM notify_inbox i
WHERE i.recipient = $1
  AND i.created_at <= $2 AND (i.created_at < $2 OR i.id > $3)
  AND i.archived_at IS NOT NULL
ORDER BY i.created_at DESC, i.id ASC
LIMIT $4`
)

const nilUUID = "00000000-0000-0000-0000-000000000000"

// ListInbox reads one page of recipient's inbox, newest first, starting after
// cursor (nil: the first page). limit is clamped to 1..MaxInboxLimit; zero or
// less reads DefaultInboxLimit. An unknown filter is an error. A cursor whose id
// is not a UUID is an error too; a cursor that points nowhere just reads the
// items after that position.
func ListInbox(ctx context.Context, db DB, recipient string, filter InboxFilter, after *InboxCursor, limit int) (*InboxPage, error) {
	return ListTenantInbox(ctx, db, recipient, "", filter, after, limit)
}

// tenantScoped turns a statement scoped to a recipient ($1) into one scoped
// to the recipient's items of one tenant, the parameter $n.
func tenantScoped(sql string, n int) string {
	cond := fmt.Sprintf(" AND tenant = $%d", n)
	sql = strings.ReplaceAll(sql, "WHERE i.recipient = $1\n", "WHERE i.recipient = $1 AND i.tenant = $"+strconv.Itoa(n)+"\n")
	sql = strings.ReplaceAll(sql, "WHERE recipient = $1 ", "WHERE recipient = $1"+cond+" ")
	return sql
}

// The statements of a recipient's items of one tenant (a token with a
// tenant claim, or ?tenant=), which notify_inbox_tenant_idx serves: the
// tenant is the last parameter.
var (
	listTenantInboxAllSQL      = tenantScoped(listInboxAllSQL, 5)
	listTenantInboxUnreadSQL   = tenantScoped(listInboxUnreadSQL, 5)
	listTenantInboxArchivedSQL = tenantScoped(listInboxArchivedSQL, 5)
	countTenantInboxSQL        = tenantScoped(countInboxSQL, 3)
	tenantMarks                = map[string]string{
		markReadIDsSQL:   tenantScoped(markReadIDsSQL, 5),
		markReadAllSQL:   tenantScoped(markReadAllSQL, 4),
		markUnreadIDsSQL: tenantScoped(markUnreadIDsSQL, 4),
		markSeenIDsSQL:   tenantScoped(markSeenIDsSQL, 5),
		markSeenAllSQL:   tenantScoped(markSeenAllSQL, 4),
		archiveIDsSQL:    tenantScoped(archiveIDsSQL, 5),
	}
)

// ListTenantInbox is ListInbox of recipient's items of tenant only (every
// item for "").
func ListTenantInbox(ctx context.Context, db DB, recipient, tenant string, filter InboxFilter, after *InboxCursor,
	limit int) (*InboxPage, error) {
	var sql string
	switch filter {
	case InboxAll, "":
		sql = listInboxAllSQL
	case InboxUnread:
		sql = listInboxUnreadSQL
	case InboxArchived:
		sql = listInboxArchivedSQL
	default:
		return nil, fmt.Errorf("list inbox: unknown filter %q", filter)
	}
	args := []any{recipient, nil, nil, nil}
	if tenant != "" {
		sql = map[string]string{listInboxAllSQL: listTenantInboxAllSQL, listInboxUnreadSQL: listTenantInboxUnreadSQL,
			listInboxArchivedSQL: listTenantInboxArchivedSQL}[sql]
		args = append(args, tenant)
	}
	if limit <= 0 {
		limit = DefaultInboxLimit
	}
	limit = min(limit, MaxInboxLimit)
	at := pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	afterID := nilUUID
	if after != nil {
		if !uuidv7.Valid(after.ID) {
			return nil, fmt.Errorf("list inbox: cursor id %q is not a UUID", after.ID)
		}
		at, afterID = pgtype.Timestamptz{Time: after.CreatedAt, Valid: true}, after.ID
	}
	// One row more than the page tells whether there is a next page.
	args[1], args[2], args[3] = at, afterID, limit+1
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list inbox of %s: %w", recipient, err)
	}
	items, err := scanInboxItems(rows)
	if err != nil {
		return nil, fmt.Errorf("list inbox of %s: %w", recipient, err)
	}
	page := &InboxPage{Items: items}
	if len(items) > limit {
		page.Items = items[:limit]
		last := page.Items[limit-1]
		page.Next = &InboxCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return page, nil
}

func scanInboxItems(rows pgx.Rows) ([]InboxItem, error) {
	defer rows.Close()
	items := []InboxItem{}
	for rows.Next() {
		var it InboxItem
		var params []byte
		if err := rows.Scan(&it.ID, &it.Notifier, &it.Key, &it.Category, &it.Reason, &it.Actor, &it.Title,
			&it.Body, &it.URL, &params, &it.CreatedAt, &it.SeenAt, &it.ReadAt, &it.ArchivedAt, &it.Tenant); err != nil {
			return nil, err
		}
		it.Params = params
		it.CreatedAt = it.CreatedAt.UTC()
		it.SeenAt, it.ReadAt, it.ArchivedAt = utcPtr(it.SeenAt), utcPtr(it.ReadAt), utcPtr(it.ArchivedAt)
		items = append(items, it)
	}
	return items, rows.Err()
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// InboxCounts are the badge numbers of an inbox. Archived items count in
// neither. A count is derived from the items each time it is read, never
// stored, so it cannot drift from them; it is exact up to the cap it was
// read with, and a count above the cap reads as the cap with its Capped flag
// set ("99+").
type InboxCounts struct {
	Unread int
	Unseen int
	// UnreadCapped and UnseenCapped report that the recipient has more
	// unread (unseen) items than the cap: the count is the cap.
	UnreadCapped bool
	UnseenCapped bool
}

// Inbox count caps.
const (
	// DefaultInboxCountsMax is the cap of a count when none is asked for,
	// and the cap of the stream's counts events: what a badge shows before
	// it says "99+".
	DefaultInboxCountsMax = 99
	// MaxInboxCountsMax is the largest cap CountInbox accepts.
	MaxInboxCountsMax = 10000
)

// countInboxSQL reads both counts from notify_inbox_unread_idx, (recipient,
// (seen_at IS NULL)) WHERE read_at IS NULL AND archived_at IS NULL, each
// stopping after $2 rows (the cap plus one, which tells a count at the cap
// from one above it): the unread count reads the recipient's entries, the
// unseen count only those whose second column is true. Reading an item also
// marks it seen (see markReadIDsSQL), so an unseen item is always unread and
// the one index serves both. A recipient with 100,000 unread items costs no
// more than one with a hundred.
//
// It runs on its generic plan and without bitmap scans (countsPlanSQL): a
// bitmap scan reads every entry of the recipient before the LIMIT applies,
// and PostgreSQL picks one whenever it expects many rows per recipient (a
// custom plan for a recipient known to have many unread items: 12 ms instead
// of 0.1 for 100,000 unread; the generic plan too, once the average inbox is
// large), while an index scan stops at the LIMIT.
const countInboxSQL = `
SELECT (SELECT count(*) FROM (SELECT FROM notify_inbox
                              WHERE recipient = $1 AND read_at IS NULL AND archived_at IS NULL
                              LIMIT $2) u),
       (SELECT count(*) FROM (SELECT FROM notify_inbox
                              WHERE recipient = $1 AND seen_at IS NULL AND read_at IS NULL AND archived_at IS NULL
                              LIMIT $2) s)`

// countsMax is max, or the default for zero or less, at most MaxInboxCountsMax.
func countsMax(max int) int {
	if max <= 0 {
		return DefaultInboxCountsMax
	}
	return min(max, MaxInboxCountsMax)
}

// capped turns the rows counted under a LIMIT of max+1 into counts.
func capped(unread, unseen, max int) InboxCounts {
	return InboxCounts{Unread: min(unread, max), Unseen: min(unseen, max), UnreadCapped: unread > max,
		UnseenCapped: unseen > max}
}

// CountInbox returns recipient's unread and unseen counts, each exact up to
// max and capped there (see InboxCounts). A max of zero or less reads
// DefaultInboxCountsMax; a larger one than MaxInboxCountsMax reads that.
func CountInbox(ctx context.Context, db DB, recipient string, max int) (InboxCounts, error) {
	return CountTenantInbox(ctx, db, recipient, "", max)
}

// CountTenantInbox is CountInbox of recipient's items of tenant only (every
// item for "").
func CountTenantInbox(ctx context.Context, db DB, recipient, tenant string, max int) (InboxCounts, error) {
	max = countsMax(max)
	var unread, unseen int
	b := countsBatch()
	sql, args := countInboxSQL, []any{recipient, max + 1}
	if tenant != "" {
		sql, args = countTenantInboxSQL, append(args, tenant)
	}
	b.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&unread, &unseen) })
	if err := sendCounts(ctx, db, b); err != nil {
		return InboxCounts{}, fmt.Errorf("count inbox of %s: %w", recipient, err)
	}
	return capped(unread, unseen, max), nil
}

// countsPlanSQL makes the count statements after it in the transaction (the
// implicit one of a batch, or the caller's) run on their generic plan and
// without bitmap scans: see countInboxSQL. sendCounts gives an explicit
// transaction its settings back.
const (
	countsPlanSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_bitmapscan', 'off', true)`
)

// countsBatch starts a batch of count statements (see countsPlanSQL).
func countsBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(countsPlanSQL)
	return b
}

// sendCounts sends a batch started by countsBatch, restoring the settings
// inside a transaction.
func sendCounts(ctx context.Context, db DB, b *pgx.Batch) error {
	if _, inTx := db.(pgx.Tx); inTx {
		b.Queue(`SET LOCAL plan_cache_mode TO DEFAULT`)
		b.Queue(`SET LOCAL enable_bitmapscan TO DEFAULT`)
	}
	return db.SendBatch(ctx, b).Close()
}

// InboxOp is a state change a recipient makes to their inbox items.
type InboxOp string

// Inbox operations.
const (
	// InboxOpRead sets read_at (and seen_at, if it was null) on unread items.
	InboxOpRead InboxOp = "read"
	// InboxOpUnread clears read_at; seen_at is kept.
	InboxOpUnread InboxOp = "unread"
	// InboxOpSeen sets seen_at on unseen items.
	InboxOpSeen InboxOp = "seen"
	// InboxOpArchive sets archived_at on items not yet archived.
	InboxOpArchive InboxOp = "archive"
)

// MaxInboxMarkIDs is the most item ids one MarkInbox call takes.
const MaxInboxMarkIDs = 1000

// InboxMark is one MarkInbox request.
type InboxMark struct {
	// Recipient owns the items. Ids of other recipients' items are not touched
	// (and not reported): the recipient is the scope of every statement.
	Recipient string
	Op        InboxOp
	// IDs are the items to change (UUIDs, at most MaxInboxMarkIDs). Duplicates
	// and ids that match nothing are ignored.
	IDs []string
	// All applies the change to every item it can apply to instead of IDs:
	// InboxOpRead marks every unread, unarchived item read; InboxOpSeen marks every
	// unseen, unread, unarchived item seen (the ones the unseen count counts).
	// Only InboxOpRead and InboxOpSeen accept All.
	All bool
	// At is the time written into read_at, seen_at or archived_at. Its zero
	// value is an error; it is truncated to microseconds (what PostgreSQL keeps).
	At time.Time
	// Tenant, when set, restricts the change to the recipient's items of
	// that tenant: the others are not touched (nor reported).
	Tenant string
}

// Mark statements, one per operation and target. Each changes only rows whose
// state actually changes (so a repeated call changes nothing and logs nothing),
// appends the one "updated" change-log row for them (its data, the last
// parameter, says what changed; see logInboxUpdatedSQL), and returns their
// ids, sorted. One statement, one round trip: a mark is the inbox's most
// frequent write.
const (
	// markReadIDsSQL also sets seen_at: a read item has been seen. This keeps
	// unseen a subset of unread, which is what lets countInboxSQL use the
	// partial unread index for both counts.
	markReadIDsSQL = `
WITH changed AS (
    UPDATE notify_inbox
    SET read_at = $3, seen_at = coalesce(seen_at, $3)
    WHERE recipient = $1 AND id = ANY($2::text[]::uuid[]) AND read_at IS NULL
    RETURNING id
), ids AS (
    SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids FROM changed
), logged AS (
    INSERT INTO notify_inbox_changes (recipient, kind, item_ids, data)
    SELECT $1, 'updated', ids.ids, $4::jsonb FROM ids WHERE cardinality(ids.ids) > 0
)
SELECT ids.ids::text[] FROM ids`

	markReadAllSQL = `
WITH changed AS (
    UPDATE notify_inbox
    SET read_at = $2, seen_at = coalesce(seen_at, $2)
    WHERE recipient = $1 AND read_at IS NULL AND archived_at IS NULL
    RETURNING id
), ids AS (
    SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids FROM changed
), logged AS (
    INSERT INTO notify_inbox_changes (recipient, kind, item_ids, data)
    SELECT $1, 'updated', ids.ids, $3::jsonb FROM ids WHERE cardinality(ids.ids) > 0
)
SELECT ids.ids::text[] FROM ids`

	markUnreadIDsSQL = `
WITH changed AS (
    UPDATE notify_inbox
    SET read_at = NULL
    WHERE recipient = $1 AND id = ANY($2::text[]::uuid[]) AND read_at IS NOT NULL
    RETURNING id
), ids AS (
    SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids FROM changed
), logged AS (
    INSERT INTO notify_inbox_changes (recipient, kind, item_ids, data)
    SELECT $1, 'updated', ids.ids, $3::jsonb FROM ids WHERE cardinality(ids.ids) > 0
)
SELECT ids.ids::text[] FROM ids`

	markSeenIDsSQL = `
WITH changed AS (
    UPDATE notify_inbox
    SET seen_at = $3
    WHERE recipient = $1 AND id = ANY($2::text[]::uuid[]) AND seen_at IS NULL
    RETURNING id
), ids AS (
    SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids FROM changed
), logged AS (
    INSERT INTO notify_inbox_changes (recipient, kind, item_ids, data)
    SELECT $1, 'updated', ids.ids, $4::jsonb FROM ids WHERE cardinality(ids.ids) > 0
)
SELECT ids.ids::text[] FROM ids`

	// markSeenAllSQL names read_at and archived_at so the partial unread index
	// finds the rows; unseen implies unread, and archived items count nowhere.
	markSeenAllSQL = `
WITH changed AS (
    UPDATE notify_inbox
    SET seen_at = $2
    WHERE recipient = $1 AND seen_at IS NULL AND read_at IS NULL AND archived_at IS NULL
    RETURNING id
), ids AS (
    SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids FROM changed
), logged AS (
    INSERT INTO notify_inbox_changes (recipient, kind, item_ids, data)
    SELECT $1, 'updated', ids.ids, $3::jsonb FROM ids WHERE cardinality(ids.ids) > 0
)
SELECT ids.ids::text[] FROM ids`

	archiveIDsSQL = `
WITH changed AS (
    UPDATE notify_inbox
    SET archived_at = $3
    WHERE recipient = $1 AND id = ANY($2::text[]::uuid[]) AND archived_at IS NULL
    RETURNING id
), ids AS (
    SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids FROM changed
), logged AS (
    INSERT INTO notify_inbox_changes (recipient, kind, item_ids, data)
    SELECT $1, 'updated', ids.ids, $4::jsonb FROM ids WHERE cardinality(ids.ids) > 0
)
SELECT ids.ids::text[] FROM ids`
)

// logInboxUpdatedSQL appends one "updated" change for the items one request
// changed. data says what changed ({"read_at": "..."}, {"read_at": null}).
const logInboxUpdatedSQL = `
INSERT INTO notify_inbox_changes (recipient, kind, item_ids, data)
VALUES ($1, 'updated', $2::text[]::uuid[], $3::jsonb)`

// ErrBadInboxMark is returned (wrapped) by MarkInbox for a malformed request:
// an id that is not a UUID, too many ids, All with an operation that does not
// take it, or a zero At.
var ErrBadInboxMark = errors.New("bad inbox change")

// MarkInbox applies m inside tx and returns the ids of the items that changed
// (sorted; empty when nothing did). When something changed it appends one
// "updated" row to the inbox change log, in the same statement. It takes no
// lock beyond the rows it changes: marks of different recipients never wait for each other.
// Stream hubs see the change at their next poll of the log, or at once when
// the caller wakes them after commit (WakeInboxStreams).
func MarkInbox(ctx context.Context, tx DB, m InboxMark) ([]string, error) {
	if m.At.IsZero() && m.Op != InboxOpUnread {
		return nil, fmt.Errorf("%w: no time given", ErrBadInboxMark)
	}
	at := m.At.UTC().Truncate(time.Microsecond)
	if m.All {
		if m.Op != InboxOpRead && m.Op != InboxOpSeen {
			return nil, fmt.Errorf("%w: %s does not apply to all items", ErrBadInboxMark, m.Op)
		}
	} else {
		if len(m.IDs) > MaxInboxMarkIDs {
			return nil, fmt.Errorf("%w: %d ids, at most %d", ErrBadInboxMark, len(m.IDs), MaxInboxMarkIDs)
		}
		for _, id := range m.IDs {
			if !uuidv7.Valid(id) {
				return nil, fmt.Errorf("%w: id %q is not a UUID", ErrBadInboxMark, id)
			}
		}
		if len(m.IDs) == 0 {
			return []string{}, nil
		}
	}

	var (
		sql  string
		args []any
		data map[string]any
	)
	switch {
	case m.Op == InboxOpRead && m.All:
		sql, args, data = markReadAllSQL, []any{m.Recipient, at}, map[string]any{"read_at": at}
	case m.Op == InboxOpRead:
		sql, args, data = markReadIDsSQL, []any{m.Recipient, m.IDs, at}, map[string]any{"read_at": at}
	case m.Op == InboxOpUnread:
		sql, args, data = markUnreadIDsSQL, []any{m.Recipient, m.IDs}, map[string]any{"read_at": nil}
	case m.Op == InboxOpSeen && m.All:
		sql, args, data = markSeenAllSQL, []any{m.Recipient, at}, map[string]any{"seen_at": at}
	case m.Op == InboxOpSeen:
		sql, args, data = markSeenIDsSQL, []any{m.Recipient, m.IDs, at}, map[string]any{"seen_at": at}
	case m.Op == InboxOpArchive:
		sql, args, data = archiveIDsSQL, []any{m.Recipient, m.IDs, at}, map[string]any{"archived_at": at}
	default:
		return nil, fmt.Errorf("%w: unknown operation %q", ErrBadInboxMark, m.Op)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("mark inbox of %s %s: %w", m.Recipient, m.Op, err)
	}
	args = append(args, string(raw))
	if m.Tenant != "" {
		sql, args = tenantMarks[sql], append(args, m.Tenant)
	}

	var changed []string
	if err := tx.QueryRow(ctx, sql, args...).Scan(&changed); err != nil {
		return nil, fmt.Errorf("mark inbox of %s %s: %w", m.Recipient, m.Op, err)
	}
	return changed, nil
}

// LogInboxUpdated appends one "updated" change-log row for recipient's items
// ids, with data describing the change, for a writer that changed them with a
// statement of its own (MarkInbox logs in its statements). It takes no lock and sends no
// notification (see InboxChangesChannel): call it anywhere in the
// transaction. Nothing is written for no ids.
func LogInboxUpdated(ctx context.Context, tx DB, recipient string, ids []string, data map[string]any) error {
	if len(ids) == 0 {
		return nil
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("log inbox change of %s: %w", recipient, err)
	}
	if _, err := tx.Exec(ctx, logInboxUpdatedSQL, recipient, ids, string(raw)); err != nil {
		return fmt.Errorf("log inbox change of %s: %w", recipient, err)
	}
	return nil
}
