package stores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// The operator's views of the ledger across notifications: the deliveries
// list (GET /v1/deliveries), its bulk retry, and the overview's counts.
// Every one reads notify_deliveries_channel_status_idx, (channel, status,
// updated_at, id) (sql/migrations/00027_deliveries_by_status.sql): a query
// asks for some (channel, status) pairs, and each pair is one index range
// ordered by time of last change.

// DeliveryFilter selects ledger rows across notifications. Zero fields do
// not filter.
type DeliveryFilter struct {
	// Statuses are the statuses wanted; empty means every status.
	Statuses []string
	Channel  string
	Notifier string
	// Recipient is a recipient id; bulk deliveries have none and never
	// match it.
	Recipient string
	// Tenant is a tenant id: only that tenant's deliveries match.
	Tenant string
	// Since and Until bound the time of the row's last change:
	// Since <= updated_at < Until.
	Since, Until time.Time
}

// DeliveryCursor is where a page of ListDeliveries ends: the (updated_at, id)
// of its last row, or of the last row it examined.
type DeliveryCursor struct {
	UpdatedAt time.Time
	ID        string
}

// DeliveryPage is one page of ListDeliveries. Next is nil at the end.
type DeliveryPage struct {
	Items []DeliveryDetail
	Next  *DeliveryCursor
}

// deliveriesScan bounds the rows one page examines when it filters by
// notifier or recipient (which no index serves): a filter that matches
// rarely comes back with a short page and a cursor to go on from, instead of
// reading the whole time range.
const deliveriesScan = 5000

// ledgerPairsCTE starts the views' statements: pairs are the (channel,
// status) pairs the ledger holds, in index order, found by skipping through
// notify_deliveries_channel_status_idx: each step is one descent of each
// partition's index to the next pair (a loose index scan), so it costs one
// probe per pair, not per row. wanted are those a filter asks for: statuses
// $1 (empty: all) and channel $2 (empty: all). Each statement finds its pairs
// and reads their ranges at one snapshot: a delivery that changes status in
// between is in one range or the other, never in neither.
const ledgerPairsCTE = `
WITH RECURSIVE pairs(channel, status) AS (
    (SELECT channel, status FROM notify_deliveries ORDER BY channel, status LIMIT 1)
    UNION ALL
    SELECT nx.channel, nx.status
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT d.channel, d.status FROM notify_deliveries d
        WHERE (d.channel, d.status) > (p.channel, p.status)
        ORDER BY d.channel, d.status
        LIMIT 1
    ) nx
), wanted AS (
    SELECT status, channel FROM pairs
    WHERE (cardinality($1::text[]) = 0 OR status = ANY($1::text[])) AND ($2::text = '' OR channel = $2)
)`

// listDeliveriesAcrossSQL reads one page of deliveries, newest change
// first. Each wanted (channel, status) pair is one range of the index, read
// newest first from the cursor ($5, $6), at most per.n rows: the page size
// and one ($9), or, with a notifier or recipient filter ($7, $8), which no
// index serves, a share of $10 rows. The ranges are merged by time. A range
// that returned per.n rows may hold older rows this page did not read, so the
// merge is exact only down to the newest of those ranges' last rows (bound):
// rows below it wait for the next page. The filters apply to the rows read,
// so per.n bounds the work whatever they match. The last row (id NULL)
// carries the bound.
const listDeliveriesAcrossSQL = ledgerPairsCTE + `, per AS (
    SELECT CASE WHEN $7::text = '' AND $8::text = '' AND $11::text = '' THEN $9::int
                ELSE greatest($9::int, $10::int / greatest(count(*), 1)::int) END AS n
    FROM wanted
), keys AS (
    SELECT k.*
    FROM wanted w
    CROSS JOIN LATERAL (
        SELECT d.id, d.recipient, d.channel, d.reason, d.mode, d.status, d.attempts, d.last_error, d.updated_at,
               d.provider, d.notification_id, d.notifier, d.key, d.next_attempt_at, d.settled_at, d.created_at,
               d.tenant, row_number() OVER (ORDER BY d.updated_at DESC, d.id DESC) AS rn
        FROM notify_deliveries d
        WHERE d.status = w.status AND d.channel = w.channel
          AND d.updated_at >= $3::timestamptz AND d.updated_at < $4::timestamptz
          AND (d.updated_at, d.id) < ($5::timestamptz, $6::uuid)
        ORDER BY d.updated_at DESC, d.id DESC
        LIMIT (SELECT n FROM per)
    ) k
), bound AS (
    SELECT updated_at, id FROM keys WHERE rn = (SELECT n FROM per) ORDER BY updated_at DESC, id DESC LIMIT 1
), page AS (
    SELECT keys.* FROM keys
    WHERE NOT EXISTS (SELECT 1 FROM bound b WHERE (keys.updated_at, keys.id) < (b.updated_at, b.id))
      AND ($7 = '' OR keys.notifier = $7) AND ($8 = '' OR keys.recipient = $8) AND ($11 = '' OR keys.tenant = $11)
    ORDER BY keys.updated_at DESC, keys.id DESC
    LIMIT $9
)
SELECT id::text, recipient, channel, reason, mode, status, attempts, last_error, updated_at, provider,
       notification_id::text, notifier, key, next_attempt_at, settled_at, created_at, NULL::timestamptz, NULL::text,
       tenant
FROM page
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       (SELECT updated_at FROM bound), (SELECT id::text FROM bound), NULL
ORDER BY 9 DESC NULLS LAST, 1 DESC`

// ListDeliveries reads one page of deliveries matching f, newest change
// first (ties by id), after the cursor (nil: from the newest), at most limit
// (1..200; zero reads 50). A row that changes while a client pages moves to
// the top: it may be listed twice or, having moved above the cursor, not at
// all.
func ListDeliveries(ctx context.Context, db DB, f DeliveryFilter, after *DeliveryCursor, limit int) (*DeliveryPage, error) {
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 200)
	page := &DeliveryPage{Items: []DeliveryDetail{}}
	since, until := timeBounds(f.Since, f.Until)
	curT, curID := any("infinity"), "ffffffff-ffff-ffff-ffff-ffffffffffff"
	if after != nil {
		if !uuidv7.Valid(after.ID) {
			return nil, fmt.Errorf("list deliveries: cursor id %q is not a delivery id", after.ID)
		}
		curT, curID = after.UpdatedAt, after.ID
	}
	// Each range reads one row more than the page: that row tells a page
	// that ends from one that goes on.
	rows, err := db.Query(ctx, listDeliveriesAcrossSQL, nonNil(f.Statuses), f.Channel, since, until, curT, curID,
		f.Notifier, f.Recipient, limit+1, deliveriesScan, f.Tenant)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	defer rows.Close()
	var boundT *time.Time
	var boundID *string
	for rows.Next() {
		var d DeliveryDetail
		var id, recipient, channel, reason, mode, status, nid, notifier, key, tenant *string
		var attempts *int
		var updated, created *time.Time
		if err := rows.Scan(&id, &recipient, &channel, &reason, &mode, &status, &attempts, &d.LastError, &updated,
			&d.Provider, &nid, &notifier, &key, &d.NextAttemptAt, &d.SettledAt, &created, &boundT, &boundID,
			&tenant); err != nil {
			return nil, err
		}
		if id == nil {
			continue
		}
		d.ID, d.Recipient, d.Channel, d.Reason, d.Mode, d.Status, d.Attempts = *id, recipient, *channel, *reason, *mode, *status, *attempts
		d.UpdatedAt, d.NotificationID, d.Notifier, d.Key, d.CreatedAt = *updated, *nid, *notifier, *key, *created
		if tenant != nil {
			d.Tenant = *tenant
		}
		page.Items = append(page.Items, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	switch {
	case len(page.Items) > limit:
		page.Items = page.Items[:limit]
		last := page.Items[limit-1]
		page.Next = &DeliveryCursor{UpdatedAt: last.UpdatedAt, ID: last.ID}
	case boundID != nil && boundT != nil:
		// Rows below the bound were not read: go on from the last row the
		// page examined (a short page when the filters matched few).
		page.Next = &DeliveryCursor{UpdatedAt: *boundT, ID: *boundID}
		if n := len(page.Items); n > 0 && n == limit {
			page.Next = &DeliveryCursor{UpdatedAt: page.Items[n-1].UpdatedAt, ID: page.Items[n-1].ID}
		}
	}
	return page, nil
}

// timeBounds turns zero times into unbounded ones.
func timeBounds(since, until time.Time) (any, any) {
	var s, u any = "-infinity", "infinity"
	if !since.IsZero() {
		s = since
	}
	if !until.IsZero() {
		u = until
	}
	return s, u
}

// redriveCount bounds how many matching deliveries RedriveMatching counts.
const redriveCount = 100000

// redriveMatchingSQL re-drives the deliveries matching a filter: each wanted
// (channel, status) pair is an index range over updated_at
// ($3 <= updated_at < $4), narrowed by notifier and recipient ($5, $6), and
// rows whose notification was cancelled are left alone. It counts the
// matches (at most $8) and makes at most $7 of them, oldest first within each
// pair, failed and due now ($9), skipping rows a send job holds locked. It
// returns the count and the ids, for new send jobs.
const redriveMatchingSQL = ledgerPairsCTE + `, matched AS (
    SELECT k.id
    FROM wanted w
    CROSS JOIN LATERAL (
        SELECT d.id FROM notify_deliveries d
        WHERE d.status = w.status AND d.channel = w.channel
          AND d.updated_at >= $3::timestamptz AND d.updated_at < $4::timestamptz
          AND ($5 = '' OR d.notifier = $5) AND ($6 = '' OR d.recipient = $6) AND ($10 = '' OR d.tenant = $10)
          AND NOT EXISTS (SELECT 1 FROM notify_notifications n WHERE n.id = d.notification_id AND n.status = 'cancelled')
        ORDER BY d.updated_at, d.id
        LIMIT $8
    ) k
    LIMIT $8
), pick AS (
    SELECT d.id FROM notify_deliveries d
    WHERE d.id IN (SELECT id FROM matched LIMIT $7) AND d.status = ANY($1::text[])
    FOR UPDATE SKIP LOCKED
), retried AS (
    UPDATE notify_deliveries d
    SET status = 'failed', next_attempt_at = $9, settled_at = NULL, claimed_at = NULL, updated_at = $9,
        last_error = coalesce(d.last_error, '') || ' (re-driven by an operator)'
    FROM pick
    WHERE d.id = pick.id
    RETURNING d.id::text
)
SELECT (SELECT count(*) FROM matched), coalesce((SELECT array_agg(id) FROM retried), '{}')`

// RedriveMatching re-drives the deliveries matching f whose status is one of
// RedrivableStatuses (f.Statuses must name only those; empty means all of
// them): at most limit of them become failed and due at now. It
// returns how many matched (counted up to 100,000) and the ids re-driven;
// the caller enqueues their send jobs in the same transaction. A match that
// is not re-driven was held by a send job at that moment, or is over the
// limit.
func RedriveMatching(ctx context.Context, db DB, f DeliveryFilter, now time.Time, limit int) (matched int, ids []string, err error) {
	statuses := f.Statuses
	if len(statuses) == 0 {
		statuses = RedrivableStatuses
	}
	for _, s := range statuses {
		if !slices.Contains(RedrivableStatuses, s) {
			return 0, nil, fmt.Errorf("%w: status %q cannot be re-driven (want one of %v)", ErrNotRetryable, s, RedrivableStatuses)
		}
	}
	if limit <= 0 {
		return 0, nil, fmt.Errorf("re-drive: limit %d is not positive", limit)
	}
	since, until := timeBounds(f.Since, f.Until)
	if err := db.QueryRow(ctx, redriveMatchingSQL, statuses, f.Channel, since, until, f.Notifier, f.Recipient, limit, redriveCount, now, f.Tenant).
		Scan(&matched, &ids); err != nil {
		return 0, nil, fmt.Errorf("re-drive deliveries: %w", err)
	}
	return matched, ids, nil
}

// countMatchingSQL counts what redriveMatchingSQL would re-drive: the
// matches of the same filter, at most $7.
const countMatchingSQL = ledgerPairsCTE + `
SELECT count(*)
FROM (
    SELECT 1
    FROM wanted w
    CROSS JOIN LATERAL (
        SELECT 1 FROM notify_deliveries d
        WHERE d.status = w.status AND d.channel = w.channel
          AND d.updated_at >= $3::timestamptz AND d.updated_at < $4::timestamptz
          AND ($5 = '' OR d.notifier = $5) AND ($6 = '' OR d.recipient = $6) AND ($8 = '' OR d.tenant = $8)
          AND NOT EXISTS (SELECT 1 FROM notify_notifications n WHERE n.id = d.notification_id AND n.status = 'cancelled')
        LIMIT $7
    ) k
    LIMIT $7
) x`

// CountMatching counts the deliveries RedriveMatching would re-drive for f
// (up to 100,000), changing nothing: what a bulk retry asks to confirm.
func CountMatching(ctx context.Context, db DB, f DeliveryFilter) (int, error) {
	statuses := f.Statuses
	if len(statuses) == 0 {
		statuses = RedrivableStatuses
	}
	since, until := timeBounds(f.Since, f.Until)
	var n int
	if err := db.QueryRow(ctx, countMatchingSQL, statuses, f.Channel, since, until, f.Notifier, f.Recipient, redriveCount, f.Tenant).Scan(&n); err != nil {
		return 0, fmt.Errorf("count deliveries to re-drive: %w", err)
	}
	return n, nil
}

// HourCount is how many deliveries of a channel were last changed in one
// hour into one status.
type HourCount struct {
	Hour    time.Time // the hour's start, UTC
	Channel string
	Status  string
	Count   int
}

// ledgerHoursSQL counts the rows changed since $3 per channel, status and
// hour: each (channel, status) pair the ledger holds ($1 and $2 are empty:
// every pair) is one range of the index from $3 on, read without sorting, so
// the work is the number of rows changed in the window and nothing older.
// OFFSET 0 keeps the subquery a lateral one, probed once per pair: pulled up
// into a join, the planner hashed the pairs against a sequential scan of the
// ledger.
const ledgerHoursSQL = ledgerPairsCTE + `
SELECT date_trunc('hour', d.updated_at, 'UTC'), w.channel, w.status, count(*)
FROM wanted w
CROSS JOIN LATERAL (
    SELECT d.updated_at FROM notify_deliveries d
    WHERE d.status = w.status AND d.channel = w.channel AND d.updated_at >= $3::timestamptz
    OFFSET 0
) d
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3`

// LedgerHours counts the deliveries changed since since, per hour (UTC),
// channel and the status each is in now: a delivery counts once, in the hour
// of its last change.
func LedgerHours(ctx context.Context, db DB, since time.Time) ([]HourCount, error) {
	out := []HourCount{}
	rows, err := db.Query(ctx, ledgerHoursSQL, []string{}, "", since)
	if err != nil {
		return nil, fmt.Errorf("count deliveries per hour: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var h HourCount
		if err := rows.Scan(&h.Hour, &h.Channel, &h.Status, &h.Count); err != nil {
			return nil, err
		}
		h.Hour = h.Hour.UTC()
		out = append(out, h)
	}
	return out, rows.Err()
}

// QueueDepth is how many River jobs of a queue are in one state.
type QueueDepth struct {
	Queue string
	State string
	// Count is exact up to MaxQueueCount; a deeper queue reads MaxQueueCount.
	Count int
}

// MaxQueueCount bounds each count of QueueDepths.
const MaxQueueCount = 100000

// QueueStates are the job states QueueDepths counts: waiting to run, running,
// waiting for a retry, and scheduled for later.
var QueueStates = []string{"available", "running", "retryable", "scheduled"}

// queueDepthsSQL counts river_job rows per queue and state through River's
// fetch index (state, queue, priority, scheduled_at, id), each count stopped
// at $3.
const queueDepthsSQL = `
SELECT q.queue, s.state, (SELECT count(*) FROM (SELECT 1 FROM river_job j
                                               WHERE j.state = s.state::river_job_state AND j.queue = q.queue
                                               LIMIT $3) x)
FROM unnest($1::text[]) WITH ORDINALITY AS q(queue, qi)
CROSS JOIN unnest($2::text[]) WITH ORDINALITY AS s(state, si)
ORDER BY q.qi, s.si`

// QueueDepths counts the jobs of each queue in each of QueueStates.
func QueueDepths(ctx context.Context, db DB, queues []string) ([]QueueDepth, error) {
	rows, err := db.Query(ctx, queueDepthsSQL, queues, QueueStates, MaxQueueCount)
	if err != nil {
		return nil, fmt.Errorf("count queued jobs: %w", err)
	}
	defer rows.Close()
	out := []QueueDepth{}
	for rows.Next() {
		var q QueueDepth
		if err := rows.Scan(&q.Queue, &q.State, &q.Count); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// ChannelCounts are one notification's deliveries per channel and status.
type ChannelCounts struct {
	ByStatus map[string]map[string]int
	// Truncated says the notification has more deliveries than were
	// counted (MaxCounted per notification).
	Truncated bool
}

// MaxCounted bounds the rows NotificationCounts counts per notification.
const MaxCounted = 10000

// notificationCountsSQL counts, for each notification of $1, its ledger rows
// per channel and status and its inbox items (under channel $2, as sent),
// each read through the notification's index (the ledger's identity index,
// the inbox's notification index) in the one partition its id names, at most
// $3 of each.
const notificationCountsSQL = `
SELECT n.id::text, c.channel, c.status, c.n
FROM unnest($1::text[]::uuid[]) AS n(id)
CROSS JOIN LATERAL (
    SELECT x.channel, x.status, count(*) AS n
    FROM (SELECT d.channel, d.status FROM notify_deliveries d WHERE d.notification_id = n.id LIMIT $3) x
    GROUP BY 1, 2
    UNION ALL
    SELECT $2, 'sent', count(*)
    FROM (SELECT 1 FROM notify_inbox i WHERE i.notification_id = n.id LIMIT $3) y
    HAVING count(*) > 0
) c`

// NotificationCounts counts the deliveries of each of ids per channel and
// status in one statement; inbox names the inbox channel, whose items count
// as sent. A notification without deliveries has no entry.
func NotificationCounts(ctx context.Context, db DB, ids []string, inbox string) (map[string]*ChannelCounts, error) {
	out := map[string]*ChannelCounts{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, notificationCountsSQL, ids, inbox, MaxCounted)
	if err != nil {
		return nil, fmt.Errorf("count deliveries per notification: %w", err)
	}
	defer rows.Close()
	totals := map[string]map[string]int{} // id -> source -> rows counted
	for rows.Next() {
		var id, channel, status string
		var n int
		if err := rows.Scan(&id, &channel, &status, &n); err != nil {
			return nil, err
		}
		c := out[id]
		if c == nil {
			c = &ChannelCounts{ByStatus: map[string]map[string]int{}}
			out[id] = c
			totals[id] = map[string]int{}
		}
		if c.ByStatus[channel] == nil {
			c.ByStatus[channel] = map[string]int{}
		}
		c.ByStatus[channel][status] += n
		src := "ledger"
		if channel == inbox {
			src = "inbox"
		}
		totals[id][src] += n
	}
	for id, t := range totals {
		out[id].Truncated = t["ledger"] >= MaxCounted || t["inbox"] >= MaxCounted
	}
	return out, rows.Err()
}

// DeliveryMessage is what a delivery sends: the delivery as a send claims it
// (params, actor, the recipient's profile) and, for a delivery that carries a
// batch, the batch's contents.
type DeliveryMessage struct {
	Claimed
	Status string
	// Batch is the batch the delivery carries; nil when it carries none.
	Batch *BatchContent
}

// deliveryMessageSQL reads a delivery with what its send reads (claimSQL's
// columns), without claiming it, and the batch it carries.
const deliveryMessageSQL = `
SELECT d.id::text, d.notification_id::text, d.notifier, d.key, d.recipient, d.channel, d.reason, d.mode,
       d.attempts, d.created_at, d.last_error, d.status,
       n.params, coalesce(n.actor, ''),
       coalesce(p.email, ''), coalesce(p.name, ''), coalesce(p.locale, ''), coalesce(p.timezone, ''),
       CASE WHEN p.webhook_gone_at IS NULL THEN coalesce(p.webhook_url, '') ELSE '' END,
       coalesce(p.data, '{}'), coalesce(p.phone, ''),
       b.count, b.actors, b.items,
       (SELECT jsonb_build_object('id', t.id, 'name', t.name, 'branding', t.branding)
        FROM notify_tenants t WHERE t.id = n.tenant)
FROM notify_deliveries d
JOIN notify_notifications n ON n.id = d.notification_id
LEFT JOIN notify_recipients p ON p.id = d.recipient
LEFT JOIN notify_batches b ON b.id = d.batch_id
WHERE d.id = $1`

// GetDeliveryMessage reads what delivery id sends. A malformed or unknown id
// is ErrNotFound.
func GetDeliveryMessage(ctx context.Context, db DB, id string) (*DeliveryMessage, error) {
	if !uuidv7.Valid(id) {
		return nil, ErrNotFound
	}
	var m DeliveryMessage
	var count *int
	var actors []string
	var items json.RawMessage
	err := db.QueryRow(ctx, deliveryMessageSQL, id).Scan(&m.ID, &m.NotificationID, &m.Notifier, &m.Key, &m.Recipient,
		&m.Channel, &m.Reason, &m.Mode, &m.Attempts, &m.CreatedAt, &m.LastError, &m.Status, &m.Params, &m.Actor,
		&m.Email, &m.Name, &m.Locale, &m.Timezone, &m.Webhook, &m.Data, &m.Phone, &count, &actors, &items, &m.Tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read delivery %s: %w", id, err)
	}
	if count != nil {
		m.Batch = &BatchContent{Count: *count, Actors: actors, Items: items}
	}
	return &m, nil
}
