package stores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/notifyd/notifyd/internal/uuidv7"
	"time"

	"github.com/jackc/pgx/v5"
)

// NewNotification is a notification as SendTx writes it.
type NewNotification struct {
	ID         string
	Notifier   string
	Key        string
	Actor      string // "" for none
	Recipients []string
	Reasons    []string // parallel to Recipients
	Topics     []string
	// InlineSorted promises that Recipients are sorted by id in byte order
	// with no id twice: the fan-out then keeps the list as written.
	InlineSorted bool
	Params       json.RawMessage // a JSON object; nil is {}
	SendAt       time.Time       // zero: fan out now
	// FanoutQueue and FanoutMaxAttempts describe the River job inserted with it.
	FanoutQueue string
}

// insertNotificationSQL writes the notification and its notify.fanout River job
// in ONE statement (SendTx promises at most one round trip in the caller's
// transaction). ON CONFLICT ... DO UPDATE with a no-op assignment returns the
// existing row even when a concurrent transaction inserted it first (DO NOTHING
// would return no row under READ COMMITTED); xmax = 0 tells a fresh insert from
// a duplicate, and only a fresh insert gets a job. The pg_notify is River's own
// insert notification, so an idle fan-out queue wakes at commit instead of at
// its next poll.
const insertNotificationSQL = `
WITH ins AS (
    INSERT INTO notify_notifications (id, notifier, key, actor, recipients, reasons, topics, params, send_at, status,
                                      inline_sorted)
    VALUES ($1, $2, $3, nullif($4, ''), $5, $6, $7, coalesce($8::jsonb, '{}'), $9,
            CASE WHEN $9::timestamptz > now() THEN 'scheduled' ELSE 'pending' END, $11)
    ON CONFLICT (notifier, key) DO UPDATE SET notifier = EXCLUDED.notifier
    RETURNING id, (xmax = 0) AS inserted
), job AS (
    INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, tags, metadata)
    SELECT jsonb_build_object('notification_id', ins.id), 'notify.fanout', 25, 1, $10,
           (CASE WHEN $9::timestamptz > now() THEN 'scheduled' ELSE 'available' END)::river_job_state,
           coalesce($9::timestamptz, now()), '{}'::varchar(255)[], '{}'::jsonb
    FROM ins
    WHERE ins.inserted
    RETURNING id
), wake AS (
    SELECT pg_notify(current_schema() || '.river_insert', json_build_object('queue', $10::text)::text)
    FROM job
    WHERE $9::timestamptz IS NULL OR $9::timestamptz <= now()
)
SELECT ins.id::text, NOT ins.inserted, (SELECT count(*) FROM wake)
FROM ins`

// InsertNotification writes n and enqueues its fan-out, in one round trip. It
// reports the id and whether (notifier, key) already existed, in which case
// nothing was written.
func InsertNotification(ctx context.Context, db DB, n NewNotification) (id string, duplicate bool, err error) {
	var sendAt *time.Time
	if !n.SendAt.IsZero() {
		sendAt = &n.SendAt
	}
	var params any
	if n.Params != nil {
		params = string(n.Params)
	}
	recipients, reasons, topics := n.Recipients, n.Reasons, n.Topics
	if recipients == nil {
		recipients = []string{}
	}
	if reasons == nil {
		reasons = []string{}
	}
	if topics == nil {
		topics = []string{}
	}
	queue := n.FanoutQueue
	if queue == "" {
		queue = "fanout"
	}
	var woke int64
	err = db.QueryRow(ctx, insertNotificationSQL, n.ID, n.Notifier, n.Key, n.Actor, recipients, reasons,
		topics, params, sendAt, queue, n.InlineSorted).Scan(&id, &duplicate, &woke)
	if err != nil {
		return "", false, fmt.Errorf("insert notification %s/%s: %w", n.Notifier, n.Key, err)
	}
	return id, duplicate, nil
}

// cancelStatusSQL marks the notification cancelled. It runs as a statement
// of its own, before the withdrawal: it waits for a fan-out chunk holding the
// row, and the next statement then takes a fresh snapshot that sees that
// chunk's rows (one statement would keep its first snapshot and miss them).
// Every later chunk sees the status and writes nothing.
const cancelStatusSQL = `
UPDATE notify_notifications
SET status = 'cancelled', updated_at = now()
WHERE notifier = $1 AND key = $2 AND status NOT IN ('cancelled', 'rejected')
RETURNING id`

// cancelWithdrawSQL withdraws what has not been sent: deliveries not yet
// claimed become cancelled (digest rows digest_dropped) and inbox items are
// deleted. A delivery already claimed (sending, digest_sending) is left to
// finish and settle truthfully.
const cancelWithdrawSQL = `
WITH d AS (
    UPDATE notify_deliveries d
    SET status = CASE WHEN d.status = 'digest_pending' THEN 'digest_dropped' ELSE 'cancelled' END,
        last_error = 'notification cancelled', settled_at = now(), updated_at = now()
    WHERE d.notification_id = $4
      AND (d.status = 'digest_pending' OR d.status <> ALL($3::text[]))
    RETURNING d.id
), i AS (
    DELETE FROM notify_inbox
    WHERE notifier = $1 AND key = $2
    RETURNING id, recipient
)
SELECT (SELECT count(*) FROM d),
       coalesce((SELECT array_agg(id::text ORDER BY recipient, id) FROM i), '{}'),
       coalesce((SELECT array_agg(recipient ORDER BY recipient, id) FROM i), '{}')`

// CancelNotification cancels (notifier, key). It returns ErrNotFound when no
// such notification exists, and withdrawn = 0 when it was already cancelled or
// rejected. withdrawn counts cancelled deliveries plus removed inbox items.
func CancelNotification(ctx context.Context, db DB, notifier, key string) (withdrawn int, err error) {
	var id string
	err = db.QueryRow(ctx, cancelStatusSQL, notifier, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := db.QueryRow(ctx, notificationExistsSQL, notifier, key).Scan(&exists); err != nil {
			return 0, fmt.Errorf("cancel %s/%s: %w", notifier, key, err)
		}
		if !exists {
			return 0, ErrNotFound
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cancel %s/%s: %w", notifier, key, err)
	}
	var d int
	var ids, recipients []string
	if err := db.QueryRow(ctx, cancelWithdrawSQL, notifier, key, protectedStatuses, id).Scan(&d, &ids, &recipients); err != nil {
		return 0, fmt.Errorf("cancel %s/%s: %w", notifier, key, err)
	}
	if err := LogInboxDeleted(ctx, db, ids, recipients); err != nil {
		return 0, fmt.Errorf("cancel %s/%s: %w", notifier, key, err)
	}
	return d + len(ids), nil
}

const notificationExistsSQL = `SELECT EXISTS (SELECT 1 FROM notify_notifications WHERE notifier = $1 AND key = $2)`

// Notification is a notification as read back, with its ledger.
type Notification struct {
	ID         string          `json:"id"`
	Notifier   string          `json:"notifier"`
	Key        string          `json:"key"`
	Actor      *string         `json:"actor"`
	Status     string          `json:"status"`
	Error      *string         `json:"error"`
	Params     json.RawMessage `json:"params"`
	Topics     []string        `json:"topics"`
	SendAt     *time.Time      `json:"send_at"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	Deliveries []Delivery      `json:"deliveries"`
}

// Delivery is one ledger row as reported by GET /v1/notifications/{id}. The
// in_app channel's record is the inbox item itself, reported with status "sent"
// (or "skipped" when the recipient turned in_app off).
type Delivery struct {
	ID        string    `json:"id"`
	Recipient *string   `json:"recipient"`
	Channel   string    `json:"channel"`
	Reason    string    `json:"reason"`
	Mode      string    `json:"mode"`
	Status    string    `json:"status"`
	Attempts  int       `json:"attempts"`
	LastError *string   `json:"last_error"`
	UpdatedAt time.Time `json:"updated_at"`
}

const getNotificationSQL = `
SELECT id::text, notifier, key, actor, status, error, params, topics, send_at, created_at, updated_at
FROM notify_notifications
WHERE id = $1`

// listDeliveriesSQL reports ledger rows and, for in_app, the inbox items (which
// are the in_app ledger) in one ordered list.
const listDeliveriesSQL = `
SELECT id::text, recipient, channel, reason, mode, status, attempts, last_error, updated_at
FROM notify_deliveries
WHERE notification_id = $1
UNION ALL
SELECT i.id::text, i.recipient, 'in_app', i.reason, 'immediate', 'sent', 1, NULL, i.created_at
FROM notify_inbox i
JOIN notify_notifications n ON n.notifier = i.notifier AND n.key = i.key
WHERE n.id = $1
ORDER BY 2 NULLS FIRST, 3
LIMIT $2`

// GetNotification reads a notification with up to maxDeliveries ledger rows
// (ordered by recipient, then channel). A malformed id is ErrNotFound.
func GetNotification(ctx context.Context, db DB, id string, maxDeliveries int) (*Notification, error) {
	if !uuidv7.Valid(id) {
		return nil, ErrNotFound
	}
	var n Notification
	err := db.QueryRow(ctx, getNotificationSQL, id).Scan(&n.ID, &n.Notifier, &n.Key, &n.Actor, &n.Status,
		&n.Error, &n.Params, &n.Topics, &n.SendAt, &n.CreatedAt, &n.UpdatedAt)
	if err != nil {
		return nil, notFound(err)
	}
	rows, err := db.Query(ctx, listDeliveriesSQL, id, maxDeliveries)
	if err != nil {
		return nil, fmt.Errorf("list deliveries of %s: %w", id, err)
	}
	defer rows.Close()
	n.Deliveries = []Delivery{}
	for rows.Next() {
		var d Delivery
		if err := rows.Scan(&d.ID, &d.Recipient, &d.Channel, &d.Reason, &d.Mode, &d.Status, &d.Attempts,
			&d.LastError, &d.UpdatedAt); err != nil {
			return nil, err
		}
		n.Deliveries = append(n.Deliveries, d)
	}
	return &n, rows.Err()
}

const getNotificationIDSQL = `SELECT id::text FROM notify_notifications WHERE notifier = $1 AND key = $2`

// NotificationID looks up the id of (notifier, key).
func NotificationID(ctx context.Context, db DB, notifier, key string) (string, error) {
	var id string
	if err := db.QueryRow(ctx, getNotificationIDSQL, notifier, key).Scan(&id); err != nil {
		return "", notFound(err)
	}
	return id, nil
}
