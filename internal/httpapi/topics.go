package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// subscribeRequest is the optional body of PUT
// /v1/topics/{topic}/subscribers/{recipient}.
type subscribeRequest struct {
	Reason string `json:"reason"`
}

// subscriber is one entry of GET /v1/topics/{topic}/subscribers.
type subscriber struct {
	Recipient string    `json:"recipient"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
}

type subscribersResponse struct {
	Subscribers []subscriber `json:"subscribers"`
	NextCursor  *string      `json:"next_cursor"`
}

// subscription is one entry of GET /v1/subscriptions.
type subscription struct {
	Topic     string    `json:"topic"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
}

type subscriptionsResponse struct {
	Subscriptions []subscription `json:"subscriptions"`
	NextCursor    *string        `json:"next_cursor"`
}

// subscribe is PUT /v1/topics/{topic}/subscribers/{recipient}: subscribe, or
// change the reason of an existing subscription (created_at is kept). The body
// {"reason"} is optional; the reason defaults to "subscribed".
func (s *Server) subscribe(w http.ResponseWriter, r *http.Request) error {
	topic, recipient, err := topicAndRecipient(r)
	if err != nil {
		return err
	}
	var req subscribeRequest
	if err := s.DecodeJSON(w, r, &req, true); err != nil {
		return err
	}
	reason := req.Reason
	if reason == "" {
		reason = notifyd.DefaultSubscriptionReason
	}
	if !notifyd.ValidSubscriptionReason(reason) {
		return invalidField("reason", "want one word of letters, digits, '-', '_' or '.', at most 64 bytes")
	}
	// notify_subscribe is the one door of a subscription (as SubscribeTx's
	// and SQL's): it checks the input again, in the same words.
	sub, err := stores.Subscribe(r.Context(), s.pool, topic, recipient, reason)
	if in, ok := stores.InputErrorOf(err); ok {
		return invalidField(in.Field, in.Message)
	}
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, subscriptionJSON{Topic: sub.Topic, Recipient: sub.Recipient, Reason: sub.Reason,
		CreatedAt: sub.CreatedAt})
	return nil
}

// unsubscribe is DELETE /v1/topics/{topic}/subscribers/{recipient}: 200
// {"deleted": true|false}.
func (s *Server) unsubscribe(w http.ResponseWriter, r *http.Request) error {
	topic, recipient, err := topicAndRecipient(r)
	if err != nil {
		return err
	}
	deleted, err := stores.Unsubscribe(r.Context(), s.pool, topic, recipient)
	if in, ok := stores.InputErrorOf(err); ok {
		return invalidField(in.Field, in.Message)
	}
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, map[string]bool{"deleted": deleted})
	return nil
}

func topicAndRecipient(r *http.Request) (topic, recipient string, err error) {
	topic, recipient = r.PathValue("topic"), r.PathValue("recipient")
	if err := checkPathText("topic", topic); err != nil {
		return "", "", err
	}
	if err := checkPathText("recipient", recipient); err != nil {
		return "", "", err
	}
	return topic, recipient, nil
}

// listSubscribers is GET /v1/topics/{topic}/subscribers?limit=&cursor=: the
// topic's subscribers in recipient byte order, limit 1..1000 (default 100),
// cursor from the previous page's next_cursor. An unknown topic has no
// subscribers (200, empty).
func (s *Server) listSubscribers(w http.ResponseWriter, r *http.Request) error {
	topic := r.PathValue("topic")
	if err := checkPathText("topic", topic); err != nil {
		return err
	}
	limit, after, err := keysetQuery(r, cursorRecipient)
	if err != nil {
		return err
	}
	page, err := stores.ListSubscribers(r.Context(), s.read(), topic, after, limit)
	if err != nil {
		return err
	}
	resp := subscribersResponse{Subscribers: make([]subscriber, len(page.Subscriptions))}
	for i, sub := range page.Subscriptions {
		resp.Subscribers[i] = subscriber{Recipient: sub.Recipient, Reason: sub.Reason, CreatedAt: sub.CreatedAt}
	}
	if page.Next != nil {
		c := encodeKeyCursor(cursorRecipient, *page.Next)
		resp.NextCursor = &c
	}
	wire.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// listSubscriptions is GET /v1/subscriptions (and, for an admin,
// /v1/recipients/{id}/subscriptions): the recipient's own topics in topic
// byte order, paged like listSubscribers. It is read-only: which topics a
// recipient follows is the application's decision; a recipient silences a
// topic with a mute.
func (s *Server) listSubscriptions(w http.ResponseWriter, r *http.Request, recipient string) error {
	limit, after, err := keysetQuery(r, cursorTopic)
	if err != nil {
		return err
	}
	page, err := stores.ListSubscriptions(r.Context(), s.read(), recipient, after, limit)
	if err != nil {
		return err
	}
	resp := subscriptionsResponse{Subscriptions: make([]subscription, len(page.Subscriptions))}
	for i, sub := range page.Subscriptions {
		resp.Subscriptions[i] = subscription{Topic: sub.Topic, Reason: sub.Reason, CreatedAt: sub.CreatedAt}
	}
	if page.Next != nil {
		c := encodeKeyCursor(cursorTopic, *page.Next)
		resp.NextCursor = &c
	}
	wire.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// keysetQuery reads ?limit= (1..stores.MaxSubscriptionLimit, default
// stores.DefaultSubscriptionLimit) and ?cursor= (a cursor of kind, or none).
func keysetQuery(r *http.Request, kind byte) (limit int, after string, err error) {
	q, err := parseQuery(r)
	if err != nil {
		return 0, "", err
	}
	limit = stores.DefaultSubscriptionLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > stores.MaxSubscriptionLimit {
			return 0, "", fieldError("limit", "want an integer from 1 to %d", stores.MaxSubscriptionLimit)
		}
		limit = n
	}
	if v := q.Get("cursor"); v != "" {
		key, err := decodeKeyCursor(kind, v)
		if err != nil {
			return 0, "", &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeBadCursor,
				Message: "cursor: not a cursor this API issued for this list; start again without one",
				Details: []any{wire.FieldDetail{Field: "cursor", Message: err.Error()}}}
		}
		after = key
	}
	return limit, after, nil
}

// Key cursor format: base64url (no padding) of
//
//	version (1 byte) | kind (1) | key (the last recipient or topic of the page) | check (4)
//
// where check is the first 4 bytes of SHA-256 over what precedes it. Like the
// inbox cursor it only catches mangling; it grants nothing, since every list
// is scoped by its topic or recipient. kind keeps a subscribers cursor from
// being taken for a subscriptions cursor.
const keyCursorVersion = 2

// Cursor kinds.
const (
	cursorRecipient byte = 'r'
	cursorTopic     byte = 't'
)

func encodeKeyCursor(kind byte, key string) string {
	b := make([]byte, 0, 2+len(key)+4)
	b = append(b, keyCursorVersion, kind)
	b = append(b, key...)
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(append(b, sum[:4]...))
}

func decodeKeyCursor(kind byte, s string) (string, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("not base64url")
	}
	if len(b) < 2+1+4 || b[0] != keyCursorVersion || b[1] != kind {
		return "", fmt.Errorf("wrong length, version or kind")
	}
	body, check := b[:len(b)-4], b[len(b)-4:]
	sum := sha256.Sum256(body)
	if !bytes.Equal(sum[:4], check) {
		return "", fmt.Errorf("checksum mismatch")
	}
	return string(body[2:]), nil
}
