package notifyd

import (
	"context"
	"regexp"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/stores"
)

// DefaultSubscriptionReason is the reason of a subscription given without one.
const DefaultSubscriptionReason = "subscribed"

var subscriptionReason = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidSubscriptionReason reports whether reason may be a subscription's: one
// word of letters, digits, '-', '_' or '.', at most 64 bytes ("subscribed",
// "role-default", "watching").
func ValidSubscriptionReason(reason string) bool { return subscriptionReason.MatchString(reason) }

// SubscribeTx subscribes recipient to topic inside tx, so that a subscription
// commits with the application's own write (a commenter watching the post they
// commented on). Subscribing again changes the reason. An empty reason means
// DefaultSubscriptionReason. A notification sent to the topic reaches its
// subscribers with the subscription's reason.
func (c *Client) SubscribeTx(ctx context.Context, tx pgx.Tx, topic, recipient, reason string) error {
	if err := checkText("topic", topic, 255); err != nil {
		return err
	}
	if err := checkText("recipient", recipient, 255); err != nil {
		return err
	}
	if reason == "" {
		reason = DefaultSubscriptionReason
	}
	if !ValidSubscriptionReason(reason) {
		return &InputError{Field: "reason", Message: "want one word of letters, digits, '-', '_' or '.', at most 64 bytes"}
	}
	_, err := stores.Subscribe(ctx, tx, topic, recipient, reason)
	return err
}

// UnsubscribeTx removes recipient's subscription to topic inside tx and
// reports whether there was one.
func (c *Client) UnsubscribeTx(ctx context.Context, tx pgx.Tx, topic, recipient string) (bool, error) {
	if err := checkText("topic", topic, 255); err != nil {
		return false, err
	}
	if err := checkText("recipient", recipient, 255); err != nil {
		return false, err
	}
	return stores.Unsubscribe(ctx, tx, topic, recipient)
}
