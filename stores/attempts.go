package stores

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// Attempt is one failed attempt of a delivery, as kept in
// notify_delivery_attempts: successful sends are not recorded there (the
// delivery row says it was sent, and by which provider).
type Attempt struct {
	Attempt  int // 1-based, as counted in the delivery's attempts
	At       time.Time
	Error    string
	Provider *string // nil: the channel did not say
}

// DeliveryDetail is one ledger row with everything the console shows of it.
type DeliveryDetail struct {
	Delivery
	NotificationID string
	Notifier       string
	Key            string
	NextAttemptAt  *time.Time
	SettledAt      *time.Time
	CreatedAt      time.Time
	// Tenant is the tenant of the delivery's notification, "" for none.
	Tenant string
	// ProviderMessageID is the id the provider gave the message it
	// accepted; nil when it was not sent or the channel gives none.
	ProviderMessageID *string
	// FailedAttempts are the failed attempts, oldest first; empty when every
	// attempt so far went through (or none was made).
	FailedAttempts []Attempt
	// Events are what the provider reported after the send, oldest first;
	// empty when it reported nothing (yet).
	Events []DeliveryEvent
}

const getDeliverySQL = `
SELECT id::text, recipient, channel, reason, mode, status, attempts, last_error, updated_at, provider,
       notification_id::text, notifier, key, next_attempt_at, settled_at, created_at, coalesce(tenant, ''),
       provider_message_id
FROM notify_deliveries
WHERE id = $1`

const listAttemptsSQL = `
SELECT attempt, at, error, provider
FROM notify_delivery_attempts
WHERE delivery_id = $1
ORDER BY attempt, at
LIMIT $2`

// maxAttempts bounds the attempts GetDelivery reads: a delivery retried every
// 5 minutes for 72 hours has under 900.
const maxAttempts = 1000

// GetDelivery reads one ledger row with its failed attempts. A malformed or
// unknown id (an inbox item's id included: the inbox channel has no ledger
// row) is ErrNotFound.
func GetDelivery(ctx context.Context, db DB, id string) (*DeliveryDetail, error) {
	if !uuidv7.Valid(id) {
		return nil, ErrNotFound
	}
	var d DeliveryDetail
	b := &pgx.Batch{}
	b.Queue(getDeliverySQL, id).QueryRow(func(row pgx.Row) error {
		return row.Scan(&d.ID, &d.Recipient, &d.Channel, &d.Reason, &d.Mode, &d.Status, &d.Attempts, &d.LastError,
			&d.UpdatedAt, &d.Provider, &d.NotificationID, &d.Notifier, &d.Key, &d.NextAttemptAt, &d.SettledAt, &d.CreatedAt,
			&d.Tenant, &d.ProviderMessageID)
	})
	d.FailedAttempts = []Attempt{}
	b.Queue(listAttemptsSQL, id, maxAttempts).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var a Attempt
			if err := rows.Scan(&a.Attempt, &a.At, &a.Error, &a.Provider); err != nil {
				return err
			}
			d.FailedAttempts = append(d.FailedAttempts, a)
		}
		return rows.Err()
	})
	d.Events = []DeliveryEvent{}
	b.Queue(listDeliveryEventsSQL, id, maxEvents).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var e DeliveryEvent
			if err := rows.Scan(&e.Type, &e.At, &e.Source, &e.Detail, &e.Machine); err != nil {
				return err
			}
			d.Events = append(d.Events, e)
		}
		return rows.Err()
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("read delivery %s: %w", id, err)
	}
	return &d, nil
}

// ErrNotRetryable is RetryDelivery's answer for a delivery whose status an
// operator cannot re-drive (sent, in flight, cancelled, a digest row...).
var ErrNotRetryable = errors.New("delivery cannot be retried")

// retryDeliverySQL puts one delivery back to failed, due now, the way `notifyd
// retry` does for many: only from a re-drivable status (the sent, the
// in-flight and the cancelled are left alone) and not when its notification
// was cancelled. It skips a row a send job holds locked. The second result
// tells a refusal from a missing row.
const retryDeliverySQL = `
WITH pick AS (
    SELECT d.id FROM notify_deliveries d
    WHERE d.id = $1 AND d.status = ANY($2::text[])
      AND NOT EXISTS (SELECT 1 FROM notify_notifications n WHERE n.id = d.notification_id AND n.status = 'cancelled')
    FOR UPDATE SKIP LOCKED
), retried AS (
    UPDATE notify_deliveries d
    SET status = 'failed', next_attempt_at = $3, settled_at = NULL, claimed_at = NULL, updated_at = $3,
        last_error = coalesce(d.last_error, '') || ' (retried by an operator)'
    FROM pick
    WHERE d.id = pick.id
    RETURNING d.id
)
SELECT (SELECT count(*) FROM retried), (SELECT status FROM notify_deliveries WHERE id = $1)`

// RetryDelivery re-drives one delivery from a re-drivable status (see
// RedrivableStatuses) at now; the caller enqueues its send job in the same
// transaction. It returns ErrNotFound for an unknown id and ErrNotRetryable,
// with the current status, for one in any other status.
func RetryDelivery(ctx context.Context, db DB, id string, now time.Time) (status string, err error) {
	if !uuidv7.Valid(id) {
		return "", ErrNotFound
	}
	var n int
	var current *string
	if err := db.QueryRow(ctx, retryDeliverySQL, id, RedrivableStatuses, now).Scan(&n, &current); err != nil {
		return "", fmt.Errorf("retry delivery %s: %w", id, err)
	}
	switch {
	case current == nil:
		return "", ErrNotFound
	case n == 0:
		return *current, ErrNotRetryable
	}
	return "failed", nil
}

// NotificationFilter selects notifications for the console's list. Zero
// fields do not filter.
type NotificationFilter struct {
	Notifier  string
	Key       string
	Recipient string // inline recipient, or anyone with a delivery row or inbox item of it
	Status    string
	Tenant    string    // only this tenant's notifications
	Before    time.Time // created before
	After     time.Time // created at or after
	Cursor    string    // the previous page's NextCursor
	Limit     int       // 1..200; zero reads 50
}

// NotificationSummary is a notification in the console's list.
type NotificationSummary struct {
	ID        string
	Notifier  string
	Key       string
	Actor     *string
	Status    string
	Error     *string
	CreatedAt time.Time
	UpdatedAt time.Time
	Tenant    string // "" for none
}

// NotificationPage is one page of the list. NextCursor is "" at the end.
type NotificationPage struct {
	Items      []NotificationSummary
	NextCursor string
}

// listScan bounds the notifications one page examines, newest first: with a
// filter that matches rarely (a recipient's, a status) a page may come back
// short with a cursor to go on from, instead of reading the whole table.
const listScan = 5000

// listNotificationsSQL walks notifications newest first by primary key (ids
// are UUIDv7, so id order is creation order; the time bounds are id bounds,
// $6 and $7, and need no index), at most listScan of them past the cursor,
// then applies the recipient test to those. A recipient is found through the
// inline list, the inbox (by its unique index) or the delivery rows (by the
// identity index: coalesce(recipient, ”) is its third column, so the test is
// made on index entries, without reading the rows). $9 = 0 when the scan ran out before the
// page was full.
const listNotificationsSQL = `
WITH scan AS (
    SELECT id FROM notify_notifications
    WHERE id < $6::uuid AND id >= $7::uuid
      AND ($1 = '' OR notifier = $1) AND ($2 = '' OR key = $2) AND ($4 = '' OR status = $4)
      AND ($9 = '' OR tenant = $9)
    ORDER BY id DESC
    LIMIT $8
), hit AS (
    SELECT n.id, n.notifier, n.key, n.actor, n.status, n.error, n.created_at, n.updated_at, n.tenant
    FROM scan JOIN notify_notifications n ON n.id = scan.id
    WHERE $3 = ''
       OR n.recipients @> ARRAY[$3::text]::text[]
       OR EXISTS (SELECT 1 FROM notify_inbox i WHERE i.notification_id = n.id AND i.recipient = $3)
       OR EXISTS (SELECT 1 FROM notify_deliveries d WHERE d.notification_id = n.id AND coalesce(d.recipient, '') = $3)
    ORDER BY n.id DESC
    LIMIT $5
)
SELECT id::text, notifier, key, actor, status, error, created_at, updated_at,
       (SELECT count(*) FROM scan), (SELECT id::text FROM scan ORDER BY id LIMIT 1), tenant
FROM hit
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, (SELECT count(*) FROM scan), (SELECT id::text FROM scan ORDER BY id LIMIT 1),
       NULL
ORDER BY 1 DESC NULLS LAST`

// ListNotifications reads one page of notifications, newest first.
func ListNotifications(ctx context.Context, db DB, f NotificationFilter) (*NotificationPage, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 200)
	upper := "ffffffff-ffff-7fff-bfff-ffffffffffff"
	if !f.Before.IsZero() {
		upper = uuidv7.Floor(f.Before)
	}
	if f.Cursor != "" {
		if !uuidv7.Valid(f.Cursor) {
			return nil, fmt.Errorf("list notifications: cursor %q is not a notification id", f.Cursor)
		}
		if f.Cursor < upper {
			upper = f.Cursor
		}
	}
	lower := "00000000-0000-0000-0000-000000000000"
	if !f.After.IsZero() {
		lower = uuidv7.Floor(f.After)
	}
	rows, err := db.Query(ctx, listNotificationsSQL, f.Notifier, f.Key, f.Recipient, f.Status, limit+1, upper, lower, listScan,
		f.Tenant)
	if err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	defer rows.Close()
	page := &NotificationPage{Items: []NotificationSummary{}}
	var scanned int
	var last *string
	for rows.Next() {
		var n NotificationSummary
		var id, notifier, key, status, tenant *string
		var created, updated *time.Time
		if err := rows.Scan(&id, &notifier, &key, &n.Actor, &status, &n.Error, &created, &updated, &scanned, &last,
			&tenant); err != nil {
			return nil, err
		}
		if id == nil {
			continue
		}
		n.ID, n.Notifier, n.Key, n.Status, n.CreatedAt, n.UpdatedAt = *id, *notifier, *key, *status, *created, *updated
		if tenant != nil {
			n.Tenant = *tenant
		}
		page.Items = append(page.Items, n)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	switch {
	case len(page.Items) > limit:
		page.Items = page.Items[:limit]
		page.NextCursor = page.Items[limit-1].ID
	case scanned == listScan && last != nil:
		page.NextCursor = *last // the scan ran out, not the table: go on from there
	}
	return page, nil
}

// Progress is how far a notification's fan-out went and what its deliveries
// say, for the console.
type Progress struct {
	InlineRecipients int
	Topics           int
	// Audience counts the recipients reached so far (a ledger row or an inbox
	// item); bulk deliveries are not recipients.
	Audience   int
	LanesTotal int // fan-out lanes of a large notification; 0 for a small one
	LanesDone  int
	// ByStatus counts ledger rows per channel and status; the inbox channel's
	// items are counted under inbox as "sent".
	ByStatus map[string]map[string]int
}

const progressSQL = `
SELECT cardinality(n.recipients), cardinality(n.topics),
       (SELECT count(*) FROM (SELECT recipient FROM notify_deliveries WHERE notification_id = $1 AND recipient IS NOT NULL
                              UNION
                              SELECT recipient FROM notify_inbox i WHERE i.notification_id = $1) r),
       (SELECT count(*) FROM notify_fanout_lanes WHERE notification_id = $1),
       (SELECT count(*) FROM notify_fanout_lanes WHERE notification_id = $1 AND done),
       coalesce((SELECT jsonb_object_agg(channel || ' ' || status, c)
                 FROM (SELECT channel, status, count(*) AS c FROM notify_deliveries WHERE notification_id = $1
                       GROUP BY 1, 2
                       UNION ALL
                       SELECT $2, 'sent', count(*) FROM notify_inbox i WHERE i.notification_id = $1
                       HAVING count(*) > 0) s), '{}')
FROM notify_notifications n
WHERE n.id = $1`

// NotificationProgress reads a notification's fan-out progress; inbox names
// the inbox channel. A malformed or unknown id is ErrNotFound.
func NotificationProgress(ctx context.Context, db DB, id, inbox string) (*Progress, error) {
	if !uuidv7.Valid(id) {
		return nil, ErrNotFound
	}
	var p Progress
	var counts map[string]int
	err := db.QueryRow(ctx, progressSQL, id, inbox).Scan(&p.InlineRecipients, &p.Topics, &p.Audience,
		&p.LanesTotal, &p.LanesDone, &counts)
	if err != nil {
		return nil, notFound(err)
	}
	p.ByStatus = map[string]map[string]int{}
	for k, c := range counts {
		var channel, status string
		if _, err := fmt.Sscanf(k, "%s %s", &channel, &status); err != nil {
			continue
		}
		if p.ByStatus[channel] == nil {
			p.ByStatus[channel] = map[string]int{}
		}
		p.ByStatus[channel][status] = c
	}
	return &p, nil
}

// recentScan bounds the ledger rows RecipientDeliveries examines, newest
// first: the ledger has no index by recipient (every index costs the fan-out
// and both settles), so a recipient's recent deliveries are looked for among
// the newest rows only.
const recentScan = 20000

const recipientDeliveriesSQL = `
SELECT d.id::text, d.recipient, d.channel, d.reason, d.mode, d.status, d.attempts, d.last_error, d.updated_at, d.provider,
       d.notification_id::text, d.notifier, d.key, d.next_attempt_at, d.settled_at, d.created_at
FROM (SELECT id FROM notify_deliveries ORDER BY id DESC LIMIT $3) recent
JOIN notify_deliveries d ON d.id = recent.id
WHERE d.recipient = $1
ORDER BY d.id DESC
LIMIT $2`

// RecipientDeliveries returns up to limit of the recipient's deliveries among
// the newest ledger rows (see recentScan), newest first, without attempts.
func RecipientDeliveries(ctx context.Context, db DB, recipient string, limit int) ([]DeliveryDetail, error) {
	rows, err := db.Query(ctx, recipientDeliveriesSQL, recipient, limit, recentScan)
	if err != nil {
		return nil, fmt.Errorf("deliveries of %s: %w", recipient, err)
	}
	defer rows.Close()
	out := []DeliveryDetail{}
	for rows.Next() {
		var d DeliveryDetail
		if err := rows.Scan(&d.ID, &d.Recipient, &d.Channel, &d.Reason, &d.Mode, &d.Status, &d.Attempts, &d.LastError,
			&d.UpdatedAt, &d.Provider, &d.NotificationID, &d.Notifier, &d.Key, &d.NextAttemptAt, &d.SettledAt, &d.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
