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
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/devicepush"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
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
	cfg       *Config
	notifiers map[string]*Templates
	client    *http.Client
	logger    *slog.Logger
	clock     func() time.Time
	tokens    *tokenSource
	fanout    devicepush.Fanout
	sendURL   string
	provider  string
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
	s := &Sender{cfg: cfg, notifiers: map[string]*Templates{}, client: opts.Client, logger: opts.Logger, clock: opts.Clock}
	timeout := cfg.Timeout.D()
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if s.client == nil {
		var err error
		if s.client, err = devicepush.NewClient(timeout, cfg.CAFile); err != nil {
			return nil, fmt.Errorf("fcm: channels.fcm.ca_file: %w", err)
		}
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = time.Now
	}
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
	s.tokens = &tokenSource{client: s.client, url: tokenURL, account: acct, clock: s.clock, timeout: timeout}
	s.fanout = devicepush.Fanout{Channel: Name, Platform: Platform, Store: store, Logger: s.logger}
	for name, t := range notifiers {
		if t == nil {
			continue
		}
		if t.parsed.Title == nil {
			var err error
			if t.parsed, err = devicepush.ParseTemplates("notifiers."+name+".channels.fcm.", t.Title, t.Body, t.URL); err != nil {
				return nil, fmt.Errorf("fcm: %w", err)
			}
		}
		s.notifiers[name] = t
	}
	return s, nil
}

// Name returns "fcm".
func (s *Sender) Name() string { return Name }

// Addressable reports whether the notifier has fcm templates. Whether the
// recipient has an Android device the fan-out knows (Plugin.Device).
func (s *Sender) Addressable(notifier string, _ channels.Recipient) error {
	if _, ok := s.notifiers[notifier]; !ok {
		return fmt.Errorf("notifier %q has no fcm templates", notifier)
	}
	return nil
}

func (s *Sender) render(notifier string, params map[string]any) (devicepush.Parts, error) {
	t, ok := s.notifiers[notifier]
	if !ok {
		return devicepush.Parts{}, fmt.Errorf("notifier %q has no fcm templates", notifier)
	}
	return t.parsed.Render(Name, params)
}

// Preview renders the notifier's title, body and url without sending.
func (s *Sender) Preview(notifier string, params map[string]any, _ channels.Recipient) ([]channels.Part, error) {
	p, err := s.render(notifier, params)
	if err != nil {
		return nil, err
	}
	return p.Preview(), nil
}

// Prepare reads the Android devices of a batch's recipients in one
// statement (channels.Preparer).
func (s *Sender) Prepare(ctx context.Context, recipients []string) (any, error) {
	return s.fanout.Prepare(ctx, recipients)
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
	if msg.Recipient == nil {
		return channels.Permanent(errors.New("fcm: message has no recipient"))
	}
	parts, err := s.render(msg.Notifier, msg.Params)
	if err != nil {
		return channels.Permanent(fmt.Errorf("fcm %s to recipient %s: %w", msg.Notifier, msg.Recipient.ID, err))
	}
	data := map[string]string{"id": msg.DeliveryID, "notifier": msg.Notifier, "key": msg.Key, "url": parts.URL}
	encode := func(token string, p devicepush.Parts) ([]byte, error) {
		var m message
		m.Message.Token = token
		m.Message.Notification = notification{Title: p.Title, Body: p.Body}
		m.Message.Data = data
		return json.Marshal(m)
	}
	// The longest token a device may have stands in for the device's, so
	// the cut fits every device.
	parts, err = devicepush.Fit(parts, MaxPayload, func(p devicepush.Parts) ([]byte, error) {
		return encode(strings.Repeat("x", maxToken), p)
	})
	if err != nil {
		return channels.Permanent(fmt.Errorf("fcm %s to recipient %s: %w", msg.Notifier, msg.Recipient.ID, err))
	}
	return s.fanout.Send(ctx, msg, s.provider, func(ctx context.Context, d channels.Device) error {
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
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return channels.Temporary(fmt.Errorf("fcm: %s: %w", dest, err), 0)
	}
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	status, errorCode, message := parseError(text)
	reason := errorCode
	if reason == "" {
		reason = status
	}
	err = fmt.Errorf("fcm: %s: HTTP %d %s: %s", dest, code, reason, message)
	retryAfter := safehttp.ParseRetryAfter(resp.Header.Get("Retry-After"), s.clock())
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
