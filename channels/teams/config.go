package teams

import (
	"text/template"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/chat"
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

// Config is the optional channels.teams section: timeout (one post's bound,
// default 10s) and allow_private (webhook URLs on loopback or private
// addresses, for a local stand-in in development and tests only).
type Config = chat.Config

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
	cfg, notifiers, ok := chat.Decode(s, "a Teams workflow or incoming webhook URL", func(t *Templates) string { return t.WebhookURL },
		func(n channels.NotifierSection, t *Templates) {
			t.text = chat.CheckText(s.Problems, n, t.Text)
			t.title = s.Problems.Text(n.Section, "title", t.Title)
			s.Problems.RenderCheck(n.Section, "title", t.title, n.Example)
		})
	if !ok {
		return nil, nil
	}
	return New(cfg, notifiers, Options{Logger: s.Logger, Clock: s.Clock})
}
