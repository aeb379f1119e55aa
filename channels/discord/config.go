package discord

import (
	"text/template"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
)

// Name is the channel's name in config and in the ledger.
const Name = "discord"

// Plugin registers the Discord channel: bulk, one message per notification
// to each notifier's own webhook URL, so it needs no channels.discord
// section to be configured.
var Plugin = channels.Plugin{
	Name: Name,
	Bulk: true,
	Open: open,
}

// Config is the optional channels.discord section.
type Config struct {
	// Timeout bounds one post; default 10s.
	Timeout config.Duration `yaml:"timeout"`
	// AllowPrivate lets webhook URLs be on loopback or private addresses:
	// a local stand-in for development and tests only.
	AllowPrivate bool `yaml:"allow_private"`
}

// SetDefaults sets a 10 s timeout.
func (c *Config) SetDefaults() { c.Timeout = config.Duration(DefaultTimeout) }

// Templates is a notifier's discord section: the channel's webhook URL
// (Server Settings, Integrations, Webhooks) and the message, a
// text/template over the params.
type Templates struct {
	WebhookURL string `yaml:"webhook_url"`
	Text       string `yaml:"text"`

	text *template.Template
}

func open(s *channels.Setup) (any, error) {
	p := s.Problems
	cfg := &Config{}
	p.Decode(s.Section, cfg)
	p.Positive(s.Section, "timeout", cfg.Timeout)
	notifiers := channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *Templates) {
		if t.WebhookURL == "" {
			p.Add(n.Section, "webhook_url", "must be set (a Discord webhook URL)")
		} else {
			p.HTTPURL(n.Section, "webhook_url", t.WebhookURL)
		}
		if t.Text == "" {
			p.Add(n.Section, "text", "must be set")
		}
		t.text = p.Text(n.Section, "text", t.Text)
		p.RenderCheck(n.Section, "text", t.text, n.Example)
	})
	if p.Err() != nil {
		return nil, nil
	}
	return New(cfg, notifiers, Options{Logger: s.Logger, Clock: s.Clock})
}
