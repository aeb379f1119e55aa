// Package notifyd is the application-facing API of notifyd, a notification
// delivery daemon for applications that keep their data in PostgreSQL.
//
// An application enqueues a Notification inside its own database transaction
// with Client.SendTx; the notification exists if and only if that transaction
// commits. The notifyd daemon (cmd/notifyd) then fans it out to recipients as
// River jobs in the same database: it writes the in-app inbox exactly once,
// sends email, webhooks and Slack messages, and records every delivery in the
// notify_deliveries ledger.
package notifyd

import (
	"time"

	"github.com/notifyd/notifyd/notifytype"
)

// Notification is one occurrence of a notifier ("user 42 commented on post 9").
// Its identity is (Notifier, Key): sending the same pair again, at any later
// time, is the same notification and is reported as a duplicate.
type Notification struct {
	// Notifier names a notifier declared in config ("comment.created"). Required.
	Notifier string
	// Key identifies the occurrence within the notifier ("comment-123"). Required,
	// at most 255 bytes.
	Key string
	// Actor is the recipient id of whoever caused the notification. The actor is
	// dropped from the audience unless the notifier sets notify_actor: true.
	// Empty means no actor.
	Actor string
	// Recipients are addressed directly. A recipient listed several times (or also
	// reached through a topic) is notified once, for the strongest reason.
	Recipients []Recipient
	// Topics reach every subscriber of each topic, with the subscription's reason.
	Topics []string
	// Params are the template parameters, validated against the notifier's JSON
	// Schema. They must be JSON-encodable; nil is an empty object.
	Params map[string]any
	// SendAt schedules the fan-out. The zero value fans out at once.
	SendAt time.Time
	// Tenant names the tenant the notification is sent for (PUT
	// /v1/tenants/{id} creates one): its inbox items and deliveries carry
	// it, its templates see the tenant's branding and its recipients'
	// preferences resolve with the tenant's layers. A tenant that does not
	// exist is an *InputError for the field "tenant". Empty means none.
	Tenant string
}

// Recipient addresses one recipient of a notification.
type Recipient struct {
	// ID is the application's id for the recipient: 1 to 255 bytes.
	ID string
	// Reason says why they get the notification ("author", "mentioned"). Empty
	// means DefaultReason.
	Reason string
}

// DefaultReason is the reason of an inline recipient given without one.
const DefaultReason = "direct"

// SendResult is what SendTx reports.
type SendResult struct {
	// ID is the notification's id (a UUIDv7), the same for every send of the
	// same (notifier, key).
	ID string
	// Duplicate is true when (notifier, key) already existed; nothing new was
	// enqueued.
	Duplicate bool
}

// Mode is a recipient's resolved posture for a channel.
type Mode = notifytype.Mode

// Modes. A channel that cannot digest (every built-in one but email) reads
// ModeDigest as ModeImmediate.
const (
	ModeImmediate = notifytype.ModeImmediate
	ModeDigest    = notifytype.ModeDigest
	ModeOff       = notifytype.ModeOff
)

// NotificationStatus is the lifecycle state of a notification.
type NotificationStatus = notifytype.NotificationStatus

// Notification statuses.
const (
	NotificationScheduled = notifytype.NotificationScheduled // send_at in the future
	NotificationPending   = notifytype.NotificationPending   // waiting for or in fan-out
	NotificationFannedOut = notifytype.NotificationFannedOut
	NotificationCancelled = notifytype.NotificationCancelled
	NotificationRejected  = notifytype.NotificationRejected // invalid at fan-out; error says why
)

// DeliveryStatus is the state of one row of the delivery ledger.
type DeliveryStatus = notifytype.DeliveryStatus

// Delivery statuses (see notifytype for what each means). A status this
// version does not know, read back from the database, is treated as not sent:
// it never suppresses a send.
const (
	StatusPending       = notifytype.StatusPending
	StatusSending       = notifytype.StatusSending
	StatusFailed        = notifytype.StatusFailed
	StatusRateLimited   = notifytype.StatusRateLimited
	StatusSent          = notifytype.StatusSent
	StatusRefused       = notifytype.StatusRefused
	StatusExpired       = notifytype.StatusExpired
	StatusUnavailable   = notifytype.StatusUnavailable
	StatusSkipped       = notifytype.StatusSkipped
	StatusCancelled     = notifytype.StatusCancelled
	StatusDigestPending = notifytype.StatusDigestPending
	StatusDigestSending = notifytype.StatusDigestSending
	StatusDigestSent    = notifytype.StatusDigestSent
	StatusDigestFailed  = notifytype.StatusDigestFailed
	StatusDigestDropped = notifytype.StatusDigestDropped
	StatusScheduled     = notifytype.StatusScheduled
	StatusBatched       = notifytype.StatusBatched
	StatusThrottled     = notifytype.StatusThrottled
	StatusSuppressed    = notifytype.StatusSuppressed
	StatusDelivered     = notifytype.StatusDelivered
	StatusBounced       = notifytype.StatusBounced
	StatusComplained    = notifytype.StatusComplained
)

// Rule is one preference rule of a recipient: Scope "*", "category:<c>" or
// "notifier:<n>", Channel "*" or a registered per-recipient channel, Mode
// immediate, digest or off. The most specific scope wins (notifier > category
// > *), then the most specific channel.
type Rule = notifytype.Rule
