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
	Deliveries          []deliveryJSON  `json:"deliveries"`
	DeliveriesTruncated bool            `json:"deliveries_truncated"`
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
}

func notificationWire(n *stores.Notification, max int) notificationJSON {
	out := notificationJSON{ID: n.ID, Notifier: n.Notifier, Key: n.Key, Actor: n.Actor, Status: n.Status,
		Error: n.Error, Params: n.Params, Topics: n.Topics, SendAt: n.SendAt, CreatedAt: n.CreatedAt,
		UpdatedAt: n.UpdatedAt, Deliveries: make([]deliveryJSON, 0, min(len(n.Deliveries), max))}
	for i, d := range n.Deliveries {
		if i == max {
			out.DeliveriesTruncated = true
			break
		}
		out.Deliveries = append(out.Deliveries, deliveryJSON{ID: d.ID, Recipient: d.Recipient, Channel: d.Channel,
			Reason: d.Reason, Mode: d.Mode, Status: d.Status, Attempts: d.Attempts, LastError: d.LastError,
			NextAttemptAt: d.NextAttemptAt, BatchedInto: d.BatchedInto, UpdatedAt: d.UpdatedAt})
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

// InboxItem is an inbox item as the API shows it: in GET /v1/inbox pages and
// as the data of the stream's inbox.created event.
type InboxItem struct {
	ID         string          `json:"id"`
	Notifier   string          `json:"notifier"`
	Key        string          `json:"key"`
	Category   string          `json:"category"`
	Reason     string          `json:"reason"`
	Actor      *string         `json:"actor"`
	Title      string          `json:"title"`
	Body       string          `json:"body"`
	URL        string          `json:"url"`
	Params     json.RawMessage `json:"params"`
	CreatedAt  time.Time       `json:"created_at"`
	SeenAt     *time.Time      `json:"seen_at"`
	ReadAt     *time.Time      `json:"read_at"`
	ArchivedAt *time.Time      `json:"archived_at"`
}

// InboxItemWire is it as the API shows it.
func InboxItemWire(it stores.InboxItem) InboxItem {
	return InboxItem{ID: it.ID, Notifier: it.Notifier, Key: it.Key, Category: it.Category, Reason: it.Reason,
		Actor: it.Actor, Title: it.Title, Body: it.Body, URL: it.URL, Params: it.Params, CreatedAt: it.CreatedAt,
		SeenAt: it.SeenAt, ReadAt: it.ReadAt, ArchivedAt: it.ArchivedAt}
}

// Counts is GET /v1/inbox/counts and the data of the stream's counts event.
type Counts struct {
	Unread int `json:"unread"`
	Unseen int `json:"unseen"`
}

// CountsWire is c as the API shows it.
func CountsWire(c stores.InboxCounts) Counts { return Counts{Unread: c.Unread, Unseen: c.Unseen} }
