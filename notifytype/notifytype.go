// Package notifytype holds the words every part of notifyd shares: the modes a
// recipient can choose for a channel, the statuses of notifications and of
// delivery-ledger rows, and preference rules. It imports nothing of notifyd,
// the way River's rivertype serves River: the public API (package notifyd),
// the channel plug-ins and the engine (package jobs) all speak it, so none of
// them has to import another to agree on a status.
package notifytype

// Mode is a recipient's resolved posture for a channel.
type Mode string

// Modes. A channel that cannot digest reads ModeDigest as ModeImmediate.
const (
	ModeImmediate Mode = "immediate"
	ModeDigest    Mode = "digest"
	ModeOff       Mode = "off"
)

// NotificationStatus is the lifecycle state of a notification.
type NotificationStatus string

// Notification statuses.
const (
	NotificationScheduled NotificationStatus = "scheduled" // send_at in the future
	NotificationPending   NotificationStatus = "pending"   // waiting for or in fan-out
	NotificationFannedOut NotificationStatus = "fanned_out"
	NotificationCancelled NotificationStatus = "cancelled"
	NotificationRejected  NotificationStatus = "rejected" // invalid at fan-out; error says why
)

// DeliveryStatus is the state of one row of the delivery ledger.
type DeliveryStatus string

// Delivery statuses. Pending, Sending, Failed, RateLimited and DigestPending are
// on the way; the rest are terminal. A status this version does not know, read
// back from the database, is treated as not sent: it never suppresses a send.
const (
	StatusPending       DeliveryStatus = "pending"
	StatusSending       DeliveryStatus = "sending" // claimed by a send job
	StatusFailed        DeliveryStatus = "failed"  // a temporary failure; a retry is scheduled
	StatusRateLimited   DeliveryStatus = "rate_limited"
	StatusSent          DeliveryStatus = "sent"
	StatusRefused       DeliveryStatus = "refused"     // permanent failure
	StatusExpired       DeliveryStatus = "expired"     // retried past retry.max_age
	StatusUnavailable   DeliveryStatus = "unavailable" // channel not configured or no address
	StatusSkipped       DeliveryStatus = "skipped"     // preference off or muted
	StatusCancelled     DeliveryStatus = "cancelled"
	StatusDigestPending DeliveryStatus = "digest_pending"
	StatusDigestSending DeliveryStatus = "digest_sending" // claimed by a digest job
	StatusDigestSent    DeliveryStatus = "digest_sent"
	StatusDigestFailed  DeliveryStatus = "digest_failed"
	StatusDigestDropped DeliveryStatus = "digest_dropped"
	// Workflows and deliverability.
	StatusScheduled  DeliveryStatus = "scheduled"  // waiting for a delay or quiet hours to end (next_attempt_at)
	StatusBatched    DeliveryStatus = "batched"    // carried by another delivery of its batch
	StatusThrottled  DeliveryStatus = "throttled"  // over the notifier channel's throttle limit
	StatusSuppressed DeliveryStatus = "suppressed" // the address is on the suppression list
	// Sent, then reported by the provider (POST /v1/providers/{kind}/events):
	// a delivery moves on from sent to one of these, and never back; a
	// complaint outranks a bounce, which outranks a delivery.
	StatusDelivered  DeliveryStatus = "delivered"  // the receiving server accepted it
	StatusBounced    DeliveryStatus = "bounced"    // the receiving server refused it after it was sent
	StatusComplained DeliveryStatus = "complained" // the recipient marked it as spam
)

// Terminal reports whether s is a final status. Unknown statuses are not terminal.
func (s DeliveryStatus) Terminal() bool {
	switch s {
	case StatusSent, StatusRefused, StatusExpired, StatusUnavailable, StatusSkipped,
		StatusCancelled, StatusDigestSent, StatusDigestFailed, StatusDigestDropped,
		StatusBatched, StatusThrottled, StatusSuppressed, StatusDelivered, StatusBounced, StatusComplained:
		return true
	}
	return false
}

// Rule is one preference rule of a recipient.
//
// Scope is "*", "category:<c>" or "notifier:<n>"; Channel is "*" or the name of
// a registered per-recipient channel; Mode is immediate, digest or off. The
// most specific scope wins (notifier > category > *), then the most specific
// channel. Whether a rule is valid depends on the channels a daemon has
// registered: channels.Registry.ValidateRule checks it.
type Rule struct {
	Scope   string `json:"scope"`
	Channel string `json:"channel"`
	Mode    Mode   `json:"mode"`
	// Tenant scopes the rule to the notifications of one tenant: such a rule
	// beats every rule without a tenant (the recipient's global rules), which
	// beat the tenant's default rules, which beat the notifier's default.
	// Empty: a global rule. A tenant's own default rules have no Tenant.
	Tenant string `json:"tenant,omitempty"`
}

// Tenant is a tenant as templates see it (.Tenant): its id, name and
// branding. A notification without a tenant renders with a nil .Tenant.
type Tenant struct {
	ID       string
	Name     string
	Branding Branding
}

// TenantKey is the key of params under which templates find the tenant
// (.Tenant): a Tenant value, the zero Tenant for a notification without
// one, so that {{.Tenant.Name}} renders "" rather than failing.
const TenantKey = "Tenant"

// TemplateParams returns params with the tenant under TenantKey (t nil: the
// zero Tenant), in a new map: params itself is not changed.
func TemplateParams(params map[string]any, t *Tenant) map[string]any {
	out := make(map[string]any, len(params)+1)
	for k, v := range params {
		out[k] = v
	}
	if t == nil {
		t = &Tenant{}
	}
	out[TenantKey] = *t
	return out
}

// Branding is a tenant's branding: templates use it, and the email channel
// sends from EmailFrom when it is set.
type Branding struct {
	LogoURL      string `json:"logo_url,omitempty"`
	PrimaryColor string `json:"primary_color,omitempty"`
	EmailFrom    string `json:"email_from,omitempty"`
}
