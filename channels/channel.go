// Package channels defines how notifyd hands a rendered-at-send-time message to a
// delivery channel (email, webhook, slack, or one of your own) and how a channel
// tells the send job what to do next when it fails.
//
// A channel is a plug-in: one package per implementation, each asserting the
// interface at compile time (var _ channels.Channel = (*Sender)(nil)). The send job
// claims deliveries in the ledger, calls the channel outside any database
// transaction, and settles the ledger with the outcome the returned error names.
package channels

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/notifyd/notifyd/notifytype"
)

// Recipient is the profile of the person a per-recipient message is for. Every
// field but ID may be empty; a channel reports what it needs through Addressable.
type Recipient struct {
	ID         string         `json:"id"`
	Email      string         `json:"email,omitempty"`
	Name       string         `json:"name,omitempty"`
	Locale     string         `json:"locale,omitempty"`
	Timezone   string         `json:"timezone,omitempty"`
	WebhookURL string         `json:"webhook_url,omitempty"`
	Phone      string         `json:"phone,omitempty"` // E.164: "+14155550123"
	Data       map[string]any `json:"data,omitempty"`
	// Registrations are what the recipient registered with notifyd beyond
	// the profile, named as a Plugin's Address names them:
	// PushSubscriptionAddress when they have a browser push subscription,
	// DeviceAddress("ios") when they have an iOS device, and so on. The
	// fan-out reads them only for a notifier with a channel whose Address
	// is one; a Send sees none (a channel reads the registrations
	// themselves when it sends).
	Registrations []string `json:"-"`
}

// PushSubscriptionAddress is the Plugin.Address of a channel that sends to
// the recipient's browser push subscriptions (POST /v1/push-subscriptions):
// a recipient without one gets an `unavailable` delivery.
const PushSubscriptionAddress = "push_subscription"

// DeviceAddress returns the Plugin.Address of a channel that sends to the
// recipient's registered mobile devices of platform ("device:ios"); a
// Plugin with a Device sets it itself.
func DeviceAddress(platform string) string { return "device:" + platform }

// Address returns what a Plugin's Address names: the profile field
// "email", "webhook_url", "phone", "name", "locale" or "timezone", or, for
// a registration (PushSubscriptionAddress, DeviceAddress), its name when
// the recipient has one; "" for any other name and for a registration the
// recipient does not have.
func (r Recipient) Address(field string) string {
	switch field {
	case "email":
		return r.Email
	case "webhook_url":
		return r.WebhookURL
	case "phone":
		return r.Phone
	case "name":
		return r.Name
	case "locale":
		return r.Locale
	case "timezone":
		return r.Timezone
	}
	if IsRegistration(field) && slices.Contains(r.Registrations, field) {
		return field
	}
	return ""
}

// IsRegistration reports whether a Plugin's Address names a registration
// (PushSubscriptionAddress, DeviceAddress) rather than a profile field: the
// fan-out reads which of them a recipient has (Recipient.Registrations).
func IsRegistration(field string) bool {
	return field == PushSubscriptionAddress || strings.HasPrefix(field, "device:")
}

// MissingAddress is the reason recorded on the `unavailable` delivery of a
// recipient whose profile lacks the field a Plugin's Address names, or who
// has not registered what it names: "recipient has no email address",
// "recipient has no push subscriptions", "recipient has no ios devices".
func MissingAddress(field string) string {
	switch {
	case field == "email":
		return "recipient has no email address"
	case field == PushSubscriptionAddress:
		return "recipient has no push subscriptions"
	case strings.HasPrefix(field, "device:"):
		return "recipient has no " + strings.TrimPrefix(field, "device:") + " devices"
	}
	return "recipient has no " + field
}

// Message is one delivery handed to a channel. DeliveryID is the ledger row's id
// and the idempotency handle every outbound message carries (email Message-ID,
// webhook-id): it is stable across retries of the same delivery.
//
// For a bulk channel Recipient is nil: the message is for the whole audience.
type Message struct {
	DeliveryID     string
	NotificationID string
	Notifier       string
	Key            string
	Category       string
	Actor          string
	Reason         string
	Recipient      *Recipient
	Params         map[string]any
	CreatedAt      time.Time
	// Attempt is 1 for the first try of this delivery, 2 for the first retry, and so on.
	Attempt int
	// Tenant is the notification's tenant (its branding: the email channel
	// sends from Branding.EmailFrom when set); nil for none. Params carry
	// it too, as "Tenant", for the templates (notifytype.TemplateParams).
	Tenant *notifytype.Tenant
}

// TenantID is the id of the message's tenant, "" for none.
func (m Message) TenantID() string {
	if m.Tenant == nil {
		return ""
	}
	return m.Tenant.ID
}

// Channel delivers one message per recipient. A per-recipient Plugin's Open
// returns one.
type Channel interface {
	// Name is the channel's name in config and in the ledger ("email").
	Name() string
	// Addressable reports whether the recipient can be reached on this channel for
	// the notifier; a non-nil error is the reason recorded on an `unavailable`
	// delivery at fan-out time (for example "webhook_url is not an https URL").
	// The fan-out asks only about recipients that have the Plugin's Address.
	Addressable(notifier string, r Recipient) error
	// Send delivers msg. It is called outside any database transaction. The
	// returned error is classified with Classify: wrap it with Temporary,
	// Permanent, Gone or RateLimited to say what happens next; an unwrapped error
	// is temporary.
	Send(ctx context.Context, msg Message) error
}

// BulkChannel delivers one message for a notification's whole audience (a Slack
// channel, a notifier-level webhook). Its deliveries have no recipient.
type BulkChannel interface {
	// Name is the channel's name in config and in the ledger ("slack").
	Name() string
	// Configured reports whether the notifier has a destination on this channel.
	Configured(notifier string) bool
	// SendBulk delivers msg (msg.Recipient is nil), with the same error contract as
	// Channel.Send.
	SendBulk(ctx context.Context, msg Message) error
}

// Part is one named part of a rendered message: "subject", "text" and
// "html" of an email, "title", "body" and "url" of an inbox item.
type Part struct {
	Name, Value string
}

// Previewer is implemented by a channel that can render what it would send
// for a notifier without sending it: `notifyd preview` uses it. r is the
// recipient the message is rendered for (its locale picks email templates).
type Previewer interface {
	Preview(notifier string, params map[string]any, r Recipient) ([]Part, error)
}

// MessagePreviewer is implemented by a channel whose message is made from
// the delivery itself rather than only from templates (a webhook's body
// carries the delivery's ids and times): PreviewMessage returns what Send
// (SendBulk for a message without a recipient) would send for msg, part by
// part, without sending it. GET /v1/deliveries/{id}/preview uses it before
// Previewer.
type MessagePreviewer interface {
	PreviewMessage(msg Message) ([]Part, error)
}

// Targeter is implemented by a channel whose messages go to more than one
// destination (each webhook URL's host): Target names the destination of msg,
// so that a destination that does not answer holds up only its own messages
// (the send job gives each destination a lane, a concurrency cap and a
// circuit breaker). "" or no Targeter: the channel is one destination, or,
// for a bulk message, one per notifier.
type Targeter interface {
	Target(msg Message) string
}

// PreparedTargeter is implemented by a channel whose destinations are known
// only from what its Preparer read for the batch: web push's push services,
// named by the endpoints of the recipient's subscriptions. The send job calls
// TargetPrepared with the batch's prepared value (nil when Prepare failed,
// and then "" is the safe answer) instead of Target. The same rules apply:
// "" is the channel as one destination.
type PreparedTargeter interface {
	Preparer
	TargetPrepared(prepared any, msg Message) string
}

// URLHost is the scheme and host[:port] of a URL, lower-cased, without path
// or credentials (a destination's name shows in the ledger's last_error), for
// a Targeter; "(invalid url)" when raw does not parse.
func URLHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid url)"
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// Advisor is implemented by an opened channel that has something to tell the
// operator about its configuration beyond problems: steps outside notifyd
// that the config implies (the DNS record that publishes a DKIM key).
// `notifyd check` prints each line after the config passes.
type Advisor interface {
	Advice() []string
}

// Preparer is implemented by a per-recipient channel that reads something of
// each recipient at send time (a push channel's subscriptions). The send job
// calls Prepare once with the recipients of the batch it claimed on that
// channel, so the batch costs one read rather than one per message, and hands
// the result to each Send through its context (Prepared). A Send whose
// context carries nothing (Prepare failed, or a caller that does not
// prepare) reads for itself.
type Preparer interface {
	Prepare(ctx context.Context, recipients []string) (any, error)
}

type preparedKey struct{}

// WithPrepared returns ctx carrying what a Preparer's Prepare returned.
func WithPrepared(ctx context.Context, v any) context.Context {
	return context.WithValue(ctx, preparedKey{}, v)
}

// Prepared returns what WithPrepared put on ctx, or nil.
func Prepared(ctx context.Context) any { return ctx.Value(preparedKey{}) }
