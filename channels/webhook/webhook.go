// Package webhook is the webhook channel: an HTTP POST of JSON, signed per the
// Standard Webhooks specification (https://www.standardwebhooks.com).
//
// A Sender is both a per-recipient channel (channels.Channel: it posts to the
// recipient's profile webhook_url) and a bulk channel (channels.BulkChannel: it
// posts once per notification to the notifier's channels.webhook.url).
//
// # Request
//
//	POST <url>
//	Content-Type: application/json
//	User-Agent: notifyd
//	webhook-id: <delivery id>
//	webhook-timestamp: <unix seconds when this attempt was signed>
//	webhook-signature: v1,<base64 HMAC-SHA256(key, id + "." + timestamp + "." + body)>
//
// Every destination has a key of its own, derived from the channel secret: a
// per-recipient webhook is signed with RecipientSecret(secret, recipient id),
// a notifier-level one with NotifierSecret(secret, notifier). The channel
// secret itself signs nothing, so a receiver that can verify its own webhooks
// can neither verify nor forge anybody else's.
//
// The webhook-id is the delivery's id: it is the same on every retry of a
// delivery, so a receiver that remembers the ids it processed drops the rare
// duplicate (notifyd sends at least once). While a secret rotates
// (channels.webhook.secrets) webhook-signature carries one space-separated
// signature per secret (each derived for the destination), the main secret's
// first; a receiver accepts the message when any of them verifies, so it keeps
// working with its old secret until it fetches the new one. Receivers written in Go can use Verify.
//
// # Body
//
//	{
//	  "type": "comment.created",             // the notifier
//	  "timestamp": "2025-01-02T15:04:05Z",    // when the notification was created (RFC 3339, UTC)
//	  "data": {
//	    "id": "0194…",                        // the delivery id, as in webhook-id
//	    "notification_id": "0194…",
//	    "notifier": "comment.created",
//	    "key": "comment-123",
//	    "category": "comments",               // "" when the notifier has none
//	    "actor": "u1",                        // "" when there is none
//	    "reason": "author",                   // why this recipient; "" for a bulk webhook
//	    "recipient": {"id": "u2", "email": "…", "name": "…", "locale": "…",
//	                  "timezone": "…", "webhook_url": "…", "data": {…}},
//	                                          // empty profile fields are left out;
//	                                          // null for a bulk (notifier-level) webhook
//	    "params": {"post_title": "Hello"},    // the notification's params; {} when none
//	    "created_at": "2025-01-02T15:04:05.123456Z"
//	  }
//	}
//
// The body depends only on the delivery, so every retry sends the same bytes;
// only webhook-timestamp and the signature change.
//
// # Outcomes
//
// 2xx is sent. 408 and 5xx are temporary (retried with backoff, Retry-After
// honoured); 429 is rate limited (snoozed for Retry-After); 410 Gone refuses
// the delivery and marks the recipient's webhook_url unusable; any other 4xx is
// refused; a 3xx is refused because redirects are not followed. Destinations
// that resolve to loopback, private, link-local, multicast or other reserved
// addresses are refused before connecting unless channels.webhook.allow_private
// is true. Timeouts and connection errors are temporary.
package webhook

import (
	"maps"

	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/templates"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
)

var (
	_ channels.Channel     = (*Sender)(nil)
	_ channels.BulkChannel = (*Sender)(nil)
	_ channels.Targeter    = (*Sender)(nil)

	_ channels.MessagePreviewer = (*Sender)(nil)
)

// Options are the Sender's collaborators. The zero value is usable.
type Options struct {
	// Logger receives a debug record per attempt. Nil discards.
	Logger *slog.Logger
	// Clock dates webhook-timestamp and HTTP-date Retry-After headers. Nil is time.Now.
	Clock func() time.Time
	// Client replaces the SSRF-guarded clients built from the config
	// (safehttp.New(cfg.Timeout, cfg.AllowPrivate), for recipients'
	// webhook_url and, with cfg.AllowPrivateNotifierURLs too, for notifier
	// urls). Tests use it; a replacement should refuse private destinations
	// the same way.
	Client *http.Client
}

// Sender posts signed webhooks. It is safe for concurrent use.
type Sender struct {
	keys   [][]byte          // main secret first, then the rotation secrets
	urls   map[string]string // notifier-level (bulk) destinations by notifier
	client *http.Client      // to recipients' webhook_url
	bulk   *http.Client      // to notifier urls: may reach loopback where client may not
	logger *slog.Logger
	clock  func() time.Time
}

// New returns a Sender for the webhook channel configured by cfg, posting bulk
// webhooks to the notifier-level URLs in urls (by notifier name). cfg must not be nil (a nil webhook config
// means the channel is not configured) and cfg.Secret must be set: an unsigned
// webhook cannot be trusted by its receiver. Every secret must be valid (see
// Sign), and so must every notifier-level webhook URL (http or https, with a
// host). A zero cfg.Timeout is 10 s.
func New(cfg *Config, urls map[string]string, opts Options) (*Sender, error) {
	if cfg == nil {
		return nil, errors.New("webhook: channel is not configured")
	}
	if cfg.Secret == "" {
		return nil, errors.New("webhook: channels.webhook.secret is required")
	}
	s := &Sender{
		urls:   urls,
		client: opts.Client,
		bulk:   opts.Client,
		logger: opts.Logger,
		clock:  opts.Clock,
	}
	for i, secret := range append([]string{cfg.Secret}, cfg.Secrets...) {
		key, err := secretKey(secret)
		if err != nil {
			if i == 0 {
				return nil, fmt.Errorf("webhook: channels.webhook.secret: %w", err)
			}
			return nil, fmt.Errorf("webhook: channels.webhook.secrets[%d]: %w", i-1, err)
		}
		s.keys = append(s.keys, key)
	}
	for name, u := range urls {
		if err := safehttp.CheckURL(u); err != nil {
			return nil, fmt.Errorf("webhook: notifiers.%s.channels.webhook.url: %w", name, err)
		}
	}
	if s.client == nil {
		// A recipient's webhook_url is written by whoever writes profiles:
		// only allow_private opens loopback to it, never the setting for
		// the operator's own notifier urls.
		s.client = safehttp.New(cfg.Timeout.D(), cfg.AllowPrivate)
		s.bulk = s.client
		if cfg.AllowPrivateNotifierURLs && !cfg.AllowPrivate {
			s.bulk = safehttp.New(cfg.Timeout.D(), true)
		}
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	return s, nil
}

// Target names msg's destination: the host of the recipient's webhook_url,
// or of the notifier's url for a bulk webhook.
func (s *Sender) Target(msg channels.Message) string {
	if msg.Recipient != nil {
		return channels.URLHost(msg.Recipient.WebhookURL)
	}
	return channels.URLHost(s.bulkURL(msg.Notifier))
}

// Name returns "webhook".
func (s *Sender) Name() string { return Name }

// Addressable reports whether r has a usable webhook_url: an empty one gives
// "recipient has no webhook_url", an invalid one (not http or https, no host)
// says why. Whether the address is private is only known when connecting.
func (s *Sender) Addressable(notifier string, r channels.Recipient) error {
	if r.WebhookURL == "" {
		return errors.New("recipient has no webhook_url")
	}
	if err := safehttp.CheckURL(r.WebhookURL); err != nil {
		return fmt.Errorf("recipient webhook_url: %w", err)
	}
	return nil
}

// Configured reports whether notifier has a notifier-level webhook URL
// (channels.webhook.url in its config).
func (s *Sender) Configured(notifier string) bool {
	return s.bulkURL(notifier) != ""
}

func (s *Sender) bulkURL(notifier string) string {
	return s.urls[notifier]
}

// Send posts msg to msg.Recipient's webhook_url. A message without a recipient
// or with an unusable webhook_url is refused (channels.Permanent).
func (s *Sender) Send(ctx context.Context, msg channels.Message) error {
	if msg.Recipient == nil {
		return channels.Permanent(errors.New("webhook: per-recipient message has no recipient"))
	}
	if err := s.Addressable(msg.Notifier, *msg.Recipient); err != nil {
		return channels.Permanent(err)
	}
	return s.post(ctx, msg.Recipient.WebhookURL, recipientPurpose(msg.Recipient.ID), msg, msg.Recipient)
}

// SendBulk posts msg to the notifier's webhook URL, with a null recipient. A
// notifier without one, or with an invalid one, is refused (channels.Permanent).
func (s *Sender) SendBulk(ctx context.Context, msg channels.Message) error {
	dest := s.bulkURL(msg.Notifier)
	if dest == "" {
		return channels.Permanent(fmt.Errorf("notifier %q has no webhook url", msg.Notifier))
	}
	if err := safehttp.CheckURL(dest); err != nil {
		return channels.Permanent(fmt.Errorf("notifier %q webhook url: %w", msg.Notifier, err))
	}
	return s.post(ctx, dest, notifierPurpose(msg.Notifier), msg, nil)
}

// PreviewMessage is the request Send (SendBulk for a message without a
// recipient) makes for msg, without making it: "url", the destination with
// its credentials and query redacted as in the logs ("" for a notifier
// without one), and "body", the bytes every attempt posts.
func (s *Sender) PreviewMessage(msg channels.Message) ([]channels.Part, error) {
	dest := s.bulkURL(msg.Notifier)
	if msg.Recipient != nil {
		dest = msg.Recipient.WebhookURL
	}
	if dest != "" {
		dest = safehttp.Redact(dest, true)
	}
	payload, err := encode(msg, msg.Recipient)
	if err != nil {
		return nil, fmt.Errorf("webhook: encode body: %w", err)
	}
	return []channels.Part{{Name: "url", Value: dest}, {Name: "body", Value: string(payload)}}, nil
}

// RecipientSecret is the secret recipient id's webhooks are signed with
// (see the package function RecipientSecret): what the recipient verifies
// with. While secrets rotate it is the main secret's, the one that stays.
func (s *Sender) RecipientSecret(id string) string {
	return secretPrefix + base64.StdEncoding.EncodeToString(deriveKey(s.keys[0], recipientPurpose(id)))
}

// NotifierSecret is the secret notifier's notifier-level webhooks are signed
// with.
func (s *Sender) NotifierSecret(notifier string) string {
	return secretPrefix + base64.StdEncoding.EncodeToString(deriveKey(s.keys[0], notifierPurpose(notifier)))
}

// body is the JSON document a webhook carries; see the package comment.
type body struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      data      `json:"data"`
}

type data struct {
	ID             string              `json:"id"`
	NotificationID string              `json:"notification_id"`
	Notifier       string              `json:"notifier"`
	Key            string              `json:"key"`
	Category       string              `json:"category"`
	Actor          string              `json:"actor"`
	Reason         string              `json:"reason"`
	Recipient      *channels.Recipient `json:"recipient"`
	Params         map[string]any      `json:"params"`
	CreatedAt      time.Time           `json:"created_at"`
	// Tenant is the notification's tenant id; absent for none.
	Tenant string `json:"tenant,omitempty"`
}

// encode renders msg's body. It uses nothing but the message, so a retry sends
// the same bytes.
func encode(msg channels.Message, r *channels.Recipient) ([]byte, error) {
	params := msg.Params
	if params == nil {
		params = map[string]any{}
	}
	_, hasTenant := params[notifytype.TenantKey]
	_, hasLocale := params[templates.LocaleKey]
	if hasTenant || hasLocale {
		// The templates' view of the tenant and locale is not one of the params.
		params = maps.Clone(params)
		delete(params, notifytype.TenantKey)
		delete(params, templates.LocaleKey)
	}
	var tenant string
	if msg.Tenant != nil {
		tenant = msg.Tenant.ID
	}
	created := msg.CreatedAt.UTC()
	return json.Marshal(body{
		Type:      msg.Notifier,
		Timestamp: created.Truncate(time.Second),
		Data: data{
			ID:             msg.DeliveryID,
			NotificationID: msg.NotificationID,
			Notifier:       msg.Notifier,
			Key:            msg.Key,
			Category:       msg.Category,
			Actor:          msg.Actor,
			Reason:         msg.Reason,
			Recipient:      r,
			Params:         params,
			CreatedAt:      created,
			Tenant:         tenant,
		},
	})
}

// post sends msg to dest, signed with the keys derived for purpose (the
// destination).
func (s *Sender) post(ctx context.Context, dest, purpose string, msg channels.Message, r *channels.Recipient) error {
	payload, err := encode(msg, r)
	if err != nil {
		// Params that cannot be encoded now never will be.
		return channels.Permanent(fmt.Errorf("webhook: encode body: %w", err))
	}
	now := s.clock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dest, bytes.NewReader(payload))
	if err != nil {
		return channels.Permanent(fmt.Errorf("webhook: build request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "notifyd")
	req.Header.Set(HeaderID, msg.DeliveryID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, s.signatures(purpose, msg.DeliveryID, now.Unix(), payload))

	redacted := safehttp.Redact(dest, true)
	client := s.client
	if r == nil {
		client = s.bulk
	}
	err = safehttp.Deliver(client, req, "POST "+redacted, s.clock)
	attrs := []any{
		slog.String("channel", Name),
		slog.String("delivery_id", msg.DeliveryID),
		slog.String("notification_id", msg.NotificationID),
		slog.String("notifier", msg.Notifier),
		slog.String("url", redacted),
		slog.Int("attempt", msg.Attempt),
	}
	if r != nil {
		attrs = append(attrs, slog.String("recipient", r.ID))
	}
	if err != nil {
		kind, _ := channels.Classify(err)
		s.logger.DebugContext(ctx, "webhook failed", append(attrs, slog.String("kind", kind.String()), slog.Any("error", err))...)
		return err
	}
	s.logger.DebugContext(ctx, "webhook sent", attrs...)
	return nil
}

// signatures is the webhook-signature header: one signature per secret, each
// with the key derived from it for the destination (purpose).
func (s *Sender) signatures(purpose, id string, ts int64, payload []byte) string {
	var b []byte
	for i, key := range s.keys {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, sign(deriveKey(key, purpose), id, ts, payload)...)
	}
	return string(b)
}
