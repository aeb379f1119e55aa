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

// notifySubscribeSQL and notifyUnsubscribeSQL run the SQL API's functions,
// the one door of each write: the HTTP API, the Go API (SubscribeTx,
// UnsubscribeTx) and applications calling them from SQL all subscribe and
// unsubscribe through them, so that the checks of topic, recipient and
// reason are one definition, and a role granted only notifyd_app can.
const (
	notifySubscribeSQL   = `SELECT notify_subscribe($1, $2, $3)`
	notifyUnsubscribeSQL = `SELECT notify_unsubscribe($1, $2)`
)

// getSubscriptionSQL reads one subscription back after notify_subscribe.
const getSubscriptionSQL = `
SELECT topic, recipient, reason, created_at
FROM notify_subscriptions
WHERE topic = $1 AND recipient = $2`

// Subscribe subscribes recipient to topic for reason through
// notify_subscribe (an upsert: subscribing again with another reason changes
// the reason and keeps created_at) and returns the subscription as stored,
// in one round trip and one implicit transaction. Bad input is a 22023 error
// naming the field (see InputErrorOf).
func Subscribe(ctx context.Context, db DB, topic, recipient, reason string) (*Subscription, error) {
	b := &pgx.Batch{}
	b.Queue(notifySubscribeSQL, topic, recipient, reason)
	b.Queue(getSubscriptionSQL, topic, recipient)
	br := db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("subscribe %s to %s: %w", recipient, topic, err)
	}
	var s Subscription
	if err := br.QueryRow().Scan(&s.Topic, &s.Recipient, &s.Reason, &s.CreatedAt); err != nil {
		return nil, fmt.Errorf("subscribe %s to %s: read back: %w", recipient, topic, err)
	}
	s.CreatedAt = s.CreatedAt.UTC()
	return &s, nil
}

// NotifySubscribe runs notify_subscribe: it subscribes recipient to topic for
// reason ("" is "subscribed") and reports whether the subscription is new,
// reading nothing back: what a role granted only notifyd_app, which may not
// read notify_subscriptions, can do (SubscribeTx). Bad input is a 22023 error
// naming the field (see InputErrorOf).
func NotifySubscribe(ctx context.Context, db DB, topic, recipient, reason string) (bool, error) {
	var created bool
	if err := db.QueryRow(ctx, notifySubscribeSQL, topic, recipient, reason).Scan(&created); err != nil {
		return false, fmt.Errorf("subscribe %s to %s: %w", recipient, topic, err)
	}
	return created, nil
}

// Unsubscribe runs notify_unsubscribe: it removes recipient's subscription to
// topic and reports whether there was one. Notifications already fanned out
// are not affected; one whose fan-out is running stops reaching recipient
// from its next chunk on.
func Unsubscribe(ctx context.Context, db DB, topic, recipient string) (bool, error) {
	var existed bool
	if err := db.QueryRow(ctx, notifyUnsubscribeSQL, topic, recipient).Scan(&existed); err != nil {
		return false, fmt.Errorf("unsubscribe %s from %s: %w", recipient, topic, err)
	}
	return existed, nil
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
