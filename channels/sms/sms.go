// Package sms is the SMS channel: it renders a notifier's sms text for one
// recipient and sends it to the recipient's phone (profile `phone`, E.164)
// through Twilio's Messages API.
//
// # Request
//
//	POST {base_url}/2010-04-01/Accounts/{account_sid}/Messages.json
//	Authorization: Basic base64(account_sid:auth_token)
//	Content-Type: application/x-www-form-urlencoded
//
//	To=+14155550123&From=<channels.sms.from>&Body=<rendered text>
//
// base_url is Twilio's public API unless channels.sms.base_url says
// otherwise (a regional edge, or a local server speaking the same API in
// tests).
//
// # Length
//
// A text is sent in GSM-7 when every character is in the GSM alphabet (160
// characters in one message, 153 in each part of a longer one) and in UCS-2
// otherwise (70, and 67 a part); see Segments. A text longer than
// channels.sms.max_segments parts (default 10) is refused, not truncated: a
// cut-off notification can say the opposite of the whole one, and `notifyd
// check` already reports a notifier whose example renders too long. The
// segment count is recorded with the provider on the delivery's ledger row
// ("twilio (2 segments)", channels.SetProvider), Twilio's own num_segments
// when its reply carries one, else ours.
//
// # Outcomes
//
// 2xx is sent. Twilio's invalid-number errors (21211 invalid To, 21614 not a
// mobile number, 21610 the recipient replied STOP, 21408 and 21612 a number
// the account cannot reach) and any other 4xx are refused
// (channels.Permanent). 429 is rate limited, Retry-After honoured. 5xx,
// timeouts and connection errors are temporary. 401 and 403 are temporary
// with an error that names the credentials: the account or its token is
// wrong, and once the operator fixes it the retries go through.
package sms

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/templates"
)

var (
	_ channels.Channel         = (*Sender)(nil)
	_ channels.Previewer       = (*Sender)(nil)
	_ channels.RecipientCapper = (*Sender)(nil)
)

// Options are the Sender's collaborators. The zero value is usable.
type Options struct {
	// Logger receives a debug record per send. Nil discards.
	Logger *slog.Logger
	// Clock dates an HTTP-date Retry-After. Nil is time.Now.
	Clock func() time.Time
	// Client replaces the HTTP client (one with channels.sms.timeout that
	// does not follow redirects).
	Client *http.Client
}

// Sender sends text messages through Twilio. It is safe for concurrent use.
type Sender struct {
	cfg       *Config
	endpoint  string
	notifiers map[string]*Templates
	client    *http.Client
	logger    *slog.Logger
	clock     func() time.Time
	limiter   *rate.Limiter // nil: unlimited (channels.sms.rate)
}

// New returns a Sender for channels.sms cfg, sending the notifiers' sms
// templates by notifier name (only those notifiers are sendable). Templates
// checked by the registry are used as compiled; others are parsed here.
func New(cfg *Config, notifiers map[string]*Templates, opts Options) (*Sender, error) {
	if cfg == nil {
		return nil, errors.New("sms: channels.sms is not configured")
	}
	if cfg.AccountSID == "" || cfg.AuthToken == "" || cfg.From == "" {
		return nil, errors.New("sms: channels.sms needs account_sid, auth_token and from")
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	s := &Sender{
		cfg:       cfg,
		endpoint:  base + "/2010-04-01/Accounts/" + url.PathEscape(cfg.AccountSID) + "/Messages.json",
		notifiers: map[string]*Templates{},
		client:    opts.Client,
		logger:    opts.Logger,
		clock:     opts.Clock,
	}
	if _, err := url.Parse(s.endpoint); err != nil {
		return nil, fmt.Errorf("sms: channels.sms.base_url: %w", err)
	}
	if s.cfg.MaxSegments <= 0 {
		s.cfg.MaxSegments = DefaultMaxSegments
	}
	if cfg.Rate > 0 {
		// A burst of one second's worth, as channels.email.rate.
		s.limiter = rate.NewLimiter(rate.Limit(cfg.Rate), max(1, int(math.Ceil(cfg.Rate))))
	}
	if s.client == nil {
		timeout := cfg.Timeout.D()
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		s.client = &http.Client{Timeout: timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	for name, t := range notifiers {
		if t == nil {
			continue
		}
		if t.text == nil {
			p := config.Default().NewProblems()
			t.text = p.Text(nil, "notifiers."+name+".channels.sms.text", t.Text)
			if err := p.Err(); err != nil {
				return nil, fmt.Errorf("sms: %w", err)
			}
		}
		if t.text == nil {
			return nil, fmt.Errorf("sms: notifiers.%s.channels.sms.text is empty", name)
		}
		s.notifiers[name] = t
	}
	return s, nil
}

// Name returns "sms".
func (s *Sender) Name() string { return Name }

// Addressable reports whether r can get the notifier's text messages: the
// notifier must have an sms template and r an E.164 phone.
func (s *Sender) Addressable(notifier string, r channels.Recipient) error {
	if _, ok := s.notifiers[notifier]; !ok {
		return fmt.Errorf("notifier %q has no sms template", notifier)
	}
	if !e164RE.MatchString(r.Phone) {
		return fmt.Errorf("recipient phone %q is not an E.164 number", r.Phone)
	}
	return s.checkCountry(r.Phone)
}

// checkCountry returns why phone (E.164) is outside
// channels.sms.allowed_countries, or nil. Country calling codes are a prefix
// code: no code is the beginning of another, so a prefix match is exact.
func (s *Sender) checkCountry(phone string) error {
	if len(s.cfg.AllowedCountries) == 0 {
		return nil
	}
	for _, cc := range s.cfg.AllowedCountries {
		if strings.HasPrefix(phone, "+"+cc) {
			return nil
		}
	}
	return fmt.Errorf("recipient phone %q is outside channels.sms.allowed_countries (%s)", phone,
		strings.Join(s.cfg.AllowedCountries, ", "))
}

// RecipientCap is channels.sms.max_per_recipient_per_day per 24 hours
// (channels.RecipientCapper).
func (s *Sender) RecipientCap() (int, time.Duration) {
	return s.cfg.MaxPerRecipientPerDay, 24 * time.Hour
}

// render renders the notifier's text for params and counts its segments.
func (s *Sender) render(notifier string, params map[string]any) (string, int, Encoding, error) {
	t, ok := s.notifiers[notifier]
	if !ok {
		return "", 0, "", fmt.Errorf("notifier %q has no sms template", notifier)
	}
	text, err := templates.RenderText(t.text, params)
	if err != nil {
		return "", 0, "", fmt.Errorf("render sms text: %w", err)
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return "", 0, "", errors.New("the sms text renders empty")
	}
	segs, enc := Segments(text)
	return text, segs, enc, nil
}

// Preview renders the notifier's text without sending it: parts "text" and
// "segments" ("2 (GSM-7)").
func (s *Sender) Preview(notifier string, params map[string]any, _ channels.Recipient) ([]channels.Part, error) {
	text, segs, enc, err := s.render(notifier, params)
	if err != nil {
		return nil, err
	}
	return []channels.Part{{Name: "text", Value: text}, {Name: "segments", Value: fmt.Sprintf("%d (%s)", segs, enc)}}, nil
}

// twilioError is the JSON body of a Twilio error response.
type twilioError struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	MoreInfo string `json:"more_info"`
}

// twilioMessage is the part of a created Message resource we read.
type twilioMessage struct {
	SID         string `json:"sid"`
	NumSegments string `json:"num_segments"`
}

// refusedCodes are the Twilio error codes that say the number cannot get the
// message, whatever the retry.
// twilioUnsubscribed is Twilio's error for a number that replied STOP.
const twilioUnsubscribed = 21610

var refusedCodes = map[int]string{
	21211: "invalid To number",
	21614: "To is not a mobile number",
	21610: "the recipient unsubscribed (replied STOP)",
	21408: "the account may not send to this region",
	21612: "the To number cannot be reached from the From number",
}

// Send renders msg's text and posts it to the recipient's phone. See the
// package doc for how outcomes are classified.
func (s *Sender) Send(ctx context.Context, msg channels.Message) error {
	if msg.Recipient == nil {
		return channels.Permanent(errors.New("sms: message has no recipient"))
	}
	r := msg.Recipient
	if !e164RE.MatchString(r.Phone) {
		return channels.Permanent(fmt.Errorf("sms to recipient %s: phone %q is not an E.164 number", r.ID, r.Phone))
	}
	if err := s.checkCountry(r.Phone); err != nil {
		return channels.Permanent(fmt.Errorf("sms to recipient %s: %w", r.ID, err))
	}
	text, segs, enc, err := s.render(msg.Notifier, msg.Params)
	if err != nil {
		return channels.Permanent(fmt.Errorf("sms %s to recipient %s: %w", msg.Notifier, r.ID, err))
	}
	if segs > s.cfg.MaxSegments {
		return channels.Permanent(fmt.Errorf("sms %s to recipient %s: the text is %d %s segments, more than channels.sms.max_segments (%d)",
			msg.Notifier, r.ID, segs, enc, s.cfg.MaxSegments))
	}
	if s.limiter != nil {
		now := s.clock()
		res := s.limiter.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			// Give the token back: the job snoozes and comes back later.
			res.CancelAt(now)
			return channels.RateLimited(fmt.Errorf("channels.sms.rate (%g/s) reached", s.cfg.Rate), d)
		}
	}
	form := url.Values{"To": {r.Phone}, "From": {s.cfg.From}, "Body": {text}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return channels.Permanent(fmt.Errorf("sms: build request: %w", err))
	}
	req.SetBasicAuth(s.cfg.AccountSID, s.cfg.AuthToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "notifyd")
	channels.SetProvider(ctx, "twilio")
	billed, err := s.post(req, segs, r.Phone)
	attrs := []any{slog.String("channel", Name), slog.String("delivery_id", msg.DeliveryID),
		slog.String("notifier", msg.Notifier), slog.String("recipient", r.ID),
		slog.Int("segments", segs), slog.String("encoding", string(enc)), slog.Int("attempt", msg.Attempt)}
	if err != nil {
		kind, _ := channels.Classify(err)
		s.logger.DebugContext(ctx, "sms failed", append(attrs, slog.String("kind", kind.String()), slog.Any("error", err))...)
		return fmt.Errorf("sms %s to recipient %s: %w", msg.Notifier, r.ID, err)
	}
	s.logger.DebugContext(ctx, "sms sent", attrs...)
	// The provider records the bill: Twilio's count when it gave one.
	channels.SetProvider(ctx, provider(billed))
	return nil
}

// provider is the ledger's provider for a message of segs segments.
func provider(segs int) string {
	if segs == 1 {
		return "twilio (1 segment)"
	}
	return fmt.Sprintf("twilio (%d segments)", segs)
}

// post sends req, a message to the number to, and classifies Twilio's
// answer. On success it returns the segments the message was billed as:
// Twilio's num_segments, else segs. Error 21610 (the recipient replied STOP)
// also suppresses the number, so no later message is sent to it.
func (s *Sender) post(req *http.Request, segs int, to string) (int, error) {
	const dest = "twilio messages api"
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL carries the account SID; the error need not
		}
		return 0, channels.Temporary(fmt.Errorf("%s: %w", dest, err), 0)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, safehttp.MaxResponseBody))
	resp.Body.Close()
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		var m twilioMessage
		if json.Unmarshal(body, &m) == nil {
			if n, err := strconv.Atoi(m.NumSegments); err == nil && n > 0 {
				return n, nil
			}
		}
		return segs, nil
	}
	var te twilioError
	_ = json.Unmarshal(body, &te)
	what := fmt.Sprintf("%s: HTTP %d", dest, code)
	if te.Code != 0 {
		what += fmt.Sprintf(", error %d", te.Code)
	}
	if te.Message != "" {
		what += ": " + te.Message
	}
	err = errors.New(what)
	retryAfter := safehttp.ParseRetryAfter(resp.Header.Get("Retry-After"), s.clock())
	switch {
	case te.Code == twilioUnsubscribed:
		return 0, channels.Suppress(fmt.Errorf("%w (%s)", err, refusedCodes[te.Code]), to, refusedCodes[te.Code])
	case refusedCodes[te.Code] != "":
		return 0, channels.Permanent(fmt.Errorf("%w (%s)", err, refusedCodes[te.Code]))
	case code == http.StatusTooManyRequests:
		return 0, channels.RateLimited(err, retryAfter)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return 0, channels.Temporary(fmt.Errorf("%w: Twilio refused the credentials: check channels.sms.account_sid and auth_token", err), 0)
	case code >= 500:
		return 0, channels.Temporary(err, retryAfter)
	case code >= 400:
		return 0, channels.Permanent(err)
	default:
		return 0, channels.Temporary(err, retryAfter)
	}
}
