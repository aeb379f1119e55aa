package channels

import (
	"context"
	"slices"
	"time"
)

// PushSubscription is one browser push subscription a recipient registered
// (the browser's PushSubscription: an endpoint at its push service and the
// keys the payload is encrypted for).
type PushSubscription struct {
	ID        string
	Recipient string
	// Tenant is the tenant the subscription was registered under (a
	// recipient token's tenant claim); "" for none. See
	// PushSubscriptionsFor.
	Tenant string
	// Endpoint is the push service URL messages are posted to.
	Endpoint string
	// P256dh is the browser's P-256 public key and Auth its 16-byte
	// authentication secret, both unpadded base64url as the browser gives
	// them.
	P256dh, Auth  string
	CreatedAt     time.Time
	LastSuccessAt *time.Time
	// Failures counts the failed sends since the last success.
	Failures int
}

// PushSubscriptionsFor returns the subscriptions of subs that a
// notification of tenant ("" for none) may be pushed to, in their order:
// those registered under tenant, and those registered without a tenant. An
// endpoint registered both ways is kept once, as the tenant's. A push
// channel filters what its store lists with it: a subscription made through
// a token confined to one tenant never receives another tenant's
// notifications, nor those of no tenant.
func PushSubscriptionsFor(subs []PushSubscription, tenant string) []PushSubscription {
	out := make([]PushSubscription, 0, len(subs))
	for _, s := range subs {
		if s.Tenant != "" && s.Tenant != tenant {
			continue
		}
		if i := slices.IndexFunc(out, func(o PushSubscription) bool { return o.Endpoint == s.Endpoint }); i >= 0 {
			if s.Tenant != "" {
				out[i] = s
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// PushSubscriptions is where a push channel finds a recipient's
// subscriptions at send time and records what became of them. The daemon
// provides it (Setup.PushSubscriptions); each method is one statement, never
// held open across a send.
type PushSubscriptions interface {
	// List returns the subscriptions of each of recipients, each one's
	// oldest first, in one statement; a recipient with none is absent.
	List(ctx context.Context, recipients []string) (map[string][]PushSubscription, error)
	// Succeeded records a successful send to each subscription (its last
	// success, and no failures since).
	Succeeded(ctx context.Context, ids []string) error
	// Failed counts one more failed send for each subscription.
	Failed(ctx context.Context, ids []string) error
	// Remove deletes subscriptions the push service says are gone (404, 410).
	Remove(ctx context.Context, ids []string) error
}

// PushService is implemented by an opened channel that delivers to browser
// push subscriptions: the HTTP API uses it to hand browsers the application
// server key and to check an endpoint before it is stored.
type PushService interface {
	// VAPIDPublicKey is the application server's public key, unpadded
	// base64url of the uncompressed P-256 point (the browser's
	// applicationServerKey).
	VAPIDPublicKey() string
	// CheckEndpoint returns why endpoint cannot be a push endpoint (not
	// https, or a private address the channel would refuse to post to), or
	// nil.
	CheckEndpoint(endpoint string) error
	// CheckKeys returns why a subscription's keys cannot encrypt a message
	// (p256dh not an uncompressed P-256 point, auth not 16 bytes), naming
	// the key ("p256dh" or "auth") in field, or nil.
	CheckKeys(p256dh, auth string) (field string, err error)
}

// RecipientCapper is implemented by an opened channel that caps how many
// messages one recipient may be sent in a window, whatever the notifier
// (SMS: channels.sms.max_per_recipient_per_day, against toll fraud). The
// send job admits each attempt against the cap, in the database, before it
// calls the channel; an attempt over it settles the delivery `throttled`.
type RecipientCapper interface {
	// RecipientCap returns the most messages (attempts) per recipient in any
	// window of per; a limit of 0 is no cap.
	RecipientCap() (limit int, per time.Duration)
}

// OpenOption gives the channels a Registry opens what the daemon provides
// beyond the config.
type OpenOption func(*Setup)

// WithPushSubscriptions provides the store of browser push subscriptions
// (Setup.PushSubscriptions).
func WithPushSubscriptions(s PushSubscriptions) OpenOption {
	return func(st *Setup) { st.PushSubscriptions = s }
}
