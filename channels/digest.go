package channels

import (
	"context"

	"github.com/notifyd/notifyd/config"
)

// Digest is one recipient's digest: the rows of several notifications rolled
// up into one message, sent by a channel that can digest (Plugin.Digest).
type Digest struct {
	// DeliveryID is the digest's own id: the message's idempotency handle
	// (an email's Message-ID) is derived from it, so a retried digest carries
	// the same handle.
	DeliveryID string
	Recipient  Recipient
	// Data is what the digest templates render. Items are oldest first; when
	// there are more than digest.max_items, the channel renders the first
	// max_items and counts the rest in More. A zero Count reads as len(Items).
	// Data.Recipient is replaced by Recipient.
	Data config.DigestData
}

// DigestChannel is implemented by a channel that can digest. SendDigest has
// the error contract of Channel.Send.
type DigestChannel interface {
	SendDigest(ctx context.Context, d Digest) error
}

// InboxItem is the in-app item a notification renders to: what the inbox
// shows and what a digest lists.
type InboxItem struct {
	Title, Body, URL string
}

// InboxChannel is implemented by the inbox channel (Plugin.Inbox). Its items
// are not sent: the fan-out writes them in its own transaction, so each
// recipient gets exactly one.
type InboxChannel interface {
	// RenderInbox renders the notifier's item for params. It fails when a
	// template fails to execute; a missing param renders as "".
	RenderInbox(notifier string, params map[string]any) (InboxItem, error)
}
