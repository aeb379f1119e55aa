package slack

import (
	"text/template"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/chat"
)

// Name is the channel's name in config and in the ledger.
const Name = "slack"

// Plugin registers the Slack channel: bulk, one message per notification to
// each notifier's own incoming-webhook URL, so it needs no channels.slack
// section to be configured.
var Plugin = channels.Plugin{
	Name: Name,
	Bulk: true,
	Open: open,
}

// Config is the optional channels.slack section: timeout (one post's bound,
// default 10s) and allow_private (webhook URLs on loopback or private
// addresses, for a local stand-in in development and tests only).
type Config = chat.Config

// Templates is a notifier's slack section.
type Templates struct {
	WebhookURL string `yaml:"webhook_url"`
	Text       string `yaml:"text"`

	text *template.Template
}

func open(s *channels.Setup) (any, error) {
	cfg, notifiers, ok := chat.Decode(s, "a Slack incoming-webhook URL", func(t *Templates) string { return t.WebhookURL },
		func(n channels.NotifierSection, t *Templates) {
			t.text = chat.CheckText(s.Problems, n, t.Text)
		})
	if !ok {
		return nil, nil
	}
	return New(cfg, notifiers, Options{Logger: s.Logger, Clock: s.Clock})
}
