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
// subscribers with the subscription's reason. It runs the SQL function
// notify_subscribe, so tx's role needs no more than notifyd_app; bad input
// (an empty or over-long topic or recipient, a reason that is not one word)
// is an *InputError naming the field.
func (c *Client) SubscribeTx(ctx context.Context, tx pgx.Tx, topic, recipient, reason string) error {
	for _, f := range []struct{ name, value string }{{"topic", topic}, {"recipient", recipient}, {"reason", reason}} {
		if err := checkEncoding(f.name, f.value); err != nil {
			return err
		}
	}
	_, err := stores.NotifySubscribe(ctx, tx, topic, recipient, reason)
	return inputError(err)
}

// UnsubscribeTx removes recipient's subscription to topic inside tx and
// reports whether there was one. It runs the SQL function notify_unsubscribe.
func (c *Client) UnsubscribeTx(ctx context.Context, tx pgx.Tx, topic, recipient string) (bool, error) {
	for _, f := range []struct{ name, value string }{{"topic", topic}, {"recipient", recipient}} {
		if err := checkEncoding(f.name, f.value); err != nil {
			return false, err
		}
	}
	existed, err := stores.Unsubscribe(ctx, tx, topic, recipient)
	return existed, inputError(err)
}
