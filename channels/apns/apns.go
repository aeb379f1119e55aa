// Package apns is the Apple Push Notification service channel: it sends a
// notification to every iOS device the recipient registered (POST
// /v1/devices with platform "ios"), over HTTP/2 with token-based
// authentication.
//
// # Request
//
//	POST {base_url}/3/device/{device token}     (HTTP/2, TLS)
//	authorization: bearer <provider token>
//	apns-topic: <the device's app: its bundle id>
//	apns-push-type: alert
//	apns-priority: 10
//	apns-collapse-id: <the notification key>
//	apns-id: <the delivery id>
//
//	{"aps": {"alert": {"title": "...", "body": "..."}},
//	 "id": "<delivery id>", "notifier": "comment.created", "key": "comment-1",
//	 "url": "https://..."}
//
// rendered from the notifier's apns templates (title, body, url; url is ""
// when it has none). A payload carries at most MaxPayload bytes: a longer
// body is cut short (with "…") to fit. A key longer than 64 bytes, the most
// apns-collapse-id takes, is replaced by the hex SHA-256 of the key (64
// digits), so notifications with the same key still collapse. The
// delivery id is the apns-id of every device's push and of every retry.
//
// The provider token is a JWT (ES256) with header {"alg": "ES256", "kid":
// key_id} and claims {"iss": team_id, "iat": <now>}, signed with the .p8
// key. One token serves every push until it is 50 minutes old (Apple
// refuses tokens older than an hour, and refreshes more often than every
// 20 minutes), then a new one is signed.
//
// # Outcomes
//
// One delivery is one push to each of the recipient's iOS devices, all at
// once; it is sent when at least one device took it. Per device: 200 took
// it; 410 or BadDeviceToken removes the device (the app was uninstalled,
// or the token is not a device's); ExpiredProviderToken signs a new token
// and tries once more; 429 is a rate limit (Retry-After honoured when
// sent); 5xx are temporary; other 4xx (DeviceTokenNotForTopic,
// PayloadTooLarge, ...) are refused; timeouts and connection errors are
// temporary. When no device took the push, a rate limit anywhere snoozes
// the delivery, a temporary failure retries it, otherwise it is refused.
package apns

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/devicepush"
)

var (
	_ channels.Channel   = (*Sender)(nil)
	_ channels.Previewer = (*Sender)(nil)
	_ channels.Preparer  = (*Sender)(nil)
)

// MaxPayload is the most bytes an alert's payload may have.
const MaxPayload = 4096

// MaxCollapseID is the most bytes apns-collapse-id takes.
const MaxCollapseID = 64

// TokenRefresh is how old a provider token gets before a new one is
// signed.
const TokenRefresh = 50 * time.Minute

// Options are the Sender's collaborators. The zero value is usable.
type Options struct {
	// Logger receives a debug record per push. Nil discards.
	Logger *slog.Logger
	// Clock dates the provider tokens and HTTP-date Retry-After. Nil is
	// time.Now.
	Clock func() time.Time
	// Client replaces the client built from the config (TLS with the
	// config's ca_file, HTTP/2, the config's timeout).
	Client *http.Client
}

// Sender delivers APNs pushes. It is safe for concurrent use.
type Sender struct {
	cfg      *Config
	key      *ecdsa.PrivateKey
	ch       *devicepush.Channel
	base     string
	provider string

	mu       sync.Mutex
	token    string
	signedAt time.Time
	signed   int // tokens signed (tests read it)
}

// New returns a Sender for channels.apns cfg, signing provider tokens with
// key and sending the notifiers' apns templates (by notifier name) to the
// devices in store. A nil store only previews.
func New(cfg *Config, key *ecdsa.PrivateKey, notifiers map[string]*Templates, store channels.Devices, opts Options) (*Sender, error) {
	if cfg == nil || key == nil {
		return nil, errors.New("apns: channels.apns is not configured")
	}
	ch, err := devicepush.NewChannel(Name, Platform, store, devicepush.Options(opts), cfg.Timeout.D(), DefaultTimeout, cfg.CAFile)
	if err != nil {
		return nil, err
	}
	s := &Sender{cfg: cfg, key: key, ch: ch}
	s.base = strings.TrimSuffix(cfg.BaseURL, "/")
	if s.base == "" {
		s.base = DefaultBaseURL
	}
	if u, err := url.Parse(s.base); err == nil && u.Host != "" {
		s.provider = u.Scheme + "://" + u.Host
	} else {
		return nil, fmt.Errorf("apns: channels.apns.base_url %q is not a URL", cfg.BaseURL)
	}
	err = devicepush.AddNotifiers(ch, notifiers, func(t *Templates) (*devicepush.Templates, string, string, string) {
		return &t.parsed, t.Title, t.Body, t.URL
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Name returns "apns".
func (s *Sender) Name() string { return Name }

// Addressable reports whether the notifier has apns templates. Whether the
// recipient has an iOS device the fan-out knows (Plugin.Device).
func (s *Sender) Addressable(notifier string, _ channels.Recipient) error {
	return s.ch.Addressable(notifier)
}

// Preview renders the notifier's title, body and url without sending.
func (s *Sender) Preview(notifier string, params map[string]any, _ channels.Recipient) ([]channels.Part, error) {
	return s.ch.Preview(notifier, params)
}

// Prepare reads the iOS devices of a batch's recipients in one statement
// (channels.Preparer).
func (s *Sender) Prepare(ctx context.Context, recipients []string) (any, error) {
	return s.ch.Fanout.Prepare(ctx, recipients)
}

// payload is the push's JSON body.
type payload struct {
	APS struct {
		Alert struct {
			Title string `json:"title"`
			Body  string `json:"body,omitempty"`
		} `json:"alert"`
	} `json:"aps"`
	ID       string `json:"id"`
	Notifier string `json:"notifier"`
	Key      string `json:"key"`
	URL      string `json:"url"`
}

// CollapseID is the apns-collapse-id of a notification key: the key itself
// when it fits MaxCollapseID bytes, else the hex SHA-256 of the key.
func CollapseID(key string) string {
	if len(key) <= MaxCollapseID {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Send pushes msg to each of the recipient's iOS devices. See the package
// doc for the outcomes.
func (s *Sender) Send(ctx context.Context, msg channels.Message) error {
	encode := func(p devicepush.Parts) ([]byte, error) {
		var b payload
		b.APS.Alert.Title, b.APS.Alert.Body = p.Title, p.Body
		b.ID, b.Notifier, b.Key, b.URL = msg.DeliveryID, msg.Notifier, msg.Key, p.URL
		return json.Marshal(b)
	}
	parts, err := s.ch.Parts(msg, MaxPayload, encode)
	if err != nil {
		return err
	}
	body, err := encode(parts)
	if err != nil {
		return channels.Permanent(fmt.Errorf("apns: encode payload: %w", err))
	}
	return s.ch.Send(ctx, msg, s.provider, func(ctx context.Context, d channels.Device) error {
		return s.push(ctx, d, msg, body)
	})
}

// push sends body to one device, with one more try on a new provider token
// after ExpiredProviderToken.
func (s *Sender) push(ctx context.Context, d channels.Device, msg channels.Message, body []byte) error {
	topic := d.App
	if topic == "" {
		topic = s.cfg.Topic
	}
	if topic == "" {
		return channels.Permanent(fmt.Errorf("apns: device %s has no app and channels.apns.topic is not set", d.ID))
	}
	for attempt := 1; ; attempt++ {
		tok, err := s.providerToken()
		if err != nil {
			return channels.Temporary(fmt.Errorf("apns: sign the provider token: %w", err), 0)
		}
		err = s.post(ctx, tok, d.Token, topic, msg, body)
		var ee *expiredToken
		if errors.As(err, &ee) {
			s.expire(tok)
			if attempt == 1 {
				continue
			}
			return channels.Permanent(ee.err)
		}
		return err
	}
}

// expiredToken is a 403 ExpiredProviderToken answer.
type expiredToken struct{ err error }

func (e *expiredToken) Error() string { return e.err.Error() }

// post sends one push and classifies the answer.
func (s *Sender) post(ctx context.Context, tok, device, topic string, msg channels.Message, body []byte) error {
	dest := "POST " + s.provider
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/3/device/"+url.PathEscape(device),
		bytes.NewReader(body))
	if err != nil {
		return channels.Permanent(fmt.Errorf("apns: build request: %w", err))
	}
	req.Header.Set("authorization", "bearer "+tok)
	req.Header.Set("apns-topic", topic)
	req.Header.Set("apns-push-type", "alert")
	req.Header.Set("apns-priority", "10")
	if msg.Key != "" {
		req.Header.Set("apns-collapse-id", CollapseID(msg.Key))
	}
	if msg.DeliveryID != "" {
		req.Header.Set("apns-id", msg.DeliveryID)
	}
	req.Header.Set("content-type", "application/json")
	answer, err := s.ch.Do(req, dest)
	if err != nil {
		return err
	}
	code, text, retryAfter := answer.Code, answer.Body, answer.RetryAfter
	if code == http.StatusOK {
		return nil
	}
	var apple struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(text, &apple)
	reason := apple.Reason
	if reason == "" {
		reason = strings.Join(strings.Fields(strings.ToValidUTF8(string(text), "")), " ")
		if len(reason) > 200 {
			reason = strings.ToValidUTF8(reason[:200], "") + "…"
		}
	}
	err = fmt.Errorf("apns: %s: HTTP %d %s", dest, code, reason)
	switch {
	case code == http.StatusGone || reason == "BadDeviceToken" || reason == "Unregistered":
		return channels.Gone(err)
	case code == http.StatusForbidden && reason == "ExpiredProviderToken":
		return &expiredToken{err: err}
	case code == http.StatusTooManyRequests:
		return channels.RateLimited(err, retryAfter)
	case code >= 500:
		return channels.Temporary(err, retryAfter)
	default:
		return channels.Permanent(err)
	}
}

// providerToken returns the provider token, signing a new one when the
// current one is TokenRefresh old.
func (s *Sender) providerToken() (string, error) {
	now := s.ch.Clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && now.Sub(s.signedAt) < TokenRefresh && !now.Before(s.signedAt) {
		return s.token, nil
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": s.cfg.TeamID, "iat": now.Unix()})
	t.Header["kid"] = s.cfg.KeyID
	tok, err := t.SignedString(s.key)
	if err != nil {
		return "", err
	}
	s.token, s.signedAt = tok, now
	s.signed++
	return tok, nil
}

// expire drops tok (APNs said it expired), so the next push signs a new
// one; a token replaced already is left alone.
func (s *Sender) expire(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == tok {
		s.token = ""
	}
}

// TokensSigned reports how many provider tokens the Sender signed: one per
// TokenRefresh, however many pushes there were.
func (s *Sender) TokensSigned() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signed
}
