// Package fcm is the Firebase Cloud Messaging channel: it sends a
// notification to every Android device the recipient registered (POST
// /v1/devices with platform "android"), through the FCM HTTP v1 API.
//
// # Authorisation
//
// The service account's key file (channels.fcm.service_account_file) signs
// an OAuth 2.0 assertion, a JWT (RS256, kid the key's private_key_id) with
// {"iss": client_email, "scope": Scope, "aud": <token URL>, "iat", "exp":
// iat + 1h}, which is exchanged at the token URL (form grant_type=GrantType,
// assertion=<JWT>) for an access token. The token is cached until five
// minutes before it expires; sends that need a new one while an exchange
// runs wait for it, so a burst of sends makes one exchange.
//
// # Request
//
//	POST {base_url}/v1/projects/{project_id}/messages:send
//	Authorization: Bearer <access token>
//	Content-Type: application/json
//
//	{"message": {"token": "<registration token>",
//	             "notification": {"title": "...", "body": "..."},
//	             "data": {"id": "<delivery id>", "notifier": "comment.created",
//	                      "key": "comment-1", "url": "https://..."}}}
//
// rendered from the notifier's fcm templates (title, body, url; url is ""
// when it has none). A message carries at most MaxPayload bytes: a longer
// body is cut short (with "…") to fit.
//
// # Outcomes
//
// One delivery is one message to each of the recipient's Android devices,
// all at once; it is sent when at least one device took it. Per device: 2xx
// took it; UNREGISTERED or 404 removes the device (the app was
// uninstalled); 401 drops the access token and tries once more with a new
// one; 429 and QUOTA_EXCEEDED are a rate limit, 503, 500 and other 5xx
// temporary, both with the server's Retry-After; INVALID_ARGUMENT and other
// 4xx are refused; timeouts and connection errors are temporary. When no
// device took the message, a rate limit anywhere snoozes the delivery, a
// temporary failure retries it, and otherwise it is refused.
package fcm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/devicepush"
)

var (
	_ channels.Channel   = (*Sender)(nil)
	_ channels.Previewer = (*Sender)(nil)
	_ channels.Preparer  = (*Sender)(nil)
)

// MaxPayload is the most bytes a message's JSON may have (FCM refuses
// messages over 4 KB).
const MaxPayload = 4096

// Options are the Sender's collaborators. The zero value is usable.
type Options struct {
	// Logger receives a debug record per push. Nil discards.
	Logger *slog.Logger
	// Clock dates the OAuth assertions, the token's expiry and HTTP-date
	// Retry-After. Nil is time.Now.
	Clock func() time.Time
	// Client replaces the client built from the config (TLS with the
	// config's ca_file, HTTP/2, the config's timeout).
	Client *http.Client
}

// Sender delivers FCM messages. It is safe for concurrent use.
type Sender struct {
	cfg      *Config
	ch       *devicepush.Channel
	tokens   *tokenSource
	sendURL  string
	provider string
}

// New returns a Sender for channels.fcm cfg with the service account acct,
// sending the notifiers' fcm templates (by notifier name) to the devices in
// store. A nil store only previews.
func New(cfg *Config, acct *ServiceAccount, notifiers map[string]*Templates, store channels.Devices, opts Options) (*Sender, error) {
	if cfg == nil || acct == nil {
		return nil, errors.New("fcm: channels.fcm is not configured")
	}
	if cfg.ProjectID == "" {
		cfg.ProjectID = acct.ProjectID
	}
	if cfg.ProjectID == "" {
		return nil, errors.New("fcm: channels.fcm.project_id is empty")
	}
	timeout := cfg.Timeout.D()
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ch, err := devicepush.NewChannel(Name, Platform, store, devicepush.Options(opts), timeout, DefaultTimeout, cfg.CAFile)
	if err != nil {
		return nil, err
	}
	s := &Sender{cfg: cfg, ch: ch}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	s.sendURL = strings.TrimSuffix(base, "/") + "/v1/projects/" + url.PathEscape(cfg.ProjectID) + "/messages:send"
	s.provider = host(base)
	tokenURL := cfg.TokenURL
	if tokenURL == "" {
		tokenURL = acct.TokenURI
	}
	if tokenURL == "" {
		tokenURL = DefaultTokenURL
	}
	s.tokens = &tokenSource{client: ch.Client, url: tokenURL, account: acct, clock: ch.Clock, timeout: timeout}
	err = devicepush.AddNotifiers(ch, notifiers, func(t *Templates) (*devicepush.Templates, string, string, string) {
		return &t.parsed, t.Title, t.Body, t.URL
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Name returns "fcm".
func (s *Sender) Name() string { return Name }

// Addressable reports whether the notifier has fcm templates. Whether the
// recipient has an Android device the fan-out knows (Plugin.Device).
func (s *Sender) Addressable(notifier string, _ channels.Recipient) error {
	return s.ch.Addressable(notifier)
}

// Preview renders the notifier's title, body and url without sending.
func (s *Sender) Preview(notifier string, params map[string]any, _ channels.Recipient) ([]channels.Part, error) {
	return s.ch.Preview(notifier, params)
}

// Prepare reads the Android devices of a batch's recipients in one
// statement (channels.Preparer).
func (s *Sender) Prepare(ctx context.Context, recipients []string) (any, error) {
	return s.ch.Fanout.Prepare(ctx, recipients)
}

// message is the FCM HTTP v1 request body, with the token left for each
// device.
type message struct {
	Message struct {
		Token        string            `json:"token"`
		Notification notification      `json:"notification"`
		Data         map[string]string `json:"data"`
	} `json:"message"`
}

type notification struct {
	Title string `json:"title"`
	Body  string `json:"body,omitempty"`
}

// Send pushes msg to each of the recipient's Android devices. See the
// package doc for the outcomes.
func (s *Sender) Send(ctx context.Context, msg channels.Message) error {
	encode := func(token string, p devicepush.Parts) ([]byte, error) {
		var m message
		m.Message.Token = token
		m.Message.Notification = notification{Title: p.Title, Body: p.Body}
		m.Message.Data = map[string]string{"id": msg.DeliveryID, "notifier": msg.Notifier, "key": msg.Key, "url": p.URL}
		return json.Marshal(m)
	}
	// The longest token a device may have stands in for the device's, so
	// the cut fits every device.
	parts, err := s.ch.Parts(msg, MaxPayload, func(p devicepush.Parts) ([]byte, error) {
		return encode(strings.Repeat("x", maxToken), p)
	})
	if err != nil {
		return err
	}
	return s.ch.Send(ctx, msg, s.provider, func(ctx context.Context, d channels.Device) error {
		b, err := encode(d.Token, parts)
		if err != nil {
			return channels.Permanent(fmt.Errorf("fcm: encode message: %w", err))
		}
		return s.push(ctx, b)
	})
}

// push posts one message, with one more try on a new access token after a
// 401.
func (s *Sender) push(ctx context.Context, body []byte) error {
	for attempt := 1; ; attempt++ {
		tok, err := s.tokens.get(ctx)
		if err != nil {
			return channels.Temporary(fmt.Errorf("fcm: %w", err), 0)
		}
		err = s.post(ctx, tok, body)
		var ue *unauthorized
		if errors.As(err, &ue) && attempt == 1 {
			s.tokens.invalidate(tok)
			continue
		}
		if ue != nil {
			return channels.Temporary(ue.err, 0)
		}
		return err
	}
}

// unauthorized is a 401 answer: the access token was refused.
type unauthorized struct{ err error }

func (u *unauthorized) Error() string { return u.err.Error() }

// post sends one message with the access token tok and classifies the
// answer.
func (s *Sender) post(ctx context.Context, tok string, body []byte) error {
	dest := "POST " + s.provider
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.sendURL, bytes.NewReader(body))
	if err != nil {
		return channels.Permanent(fmt.Errorf("fcm: build request: %w", err))
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "notifyd")
	answer, err := s.ch.Do(req, dest)
	if err != nil {
		return err
	}
	code, text, retryAfter := answer.Code, answer.Body, answer.RetryAfter
	if code >= 200 && code < 300 {
		return nil
	}
	status, errorCode, message := parseError(text)
	reason := errorCode
	if reason == "" {
		reason = status
	}
	err = fmt.Errorf("fcm: %s: HTTP %d %s: %s", dest, code, reason, message)
	switch {
	case errorCode == "UNREGISTERED" || code == http.StatusNotFound:
		return channels.Gone(err)
	case code == http.StatusUnauthorized:
		return &unauthorized{err: err}
	case code == http.StatusTooManyRequests || errorCode == "QUOTA_EXCEEDED":
		return channels.RateLimited(err, retryAfter)
	case code >= 500 || code == http.StatusRequestTimeout:
		return channels.Temporary(err, retryAfter)
	default:
		// INVALID_ARGUMENT (400), SENDER_ID_MISMATCH (403),
		// THIRD_PARTY_AUTH_ERROR (401 is taken above; the APNs or web push
		// credentials of the Firebase project) and the rest.
		return channels.Permanent(err)
	}
}

// parseError reads FCM's error answer:
//
//	{"error": {"code": 404, "message": "...", "status": "NOT_FOUND",
//	           "details": [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
//	                        "errorCode": "UNREGISTERED"}]}}
func parseError(b []byte) (status, errorCode, message string) {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Status  string `json:"status"`
			Details []struct {
				Type      string `json:"@type"`
				ErrorCode string `json:"errorCode"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil {
		return "", "", oneLine(b, 200)
	}
	for _, d := range e.Error.Details {
		if d.ErrorCode != "" && strings.HasSuffix(d.Type, "FcmError") {
			errorCode = d.ErrorCode
		}
	}
	return e.Error.Status, errorCode, oneLine([]byte(e.Error.Message), 200)
}

// TokenExchanges reports how many OAuth token exchanges the Sender started:
// one per access token lifetime, however many sends there were.
func (s *Sender) TokenExchanges() int { return s.tokens.count() }
