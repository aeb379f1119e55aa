package stores

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// PushSubscription is a browser push subscription of a recipient: the push
// service endpoint and the keys its messages are encrypted for.
type PushSubscription struct {
	ID        string
	Recipient string
	// Tenant is the tenant the subscription was registered under (a
	// recipient token's tenant claim): it receives only that tenant's
	// notifications. "" is a registration without a tenant, which receives
	// every notification of the recipient.
	Tenant        string
	Endpoint      string
	P256dh        string
	Auth          string
	CreatedAt     time.Time
	LastSuccessAt *time.Time
	Failures      int
}

// MaxPushSubscriptions is how many subscriptions a recipient may register
// (one per browser and device); PutPushSubscription refuses more.
const MaxPushSubscriptions = 50

// putPushSubscriptionSQL registers a subscription, or replaces the keys of
// the recipient's subscription with the same endpoint and tenant ($7, NULL
// for none: a browser that subscribed again) and clears its failures. A new
// one is refused (no row) when the recipient has $6 already, of any tenant.
const putPushSubscriptionSQL = `
INSERT INTO notify_push_subscriptions AS s (id, recipient, endpoint, p256dh, auth, tenant)
SELECT $1, $2, $3, $4, $5, $7
WHERE (SELECT count(*) FROM notify_push_subscriptions WHERE recipient = $2) < $6
   OR EXISTS (SELECT 1 FROM notify_push_subscriptions
              WHERE recipient = $2 AND endpoint = $3 AND coalesce(tenant, '') = coalesce($7, ''))
ON CONFLICT (recipient, endpoint, (coalesce(tenant, ''))) DO UPDATE
SET p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth, failures = 0
RETURNING s.id::text, s.id = $1::uuid`

// ErrTooManyPushSubscriptions is returned by PutPushSubscription when the
// recipient has MaxPushSubscriptions already.
var ErrTooManyPushSubscriptions = fmt.Errorf("a recipient has at most %d push subscriptions", MaxPushSubscriptions)

// PutPushSubscription registers recipient's subscription at endpoint with
// its keys under tenant ("" for none) and returns its id, and whether it is
// new (false: the endpoint was registered already under the same tenant and
// its keys were replaced). The same endpoint registered under another
// tenant, or without one, is another subscription.
func PutPushSubscription(ctx context.Context, db DB, recipient, tenant, endpoint, p256dh, auth string) (string, bool, error) {
	var id string
	var created bool
	err := db.QueryRow(ctx, putPushSubscriptionSQL, uuidv7.String(), recipient, endpoint, p256dh, auth,
		MaxPushSubscriptions, nullIfEmpty(tenant)).Scan(&id, &created)
	if err == pgx.ErrNoRows {
		return "", false, ErrTooManyPushSubscriptions
	}
	if err != nil {
		return "", false, fmt.Errorf("put push subscription of %s: %w", recipient, err)
	}
	return id, created, nil
}

const listPushSubscriptionsSQL = `
SELECT id::text, recipient, coalesce(tenant, ''), endpoint, p256dh, auth, created_at, last_success_at, failures
FROM notify_push_subscriptions
WHERE recipient = $1 AND ($2 = '' OR tenant = $2)
ORDER BY created_at, id`

// ListPushSubscriptions returns recipient's subscriptions, oldest first:
// every one for tenant "", else only those registered under tenant.
func ListPushSubscriptions(ctx context.Context, db DB, recipient, tenant string) ([]PushSubscription, error) {
	rows, err := db.Query(ctx, listPushSubscriptionsSQL, recipient, tenant)
	if err != nil {
		return nil, fmt.Errorf("list push subscriptions of %s: %w", recipient, err)
	}
	return scanPushSubscriptions(rows)
}

const listPushSubscriptionsOfSQL = `
SELECT id::text, recipient, coalesce(tenant, ''), endpoint, p256dh, auth, created_at, last_success_at, failures
FROM notify_push_subscriptions
WHERE recipient = ANY($1::text[])
ORDER BY recipient, created_at, id`

// ListPushSubscriptionsOf returns the subscriptions of each of recipients,
// each recipient's oldest first, of every tenant, in one statement (a send
// batch's, whose deliveries may be of several tenants: the channel keeps
// those a notification's tenant may reach); a recipient with none is absent
// from the map.
func ListPushSubscriptionsOf(ctx context.Context, db DB, recipients []string) (map[string][]PushSubscription, error) {
	rows, err := db.Query(ctx, listPushSubscriptionsOfSQL, recipients)
	if err != nil {
		return nil, fmt.Errorf("list push subscriptions of %d recipients: %w", len(recipients), err)
	}
	subs, err := scanPushSubscriptions(rows)
	if err != nil {
		return nil, err
	}
	return byRecipient(subs, func(s PushSubscription) string { return s.Recipient }), nil
}

func scanPushSubscriptions(rows pgx.Rows) ([]PushSubscription, error) {
	defer rows.Close()
	var out []PushSubscription
	for rows.Next() {
		var s PushSubscription
		if err := rows.Scan(&s.ID, &s.Recipient, &s.Tenant, &s.Endpoint, &s.P256dh, &s.Auth, &s.CreatedAt, &s.LastSuccessAt,
			&s.Failures); err != nil {
			return nil, err
		}
		s.CreatedAt, s.LastSuccessAt = s.CreatedAt.UTC(), utcPtr(s.LastSuccessAt)
		out = append(out, s)
	}
	return out, rows.Err()
}

const deletePushSubscriptionSQL = `
DELETE FROM notify_push_subscriptions WHERE recipient = $1 AND id = $2::uuid AND ($3 = '' OR tenant = $3)`

// DeletePushSubscription deletes recipient's subscription id; ErrNotFound
// when recipient has none with that id (id must be a UUID), or, for a
// tenant other than "", none with that id registered under tenant.
func DeletePushSubscription(ctx context.Context, db DB, recipient, tenant, id string) error {
	return deleteRegistration(ctx, db, deletePushSubscriptionSQL, "push subscription", recipient, tenant, id)
}

const (
	pushSucceededSQL = `
UPDATE notify_push_subscriptions SET last_success_at = now(), failures = 0
WHERE id = ANY($1::text[]::uuid[])`
	pushFailedSQL = `
UPDATE notify_push_subscriptions SET failures = failures + 1
WHERE id = ANY($1::text[]::uuid[])`
	pushRemoveSQL = `DELETE FROM notify_push_subscriptions WHERE id = ANY($1::text[]::uuid[])`
)

// PushSucceeded records a successful send to each subscription of ids.
func PushSucceeded(ctx context.Context, db DB, ids []string) error {
	_, err := db.Exec(ctx, pushSucceededSQL, ids)
	return err
}

// PushFailed counts a failed send against each subscription of ids.
func PushFailed(ctx context.Context, db DB, ids []string) error {
	_, err := db.Exec(ctx, pushFailedSQL, ids)
	return err
}

// RemovePushSubscriptions deletes the subscriptions of ids (their push
// service answered 404 or 410).
func RemovePushSubscriptions(ctx context.Context, db DB, ids []string) error {
	_, err := db.Exec(ctx, pushRemoveSQL, ids)
	return err
}
