package stores

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Subscription is one recipient's subscription to a topic: a notification
// sent to the topic reaches the recipient for Reason.
type Subscription struct {
	Topic     string
	Recipient string
	Reason    string
	CreatedAt time.Time
}

// Subscription page sizes.
const (
	// DefaultSubscriptionLimit is the page size when none is asked for.
	DefaultSubscriptionLimit = 100
	// MaxSubscriptionLimit is the largest page ListSubscribers and
	// ListSubscriptions read.
	MaxSubscriptionLimit = 1000
)

// subscribeSQL creates the subscription or changes its reason. created_at is
// the time of the first subscription: changing the reason keeps it.
const subscribeSQL = `
INSERT INTO notify_subscriptions AS s (topic, recipient, reason)
VALUES ($1, $2, $3)
ON CONFLICT (topic, recipient) DO UPDATE SET reason = EXCLUDED.reason
RETURNING s.topic, s.recipient, s.reason, s.created_at`

// Subscribe subscribes recipient to topic for reason (an upsert: subscribing
// again with another reason changes the reason) and returns the subscription
// as stored. Validating the reason is the caller's.
func Subscribe(ctx context.Context, db DB, topic, recipient, reason string) (*Subscription, error) {
	var s Subscription
	err := db.QueryRow(ctx, subscribeSQL, topic, recipient, reason).Scan(&s.Topic, &s.Recipient, &s.Reason, &s.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s to %s: %w", recipient, topic, err)
	}
	s.CreatedAt = s.CreatedAt.UTC()
	return &s, nil
}

// notifySubscribeSQL and notifyUnsubscribeSQL run the SQL API's functions,
// which check the topic, recipient and reason themselves: the Go API's
// SubscribeTx and UnsubscribeTx call them, so that a role granted only
// notifyd_app can.
const (
	notifySubscribeSQL   = `SELECT notify_subscribe($1, $2, $3)`
	notifyUnsubscribeSQL = `SELECT notify_unsubscribe($1, $2)`
)

// NotifySubscribe runs notify_subscribe: it subscribes recipient to topic for
// reason ("" is "subscribed") and reports whether the subscription is new.
// Bad input is a 22023 error naming the field (see InputErrorOf).
func NotifySubscribe(ctx context.Context, db DB, topic, recipient, reason string) (bool, error) {
	var created bool
	if err := db.QueryRow(ctx, notifySubscribeSQL, topic, recipient, reason).Scan(&created); err != nil {
		return false, fmt.Errorf("subscribe %s to %s: %w", recipient, topic, err)
	}
	return created, nil
}

// NotifyUnsubscribe runs notify_unsubscribe and reports whether there was a
// subscription.
func NotifyUnsubscribe(ctx context.Context, db DB, topic, recipient string) (bool, error) {
	var existed bool
	if err := db.QueryRow(ctx, notifyUnsubscribeSQL, topic, recipient).Scan(&existed); err != nil {
		return false, fmt.Errorf("unsubscribe %s from %s: %w", recipient, topic, err)
	}
	return existed, nil
}

const unsubscribeSQL = `DELETE FROM notify_subscriptions WHERE topic = $1 AND recipient = $2`

// Unsubscribe removes recipient's subscription to topic and reports whether
// there was one. Notifications already fanned out are not affected; one whose
// fan-out is running stops reaching recipient from its next chunk on.
func Unsubscribe(ctx context.Context, db DB, topic, recipient string) (bool, error) {
	tag, err := db.Exec(ctx, unsubscribeSQL, topic, recipient)
	if err != nil {
		return false, fmt.Errorf("unsubscribe %s from %s: %w", recipient, topic, err)
	}
	return tag.RowsAffected() > 0, nil
}

// SubscriptionPage is one page of a topic's subscribers or of a recipient's
// subscriptions. Next is the key to pass as after for the following page: the
// last recipient (ListSubscribers) or topic (ListSubscriptions) of this page;
// nil on the last page.
type SubscriptionPage struct {
	Subscriptions []Subscription
	Next          *string
}

// The page statements. ListSubscribers walks the primary key (topic,
// recipient) in recipient byte order — the column is COLLATE "C", the order
// the fan-out walks too — starting strictly after $2, so a page costs an index
// range scan of $3 rows whatever the topic's size. ListSubscriptions reads one
// recipient's subscriptions (notify_subscriptions_recipient_idx) in topic byte
// order.
const (
	listSubscribersSQL = `
SELECT topic, recipient, reason, created_at
FROM notify_subscriptions
WHERE topic = $1 AND recipient > $2
ORDER BY recipient
LIMIT $3`

	listSubscriptionsSQL = `
SELECT topic, recipient, reason, created_at
FROM notify_subscriptions
WHERE recipient = $1 AND topic COLLATE "C" > $2
ORDER BY topic COLLATE "C"
LIMIT $3`
)

// ListSubscribers reads one page of topic's subscribers in recipient byte
// order, starting after the recipient after ("" for the first page). limit is
// clamped to 1..MaxSubscriptionLimit; zero or less reads
// DefaultSubscriptionLimit. Subscribers added or removed while paging are seen
// or not according to where they sort; none is read twice and none that
// stayed subscribed is skipped.
func ListSubscribers(ctx context.Context, db DB, topic, after string, limit int) (*SubscriptionPage, error) {
	page, err := listSubscriptionPage(ctx, db, listSubscribersSQL, topic, after, limit, func(s Subscription) string { return s.Recipient })
	if err != nil {
		return nil, fmt.Errorf("list subscribers of %s: %w", topic, err)
	}
	return page, nil
}

// ListSubscriptions reads one page of recipient's subscriptions in topic byte
// order, starting after the topic after ("" for the first page). limit is as
// for ListSubscribers.
func ListSubscriptions(ctx context.Context, db DB, recipient, after string, limit int) (*SubscriptionPage, error) {
	page, err := listSubscriptionPage(ctx, db, listSubscriptionsSQL, recipient, after, limit, func(s Subscription) string { return s.Topic })
	if err != nil {
		return nil, fmt.Errorf("list subscriptions of %s: %w", recipient, err)
	}
	return page, nil
}

func listSubscriptionPage(ctx context.Context, db DB, sql, key, after string, limit int, next func(Subscription) string) (*SubscriptionPage, error) {
	if limit <= 0 {
		limit = DefaultSubscriptionLimit
	}
	limit = min(limit, MaxSubscriptionLimit)
	// One row more than the page tells whether there is a next page.
	rows, err := db.Query(ctx, sql, key, after, limit+1)
	if err != nil {
		return nil, err
	}
	subs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Subscription, error) {
		var s Subscription
		err := row.Scan(&s.Topic, &s.Recipient, &s.Reason, &s.CreatedAt)
		s.CreatedAt = s.CreatedAt.UTC()
		return s, err
	})
	if err != nil {
		return nil, err
	}
	if subs == nil {
		subs = []Subscription{}
	}
	page := &SubscriptionPage{Subscriptions: subs}
	if len(subs) > limit {
		page.Subscriptions = subs[:limit]
		k := next(subs[limit-1])
		page.Next = &k
	}
	return page, nil
}
