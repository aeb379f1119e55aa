package channels

import (
	"context"
	"time"

	"github.com/notifyd/notifyd/templates"
)

// Digest is one recipient's digest: a single message covering several of
// their notifications on one channel, oldest first.
type Digest struct {
	// ID is the digest's own id and its idempotency handle, like a Message's
	// DeliveryID: every attempt at the same digest carries the same ID (an
	// email's Message-ID is derived from it), so a receiver can drop the rare
	// duplicate.
	ID        string
	Recipient Recipient
	// Items are the notifications the digest lists, oldest first. There may be
	// fewer than Count: the digest job reads at most digest.max_items of them,
	// and a channel may list fewer still and count the rest.
	Items []DigestItem
	// Count is the number of notifications the digest covers. A zero Count
	// reads as len(Items).
	Count int
	// Attempt is 1 for the first try of this digest, 2 for the first retry,
	// and so on.
	Attempt int
	// Locale is the recipient's locale and zone the digest renders in (the
	// templates' t and .Locale); nil without locales.
	Locale *templates.Locale
}

// DigestItem is one notification in a digest. Title, Body and URL are the
// texts the recipient's inbox shows for it (rendered from the notifier's
// in_app templates when there is no inbox item); Params are the
// notification's params (an empty map, never nil, when it had none).
type DigestItem struct {
	Notifier  string
	Key       string
	Category  string
	Reason    string
	Title     string
	Body      string
	URL       string
	Params    map[string]any
	CreatedAt time.Time
}

// DigestChannel sends digests. A channel that can be digested implements it
// beside Channel (email does: var _ channels.DigestChannel = (*Sender)(nil)).
type DigestChannel interface {
	// SendDigest delivers d. It is called outside any database transaction,
	// with the same error contract as Channel.Send: the returned error is
	// classified with Classify, and an unwrapped error is temporary.
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
