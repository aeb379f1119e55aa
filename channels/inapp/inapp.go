// Package inapp is the in-app inbox channel: a notifier's in_app section
// renders the inbox item (title, body, url) that the fan-out writes, exactly
// once per recipient, inside its own transaction. Nothing is sent, so the
// channel needs no config of its own and no profile address.
//
//	notifiers:
//	  comment.created:
//	    channels:
//	      in_app: {default: immediate, title: "{{.author_name}} commented", body: "", url: "{{.url}}"}
package inapp

import (
	"context"
	"fmt"
	"text/template"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/templates"
)

// Name is the channel's name in config and in the ledger.
const Name = "in_app"

// Plugin registers the inbox.
var Plugin = channels.Plugin{
	Name:         Name,
	PerRecipient: true,
	Inbox:        true,
	DefaultMode:  notifytype.ModeImmediate,
	Open:         open,
}

var (
	_ channels.Channel      = (*Inbox)(nil)
	_ channels.InboxChannel = (*Inbox)(nil)
	_ channels.Previewer    = (*Inbox)(nil)
)

// Templates is a notifier's in_app section (text/template over params).
type Templates struct {
	Title string `yaml:"title"`
	Body  string `yaml:"body"`
	URL   string `yaml:"url"`

	title, body, url *template.Template
}

// Inbox renders the inbox items of the notifiers that use it.
type Inbox struct {
	notifiers map[string]*Templates
}

func open(s *channels.Setup) (any, error) {
	if !s.Section.Empty() {
		s.Problems.Add(s.Section, "", "the in_app channel has no settings (its templates are per notifier)")
	}
	p := s.Problems
	notifiers := channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *Templates) {
		if t.Title == "" {
			p.Add(n.Section, "title", "must be set (every inbox item has a title)")
		}
		t.title = p.Text(n.Section, "title", t.Title)
		t.body = p.Text(n.Section, "body", t.Body)
		t.url = p.Text(n.Section, "url", t.URL)
		p.RenderCheck(n.Section, "title", t.title, n.Example)
		p.RenderCheck(n.Section, "body", t.body, n.Example)
		p.RenderCheck(n.Section, "url", t.url, n.Example)
	})
	return &Inbox{notifiers: notifiers}, nil
}

// Name returns "in_app".
func (*Inbox) Name() string { return Name }

// Addressable accepts every recipient: the inbox needs no address.
func (*Inbox) Addressable(string, channels.Recipient) error { return nil }

// Send is never called: inbox items are written by the fan-out.
func (*Inbox) Send(_ context.Context, msg channels.Message) error {
	return channels.Permanent(fmt.Errorf("in_app items are written at fan-out, not sent (delivery %s)", msg.DeliveryID))
}

// RenderInbox renders notifier's title, body and url with params as the dot.
func (in *Inbox) RenderInbox(notifier string, params map[string]any) (channels.InboxItem, error) {
	t := in.notifiers[notifier]
	if t == nil {
		return channels.InboxItem{}, fmt.Errorf("notifier %q has no in_app channel", notifier)
	}
	var it channels.InboxItem
	var err error
	if it.Title, err = templates.RenderText(t.title, params); err != nil {
		return channels.InboxItem{}, err
	}
	if it.Body, err = templates.RenderText(t.body, params); err != nil {
		return channels.InboxItem{}, err
	}
	if it.URL, err = templates.RenderText(t.url, params); err != nil {
		return channels.InboxItem{}, err
	}
	return it, nil
}

// Preview renders the item the notifier's inbox would show for params.
func (in *Inbox) Preview(notifier string, params map[string]any, _ channels.Recipient) ([]channels.Part, error) {
	it, err := in.RenderInbox(notifier, params)
	if err != nil {
		return nil, err
	}
	return []channels.Part{{Name: "title", Value: it.Title}, {Name: "body", Value: it.Body}, {Name: "url", Value: it.URL}}, nil
}
