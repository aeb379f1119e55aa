// Package slack is the Slack channel: a bulk channel that posts one message per
// notification to the notifier's Slack incoming-webhook URL
// (notifiers.<name>.channels.slack.webhook_url).
//
// The request is a POST of {"text": "<text>"}, where text is the notifier's
// channels.slack.text template (text/template) rendered over the notification's
// params. Every string in the params is escaped (&, <, > become &amp;, &lt;,
// &gt;) before rendering, so params cannot add Slack markup; the template's own
// markup is sent as written. Outcomes are classified like webhooks: 2xx sent; 408 and 5xx
// temporary; 429 rate limited (Retry-After honoured); 410 gone (Slack's
// channel_is_archived); other 4xx and 3xx refused; destinations on loopback,
// private, link-local, multicast or reserved addresses refused unless
// channels.slack.allow_private is true; timeouts and connection errors temporary.
//
// A Slack webhook URL is a credential (its path is the token), so errors and logs
// name only its scheme and host.
package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
)

var (
	_ channels.BulkChannel = (*Sender)(nil)
	_ channels.Targeter    = (*Sender)(nil)
)

// DefaultTimeout bounds one post when the config gives none.
const DefaultTimeout = 10 * time.Second

// Options are the Sender's collaborators. The zero value is usable.
type Options struct {
	// Logger receives a debug record per attempt. Nil discards.
	Logger *slog.Logger
	// Clock dates HTTP-date Retry-After headers. Nil is time.Now.
	Clock func() time.Time
	// Client replaces the SSRF-guarded client built from the config
	// (safehttp.New(cfg.Timeout, cfg.AllowPrivate)). Tests use it; a replacement
	// should refuse private destinations the same way.
	Client *http.Client
}

// Sender posts Slack messages. It is safe for concurrent use.
type Sender struct {
	dests  map[string]dest // by notifier; only notifiers with a webhook_url
	client *http.Client
	logger *slog.Logger
	clock  func() time.Time
}

type dest struct {
	url  string
	text *template.Template
}

// New returns a Sender for the notifiers (by name) that have a Slack
// webhook_url. A nil cfg means the defaults: a 10 s timeout and private
// destinations refused. A notifier's text template checked by the registry is
// used as compiled; otherwise its Text is parsed here. New fails when a notifier with a webhook_url has an invalid
// URL, no text, or text that does not parse, naming the notifier.
func New(cfg *Config, notifiers map[string]*Templates, opts Options) (*Sender, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	s := &Sender{
		dests:  make(map[string]dest),
		client: opts.Client,
		logger: opts.Logger,
		clock:  opts.Clock,
	}
	for name, st := range notifiers {
		if st == nil || st.WebhookURL == "" {
			continue
		}
		if err := safehttp.CheckURL(st.WebhookURL); err != nil {
			return nil, fmt.Errorf("slack: notifiers.%s.channels.slack.webhook_url: %w", name, err)
		}
		tmpl := st.text
		if tmpl == nil {
			if strings.TrimSpace(st.Text) == "" {
				return nil, fmt.Errorf("slack: notifiers.%s.channels.slack.text is empty", name)
			}
			var err error
			// The options the registry's parse uses; its template also prints
			// a missing param as "" rather than "<no value>", so prefer it.
			tmpl, err = template.New(name).Option("missingkey=zero").Parse(st.Text)
			if err != nil {
				return nil, fmt.Errorf("slack: notifiers.%s.channels.slack.text: %w", name, err)
			}
		}
		s.dests[name] = dest{url: st.WebhookURL, text: tmpl}
	}
	if s.client == nil {
		timeout := cfg.Timeout.D()
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		s.client = safehttp.New(timeout, cfg.AllowPrivate)
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	return s, nil
}

// Name returns "slack".
func (s *Sender) Name() string { return Name }

// Target names a message's destination: the host of its notifier's
// webhook_url (Slack's), never its path, which is the credential.
func (s *Sender) Target(msg channels.Message) string {
	d, ok := s.dests[msg.Notifier]
	if !ok {
		return ""
	}
	return channels.URLHost(d.url)
}

// Configured reports whether notifier has a Slack webhook_url.
func (s *Sender) Configured(notifier string) bool {
	_, ok := s.dests[notifier]
	return ok
}

// SendBulk renders the notifier's text over msg.Params and posts it. A notifier
// without a Slack webhook_url, or params the template cannot render, are refused
// (channels.Permanent): retrying would not change either.
func (s *Sender) SendBulk(ctx context.Context, msg channels.Message) error {
	d, ok := s.dests[msg.Notifier]
	if !ok {
		return channels.Permanent(fmt.Errorf("notifier %q has no slack webhook_url", msg.Notifier))
	}
	// The template's own markup (<url|label>, *bold*) stays; a param's &, <
	// and > are escaped, so a param cannot mention @channel (<!channel>),
	// disguise a link (<https://evil|your bank>) or break the template's.
	params, _ := escapeParams(msg.Params).(map[string]any)
	if params == nil {
		params = map[string]any{}
	}
	var text bytes.Buffer
	if err := d.text.Execute(&text, params); err != nil {
		return channels.Permanent(fmt.Errorf("slack: render text: %w", err))
	}
	payload, err := json.Marshal(struct {
		Text string `json:"text"`
	}{text.String()})
	if err != nil {
		return channels.Permanent(fmt.Errorf("slack: encode body: %w", err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(payload))
	if err != nil {
		return channels.Permanent(errors.New("slack: build request: invalid webhook_url"))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "notifyd")

	// The path is the credential: name the host only.
	redacted := safehttp.Redact(d.url, false)
	err = safehttp.Deliver(s.client, req, "POST "+redacted, s.clock)
	attrs := []any{
		slog.String("channel", Name),
		slog.String("delivery_id", msg.DeliveryID),
		slog.String("notification_id", msg.NotificationID),
		slog.String("notifier", msg.Notifier),
		slog.String("url", redacted),
		slog.Int("attempt", msg.Attempt),
	}
	if err != nil {
		kind, _ := channels.Classify(err)
		s.logger.DebugContext(ctx, "slack failed", append(attrs, slog.String("kind", kind.String()), slog.Any("error", err))...)
		return err
	}
	s.logger.DebugContext(ctx, "slack sent", attrs...)
	return nil
}

// slackEscaper escapes the three characters Slack's mrkdwn gives a meaning
// (https://api.slack.com/reference/surfaces/formatting#escaping).
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// escapeParams returns a copy of v with every string escaped for Slack text,
// in maps and arrays at any depth. Map keys are kept as they are: templates
// look values up by them.
func escapeParams(v any) any {
	switch v := v.(type) {
	case string:
		return slackEscaper.Replace(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = escapeParams(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = escapeParams(e)
		}
		return out
	}
	return v
}
