// Package sms is the SMS channel: it renders a notifier's sms text for one
// recipient and sends it to the recipient's phone (profile `phone`, E.164)
// through an SMS API: Twilio's Messages API, or Vonage's Messages API.
//
// # Providers
//
// channels.sms.providers is an ordered list of providers (Provider), each
// with its credentials, lanes, rate and timeout; a text tries them in order
// (package channels/internal/failover): a provider that is down, times out,
// answers 5xx or 429, or refuses its own credentials or balance passes the
// text to the next within the same attempt; a refusal of the number or the
// text is final. Without the list, channels.sms's own account_sid,
// auth_token, from and base_url are one Twilio provider named twilio.
//
// # Requests
//
// Twilio:
//
//	POST {base_url}/2010-04-01/Accounts/{account_sid}/Messages.json
//	Authorization: Basic base64(account_sid:auth_token)
//	Content-Type: application/x-www-form-urlencoded
//
//	To=+14155550123&From=<from>&Body=<rendered text>
//
// Vonage:
//
//	POST {base_url}/v1/messages
//	Authorization: Bearer <JWT, RS256, claims application_id, iat, exp, jti>
//	Content-Type: application/json
//
//	{"message_type":"text","channel":"sms","to":"14155550123","from":"<from>","text":"<rendered text>"}
//
// base_url is the provider's public API unless the entry says otherwise (a
// regional edge, or a local server speaking the same API in tests).
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
// ("twilio (2 segments)", channels.SetProvider), the provider's own count
// when its reply carries one (Twilio's num_segments), else ours; the
// provider's message id (Twilio's sid, Vonage's message_uuid) with
// channels.SetProviderMessageID.
//
// # Outcomes
//
// Twilio: 2xx is sent. Its invalid-number errors (21211 invalid To, 21614
// not a mobile number, 21610 the recipient replied STOP, 21408 and 21612 a
// number the account cannot reach) and any other 4xx are refused
// (channels.Permanent). 429 is rate limited, Retry-After honoured. 5xx,
// timeouts and connection errors are temporary. 401 and 403 are temporary
// with an error that names the credentials.
//
// Vonage: 202 is sent; 400 and 422 refused; 401, 403 and 402 (low balance)
// temporary; 429 rate limited; 5xx temporary.
package sms

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/failover"
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
	// Client replaces the HTTP client the providers share (one that does
	// not follow redirects; each provider's timeout bounds its requests).
	Client *http.Client
}

// Sender sends text messages through its providers. It is safe for
// concurrent use.
type Sender struct {
	cfg       *Config
	notifiers map[string]*Templates
	client    *http.Client
	logger    *slog.Logger
	clock     func() time.Time
	limiter   *rate.Limiter // nil: unlimited (channels.sms.rate)
	providers *failover.List[api]
}

// New returns a Sender for channels.sms cfg, sending the notifiers' sms
// templates by notifier name (only those notifiers are sendable). Templates
// checked by the registry are used as compiled; others are parsed here.
func New(cfg *Config, notifiers map[string]*Templates, opts Options) (*Sender, error) {
	if cfg == nil {
		return nil, errors.New("sms: channels.sms is not configured")
	}
	s := &Sender{
		cfg:       cfg,
		notifiers: map[string]*Templates{},
		client:    opts.Client,
		logger:    opts.Logger,
		clock:     opts.Clock,
	}
	if s.cfg.MaxSegments <= 0 {
		s.cfg.MaxSegments = DefaultMaxSegments
	}
	if cfg.Rate > 0 {
		// A burst of one second's worth, as channels.email.rate.
		s.limiter = rate.NewLimiter(rate.Limit(cfg.Rate), max(1, int(math.Ceil(cfg.Rate))))
	}
	if s.client == nil {
		// Each provider's timeout bounds its requests (see failover).
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		t.MaxIdleConnsPerHost = 64
		s.client = &http.Client{Transport: t,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	ps, err := newProviders(cfg, s.client, s.clock)
	if err != nil {
		return nil, err
	}
	s.providers = &failover.List[api]{Providers: ps, Channel: Name, Exhausted: "every sms provider failed",
		Clock: s.clock, Log: s.logger}
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
	var billed int
	var via string
	err = s.providers.Send(ctx, func(ctx context.Context, p *provider) (string, error) {
		id, n, err := p.Via.send(ctx, r.Phone, text)
		billed, via = n, p.Name
		return id, err
	})
	attrs := []any{slog.String("channel", Name), slog.String("delivery_id", msg.DeliveryID),
		slog.String("notifier", msg.Notifier), slog.String("recipient", r.ID),
		slog.Int("segments", segs), slog.String("encoding", string(enc)), slog.Int("attempt", msg.Attempt)}
	if err != nil {
		kind, _ := channels.Classify(err)
		s.logger.DebugContext(ctx, "sms failed", append(attrs, slog.String("kind", kind.String()), slog.Any("error", err))...)
		return fmt.Errorf("sms %s to recipient %s: %w", msg.Notifier, r.ID, err)
	}
	s.logger.DebugContext(ctx, "sms sent", attrs...)
	// The provider records the bill: the provider's count when it gave one.
	if billed <= 0 {
		billed = segs
	}
	channels.SetProvider(ctx, providerLabel(via, billed))
	return nil
}

// providerLabel is the ledger's provider for a message of segs segments
// sent through the provider the report names.
func providerLabel(name string, segs int) string {
	if segs == 1 {
		return name + " (1 segment)"
	}
	return fmt.Sprintf("%s (%d segments)", name, segs)
}
