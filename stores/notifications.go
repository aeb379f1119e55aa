package stores

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// NewNotification is a notification as SendTx writes it.
type NewNotification struct {
	Notifier   string
	Key        string
	Actor      string // "" for none
	Recipients []string
	Reasons    []string // parallel to Recipients
	Topics     []string
	Params     json.RawMessage // a JSON object; nil is {}
	SendAt     time.Time       // zero: fan out now
	Tenant     string          // "" for none
}

// insertNotificationSQL writes the notification and its notify.fanout River
// job in one statement (SendTx promises at most one round trip in the
// caller's transaction), through the overload of the SQL function
// notify_send that takes the recipients as arrays: the public API an
// application role may execute (sql/functions/notify_send.sql). It checks
// what notify_send checks (the catalog, max_recipients, the params schema's
// checkable part), sorts the recipients and topics, and ends in
// notify_enqueue, the one definition of what a send writes, which the JSON
// overload applications call ends in too. The fan-out job's kind, queue,
// attempts and priority come from notify_fanout_job, which PublishCatalog
// keeps equal to the Go declaration of the job.
const insertNotificationSQL = `
SELECT id::text, duplicate
FROM notify_send($1, $2, $3::text[], $4::text[], $5::jsonb, $6::text[], $7, $8, $9)`

// InsertNotification writes n and enqueues its fan-out, in one round trip. It
// reports the id and whether (tenant, notifier, key) already existed, in
// which case nothing was written. What notify_send refuses is a *pgconn.PgError with
// SQLSTATE 22023 (see InputErrorOf).
func InsertNotification(ctx context.Context, db DB, n NewNotification) (id string, duplicate bool, err error) {
	var sendAt *time.Time
	if !n.SendAt.IsZero() {
		sendAt = &n.SendAt
	}
	var params any
	if n.Params != nil {
		params = string(n.Params)
	}
	var actor *string
	if n.Actor != "" {
		actor = &n.Actor
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
	var tenant *string
	if n.Tenant != "" {
		tenant = &n.Tenant
	}
	err = db.QueryRow(ctx, insertNotificationSQL, n.Notifier, n.Key, recipients, reasons, params, topics, actor,
		sendAt, tenant).Scan(&id, &duplicate)
	if err != nil {
		return "", false, fmt.Errorf("insert notification %s/%s: %w", n.Notifier, n.Key, err)
	}
	return id, duplicate, nil
}

// cancelSQL runs notify_cancel, installed by the migrations: the one
// definition of a cancel, which applications in other languages call too. It
// marks the notification cancelled in a statement of its own (waiting for a
// fan-out chunk that holds the row), then withdraws what has not been sent —
// deliveries not yet claimed become cancelled (digest rows digest_dropped),
// inbox items are deleted and their deletion logged — in a statement with a
// fresh snapshot that sees that chunk's rows. It returns NULL when the
// notification does not exist. Keys are per tenant: $3 is the tenant (NULL
// for none).
const cancelSQL = `SELECT notify_cancel($1, $2, $3)`

// CancelNotification cancels (notifier, key) of tenant ("" for the
// notification sent with no tenant; another tenant's notification of the
// same key is never touched). It returns ErrNotFound when no such
// notification exists, and withdrawn = 0 when it was already cancelled or
// rejected. withdrawn counts cancelled deliveries plus removed inbox items.
func CancelNotification(ctx context.Context, db DB, tenant, notifier, key string) (withdrawn int, err error) {
	var n *int
	if err := db.QueryRow(ctx, cancelSQL, notifier, key, nullIfEmpty(tenant)).Scan(&n); err != nil {
		return 0, fmt.Errorf("cancel %s/%s: %w", notifier, key, err)
	}
	if n == nil {
		return 0, ErrNotFound
	}
	return *n, nil
}

// Notification is a notification as read back, with its ledger.
type Notification struct {
	ID         string
	Notifier   string
	Key        string
	Actor      *string
	Status     string
	Error      *string
	Params     json.RawMessage
	Topics     []string
	SendAt     *time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
	Tenant     string // "" for none
	Deliveries []Delivery
}

// Delivery is one ledger row as reported by GET /v1/notifications/{id}. The
// inbox channel's record is the inbox item itself, reported with status
// "sent" (or a "skipped" row when the recipient turned the inbox off).
type Delivery struct {
	ID        string
	Recipient *string
	Channel   string
	Reason    string
	Mode      string
	Status    string
	Attempts  int
	LastError *string
	UpdatedAt time.Time
	// Provider is who answered the delivery's last attempt (the channel's
	// report); nil when the channel did not say, and for inbox items.
	Provider *string
	// NextAttemptAt is when a scheduled delivery is due (or a failed one is
	// retried); nil otherwise.
	NextAttemptAt *time.Time
	// BatchedInto is the delivery that carried a `batched` one.
	BatchedInto *string
}

const getNotificationSQL = `
SELECT id::text, notifier, key, actor, status, error, params, topics, send_at, created_at, updated_at,
       coalesce(tenant, '')
FROM notify_notifications
WHERE id = $1`

// listDeliveriesSQL reports ledger rows and the inbox items (the inbox
// channel's ledger, reported under its name, $3) in one ordered list.
const listDeliveriesSQL = `
SELECT id::text, recipient, channel, reason, mode, status, attempts, last_error, updated_at, provider,
       CASE WHEN status IN ('scheduled', 'failed', 'rate_limited') THEN next_attempt_at END, batched_into::text
FROM notify_deliveries
WHERE notification_id = $1
UNION ALL
SELECT i.id::text, i.recipient, $3, i.reason, 'immediate', 'sent', 1, NULL, i.created_at, NULL, NULL, NULL
FROM notify_inbox i
WHERE i.notification_id = $1
ORDER BY 2 NULLS FIRST, 3
LIMIT $2`

// GetNotification reads a notification with up to maxDeliveries ledger rows
// (ordered by recipient, then channel), its inbox items among them as
// deliveries of the channel named inbox. A malformed id is ErrNotFound.
func GetNotification(ctx context.Context, db DB, id string, maxDeliveries int, inbox string) (*Notification, error) {
	if !uuidv7.Valid(id) {
		return nil, ErrNotFound
	}
	var n Notification
	err := db.QueryRow(ctx, getNotificationSQL, id).Scan(&n.ID, &n.Notifier, &n.Key, &n.Actor, &n.Status,
		&n.Error, &n.Params, &n.Topics, &n.SendAt, &n.CreatedAt, &n.UpdatedAt, &n.Tenant)
	if err != nil {
		return nil, notFound(err)
	}
	rows, err := db.Query(ctx, listDeliveriesSQL, id, maxDeliveries, inbox)
	if err != nil {
		return nil, fmt.Errorf("list deliveries of %s: %w", id, err)
	}
	defer rows.Close()
	n.Deliveries = []Delivery{}
	for rows.Next() {
		var d Delivery
		if err := rows.Scan(&d.ID, &d.Recipient, &d.Channel, &d.Reason, &d.Mode, &d.Status, &d.Attempts,
			&d.LastError, &d.UpdatedAt, &d.Provider, &d.NextAttemptAt, &d.BatchedInto); err != nil {
			return nil, err
		}
		d.NextAttemptAt = utcPtr(d.NextAttemptAt)
		n.Deliveries = append(n.Deliveries, d)
	}
	return &n, rows.Err()
}

const getNotificationIDSQL = `
SELECT id::text FROM notify_notifications WHERE coalesce(tenant, '') = $1 AND notifier = $2 AND key = $3`

// NotificationID looks up the id of (notifier, key) of tenant ("" for the
// notification sent with no tenant): keys are per tenant.
func NotificationID(ctx context.Context, db DB, tenant, notifier, key string) (string, error) {
	var id string
	if err := db.QueryRow(ctx, getNotificationIDSQL, tenant, notifier, key).Scan(&id); err != nil {
		return "", notFound(err)
	}
	return id, nil
}
