package chat

import (
	"context"
	"log/slog"
	"net/http"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
)

// DefaultTimeout bounds one post when the config gives none.
const DefaultTimeout = 10 * time.Second

// Config is a webhook chat channel's optional channels.<name> section.
type Config struct {
	// Timeout bounds one post; default 10s.
	Timeout config.Duration `yaml:"timeout"`
	// AllowPrivate lets webhook URLs be on loopback or private addresses:
	// a local stand-in for development and tests only.
	AllowPrivate bool `yaml:"allow_private"`
}

// SetDefaults sets a 10 s timeout.
func (c *Config) SetDefaults() { c.Timeout = config.Duration(DefaultTimeout) }

// DecodeConfig decodes and checks the channel's section.
func DecodeConfig(s *channels.Setup) *Config {
	cfg := &Config{}
	s.Problems.Decode(s.Section, cfg)
	s.Problems.Positive(s.Section, "timeout", cfg.Timeout)
	return cfg
}

// Decode decodes a webhook chat channel's section (DecodeConfig) and its
// notifiers' sections into Ts, checking each one's webhook_url
// (CheckWebhookURL; url reads it, hint says what it is) and then check
// checks the rest. ok is false when anything is wrong.
func Decode[T any](s *channels.Setup, hint string, url func(*T) string, check func(channels.NotifierSection, *T)) (cfg *Config, notifiers map[string]*T, ok bool) {
	cfg = DecodeConfig(s)
	notifiers = channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *T) {
		CheckWebhookURL(s.Problems, n, url(t), hint)
		check(n, t)
	})
	return cfg, notifiers, s.Problems.Err() == nil
}

// CheckWebhookURL checks a notifier's webhook_url: set (hint says what it
// is when missing) and an HTTP(S) URL.
func CheckWebhookURL(p *config.Problems, n channels.NotifierSection, webhookURL, hint string) {
	if webhookURL == "" {
		p.Add(n.Section, "webhook_url", "must be set (%s)", hint)
	} else {
		p.HTTPURL(n.Section, "webhook_url", webhookURL)
	}
}

// CheckText reports a notifier's text missing, compiles it and checks that
// it renders over the notifier's example params.
func CheckText(p *config.Problems, n channels.NotifierSection, text string) *template.Template {
	if text == "" {
		p.Add(n.Section, "text", "must be set")
	}
	t := p.Text(n.Section, "text", text)
	p.RenderCheck(n.Section, "text", t, n.Example)
	return t
}

// Options are a chat Sender's collaborators. The zero value is usable.
type Options struct {
	// Logger receives a debug record per attempt. Nil discards.
	Logger *slog.Logger
	// Clock dates HTTP-date Retry-After headers. Nil is time.Now.
	Clock func() time.Time
	// Client replaces the SSRF-guarded client built from the config.
	Client *http.Client
}

// Sender is what a webhook chat channel's sender holds besides its
// templates: each notifier's webhook URL and the collaborators. Embedded, it
// gives the channel's Configured and Target.
type Sender struct {
	urls   map[string]string // webhook URL by notifier
	client *http.Client
	logger *slog.Logger
	clock  func() time.Time
}

// NewSender returns a Sender with opts, its nil fields filled in: the
// SSRF-guarded client cfg describes (nil cfg: the defaults), a logger that
// discards, time.Now.
func NewSender(cfg *Config, opts Options) Sender {
	if cfg == nil {
		cfg = &Config{}
	}
	s := Sender{urls: map[string]string{}, client: opts.Client, logger: opts.Logger, clock: opts.Clock}
	if s.client == nil {
		s.client = safehttp.New(cfg.Timeout.D(), cfg.AllowPrivate)
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	return s
}

// AddURL records notifier's webhook URL.
func (s *Sender) AddURL(notifier, webhookURL string) { s.urls[notifier] = webhookURL }

// Configured reports whether notifier has a webhook_url.
func (s *Sender) Configured(notifier string) bool {
	_, ok := s.urls[notifier]
	return ok
}

// Target names a message's destination: the host of its notifier's
// webhook_url, never its path or query, which hold the credential.
func (s *Sender) Target(msg channels.Message) string {
	if u, ok := s.urls[msg.Notifier]; ok {
		return channels.URLHost(u)
	}
	return ""
}

// PostMessage posts body to msg's notifier's webhook URL (Post) and logs
// the attempt at debug level as "<name> post".
func (s *Sender) PostMessage(ctx context.Context, name string, msg channels.Message, body []byte) error {
	u := s.urls[msg.Notifier]
	err := Post(ctx, s.client, u, body, s.clock)
	s.logger.DebugContext(ctx, name+" post", "channel", name, "delivery_id", msg.DeliveryID,
		"notification_id", msg.NotificationID, "notifier", msg.Notifier, "url", safehttp.Redact(u, false),
		"attempt", msg.Attempt, "error", err)
	return err
}
