package httpapi

import (
	"encoding/json"
	"time"

	"github.com/notifyd/notifyd/stores"
)

// The API's own wire types: what a response says is decided here, not by
// the stores' row types, so a column can change without changing the API
// (and the API document, openapi.json, describes these).

// notificationJSON is GET /v1/notifications/{id}: the notification and its
// ledger, at most maxDeliveries rows (deliveries_truncated says when more
// exist).
type notificationJSON struct {
	ID                  string          `json:"id"`
	Notifier            string          `json:"notifier"`
	Key                 string          `json:"key"`
	Actor               *string         `json:"actor"`
	Status              string          `json:"status"`
	Error               *string         `json:"error"`
	Params              json.RawMessage `json:"params"`
	Topics              []string        `json:"topics"`
	SendAt              *time.Time      `json:"send_at"`
	CreatedAt           time.Time       `json:"created_at"`
	UpdatedAt           time.Time       `json:"updated_at"`
	Tenant              *string         `json:"tenant"`
	Deliveries          []deliveryJSON  `json:"deliveries"`
	DeliveriesTruncated bool            `json:"deliveries_truncated"`
	// Progress is the fan-out's progress and the ledger's counts, with
	// ?progress=true only.
	Progress *progressJSON `json:"progress,omitempty"`
}

// deliveryJSON is one ledger row of a notification. The inbox channel's
// record is the inbox item itself.
type deliveryJSON struct {
	ID        string  `json:"id"`
	Recipient *string `json:"recipient"`
	Channel   string  `json:"channel"`
	Reason    string  `json:"reason"`
	Mode      string  `json:"mode"`
	Status    string  `json:"status"`
	Attempts  int     `json:"attempts"`
	LastError *string `json:"last_error"`
	// NextAttemptAt is when a scheduled delivery is due (or a failed one
	// retried); null otherwise.
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	// BatchedInto names the delivery that carried a `batched` one.
	BatchedInto *string   `json:"batched_into,omitempty"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Provider is who answered the last attempt (an SMTP relay of several);
	// null when the channel does not say, and for in_app.
	Provider *string `json:"provider"`
}

func deliveryWire(d stores.Delivery) deliveryJSON {
	return deliveryJSON{ID: d.ID, Recipient: d.Recipient, Channel: d.Channel, Reason: d.Reason, Mode: d.Mode,
		Status: d.Status, Attempts: d.Attempts, LastError: d.LastError, NextAttemptAt: d.NextAttemptAt,
		BatchedInto: d.BatchedInto, UpdatedAt: d.UpdatedAt, Provider: d.Provider}
}

func notificationWire(n *stores.Notification, max int) notificationJSON {
	out := notificationJSON{ID: n.ID, Notifier: n.Notifier, Key: n.Key, Actor: n.Actor, Status: n.Status,
		Error: n.Error, Params: n.Params, Topics: n.Topics, SendAt: n.SendAt, CreatedAt: n.CreatedAt,
		UpdatedAt: n.UpdatedAt, Tenant: nonEmpty(n.Tenant),
		Deliveries: make([]deliveryJSON, 0, min(len(n.Deliveries), max))}
	for i, d := range n.Deliveries {
		if i == max {
			out.DeliveriesTruncated = true
			break
		}
		out.Deliveries = append(out.Deliveries, deliveryWire(d))
	}
	return out
}

// muteJSON is one active mute.
type muteJSON struct {
	Target string     `json:"target"`
	Until  *time.Time `json:"until"`
}

func muteWire(m stores.Mute) muteJSON { return muteJSON{Target: m.Target, Until: m.Until} }

// subscriptionJSON is PUT /v1/topics/{topic}/subscribers/{recipient}'s
// answer: the subscription as stored.
type subscriptionJSON struct {
	Topic     string    `json:"topic"`
	Recipient string    `json:"recipient"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
}

// The operator's endpoints (admin.go): the console's reading of the ledger.

// notificationPageJSON is GET /v1/notifications: newest first; next_cursor is
// null at the end. A page may be short (even empty) with a cursor when its
// filters matched few of the notifications it examined: go on from there.
type notificationPageJSON struct {
	Items      []notificationSummaryJSON `json:"items"`
	NextCursor *string                   `json:"next_cursor"`
}

type notificationSummaryJSON struct {
	ID        string    `json:"id"`
	Notifier  string    `json:"notifier"`
	Key       string    `json:"key"`
	Actor     *string   `json:"actor"`
	Status    string    `json:"status"`
	Error     *string   `json:"error"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Tenant    *string   `json:"tenant"`
	// Channels counts the notification's deliveries per channel and status
	// (its inbox items as the inbox channel's sent ones), over at most
	// 10,000 rows of each; {} before the fan-out wrote any.
	Channels map[string]map[string]int `json:"channels"`
	// Failed counts its deliveries that failed, were refused or expired
	// (digest_failed included): the console marks such a notification.
	Failed int `json:"failed"`
	// CountsTruncated says the notification has more deliveries than were
	// counted: its page (?progress=true) counts them all.
	CountsTruncated bool `json:"counts_truncated"`
}

func notificationPageWire(p *stores.NotificationPage, counts map[string]*stores.ChannelCounts) notificationPageJSON {
	out := notificationPageJSON{Items: make([]notificationSummaryJSON, len(p.Items))}
	for i, n := range p.Items {
		out.Items[i] = notificationSummaryJSON{ID: n.ID, Notifier: n.Notifier, Key: n.Key, Actor: n.Actor,
			Status: n.Status, Error: n.Error, CreatedAt: n.CreatedAt, UpdatedAt: n.UpdatedAt, Tenant: nonEmpty(n.Tenant),
			Channels: map[string]map[string]int{}}
		if c := counts[n.ID]; c != nil {
			out.Items[i].Channels = c.ByStatus
			out.Items[i].CountsTruncated = c.Truncated
			for _, byStatus := range c.ByStatus {
				for _, st := range failedStatuses {
					out.Items[i].Failed += byStatus[st]
				}
			}
		}
	}
	if p.NextCursor != "" {
		c := p.NextCursor
		out.NextCursor = &c
	}
	return out
}

// progressJSON is the progress of GET /v1/notifications/{id}: audience
// size, fan-out lanes, and the ledger's counts per channel and status.
type progressJSON struct {
	InlineRecipients int                       `json:"inline_recipients"`
	Topics           int                       `json:"topics"`
	Audience         int                       `json:"audience"`
	LanesTotal       int                       `json:"lanes_total"`
	LanesDone        int                       `json:"lanes_done"`
	ByStatus         map[string]map[string]int `json:"by_status"`
}

func progressWire(p *stores.Progress) progressJSON {
	return progressJSON{InlineRecipients: p.InlineRecipients, Topics: p.Topics, Audience: p.Audience,
		LanesTotal: p.LanesTotal, LanesDone: p.LanesDone, ByStatus: p.ByStatus}
}

// deliveryDetailJSON is GET /v1/deliveries/{id}: a ledger row with its
// notification and its failed attempts, oldest first.
type deliveryDetailJSON struct {
	deliveryJSON
	NotificationID string        `json:"notification_id"`
	Notifier       string        `json:"notifier"`
	Key            string        `json:"key"`
	NextAttemptAt  *time.Time    `json:"next_attempt_at"`
	SettledAt      *time.Time    `json:"settled_at"`
	CreatedAt      time.Time     `json:"created_at"`
	Tenant         *string       `json:"tenant"`
	FailedAttempts []attemptJSON `json:"failed_attempts"`
	// Events are what the provider reported after the send (delivered,
	// bounced, opened...), oldest first; GET /v1/deliveries/{id} reads them,
	// lists have [].
	Events []deliveryEventJSON `json:"events"`
	// Circuit is the open circuit breaker of the delivery's target (GET
	// /v1/deliveries/{id} only): a retry would be parked again until it
	// closes. Absent while the target answers.
	Circuit *circuitJSON `json:"circuit,omitempty"`
}

type deliveryEventJSON struct {
	Type   string    `json:"type"`
	At     time.Time `json:"at"`
	Source string    `json:"source"`
	Detail string    `json:"detail"`
	// Machine marks an open or click by a machine (a privacy proxy, a link
	// scanner); absent for a person's.
	Machine bool `json:"machine,omitempty"`
}

type attemptJSON struct {
	Attempt  int       `json:"attempt"`
	At       time.Time `json:"at"`
	Error    string    `json:"error"`
	Provider *string   `json:"provider"`
}

func deliveryDetailWire(d *stores.DeliveryDetail) deliveryDetailJSON {
	out := deliveryDetailJSON{deliveryJSON: deliveryWire(d.Delivery), NotificationID: d.NotificationID,
		Notifier: d.Notifier, Key: d.Key, NextAttemptAt: d.NextAttemptAt, SettledAt: d.SettledAt,
		CreatedAt: d.CreatedAt, Tenant: nonEmpty(d.Tenant), FailedAttempts: make([]attemptJSON, len(d.FailedAttempts))}
	for i, a := range d.FailedAttempts {
		out.FailedAttempts[i] = attemptJSON{Attempt: a.Attempt, At: a.At, Error: a.Error, Provider: a.Provider}
	}
	out.Events = make([]deliveryEventJSON, len(d.Events))
	for i, e := range d.Events {
		out.Events[i] = deliveryEventJSON{Type: e.Type, At: e.At, Source: e.Source, Detail: e.Detail, Machine: e.Machine}
	}
	return out
}

// recipientDeliveriesJSON is GET /v1/recipients/{id}/deliveries.
type recipientDeliveriesJSON struct {
	Deliveries []deliveryDetailJSON `json:"deliveries"`
}

// notifiersJSON is GET /v1/notifiers.
type notifiersJSON struct {
	Notifiers []notifierJSON `json:"notifiers"`
	Channels  []channelJSON  `json:"channels"`
}

type channelJSON struct {
	Name    string `json:"name"`
	Address string `json:"address"` // the profile field it sends to; "" for none
	Inbox   bool   `json:"inbox"`
	Bulk    bool   `json:"bulk"`
}

type notifierJSON struct {
	Name     string         `json:"name"`
	Category string         `json:"category"`
	Required bool           `json:"required"`
	Channels []string       `json:"channels"`
	Example  map[string]any `json:"example"`
	// ParamsSchema is the notifier's params JSON Schema as configured (the
	// console builds its send form from it); null when any object goes.
	ParamsSchema map[string]any `json:"params_schema"`
}

// previewJSON is GET /v1/notifiers/{notifier}/preview/{channel}.
type previewJSON struct {
	Notifier string         `json:"notifier"`
	Channel  string         `json:"channel"`
	Params   map[string]any `json:"params"`
	Parts    []partJSON     `json:"parts"`
}

type partJSON struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}
