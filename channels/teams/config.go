package teams

import (
	"text/template"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
)

// Name is the channel's name in config and in the ledger.
const Name = "teams"

// Plugin registers the Microsoft Teams channel: bulk, one card per
// notification to each notifier's own webhook URL, so it needs no
// channels.teams section to be configured.
var Plugin = channels.Plugin{
	Name: Name,
	Bulk: true,
	Open: open,
}

// Config is the optional channels.teams section.
type Config struct {
	// Timeout bounds one post; default 10s.
	Timeout config.Duration `yaml:"timeout"`
	// AllowPrivate lets webhook URLs be on loopback or private addresses:
	// a local stand-in for development and tests only.
	AllowPrivate bool `yaml:"allow_private"`
}

// SetDefaults sets a 10 s timeout.
func (c *Config) SetDefaults() { c.Timeout = config.Duration(DefaultTimeout) }

// Templates is a notifier's teams section: the channel's webhook URL (a
// Teams workflow's "When a Teams webhook request is received" trigger, or an
// incoming webhook) and the card's title and text, text/templates over the
// params. Text is required, title optional.
type Templates struct {
	WebhookURL string `yaml:"webhook_url"`
	Title      string `yaml:"title"`
	Text       string `yaml:"text"`

	title, text *template.Template
}

func open(s *channels.Setup) (any, error) {
	p := s.Problems
	cfg := &Config{}
	p.Decode(s.Section, cfg)
	p.Positive(s.Section, "timeout", cfg.Timeout)
	notifiers := channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *Templates) {
		if t.WebhookURL == "" {
			p.Add(n.Section, "webhook_url", "must be set (a Teams workflow or incoming webhook URL)")
		} else {
			p.HTTPURL(n.Section, "webhook_url", t.WebhookURL)
		}
		if t.Text == "" {
			p.Add(n.Section, "text", "must be set")
		}
		t.title = p.Text(n.Section, "title", t.Title)
		t.text = p.Text(n.Section, "text", t.Text)
		p.RenderCheck(n.Section, "title", t.title, n.Example)
		p.RenderCheck(n.Section, "text", t.text, n.Example)
	})
	if p.Err() != nil {
		return nil, nil
	}
	return New(cfg, notifiers, Options{Logger: s.Logger, Clock: s.Clock})
}
