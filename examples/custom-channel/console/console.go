// Package console is a notifyd channel of its own, written the way a
// program that embeds notifyd adds one: it writes one JSON line per message
// to the file named in its config section.
//
//	channels:
//	  console:
//	    path: messages.jsonl        # required
//	notifiers:
//	  comment.created:
//	    channels:
//	      console: {text: "{{.author_name}} commented on {{.post_title}}"}
//
// It is per-recipient (each recipient's preferences can turn it off, as for
// email), needs no profile address, and cannot digest. Everything notifyd
// does around a send — the ledger row, retries, the preference center's
// column, the API document — comes from registering Plugin; this package is
// only the channel.
package console

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/templates"
)

// Name is the channel's name in config, in preferences and in the ledger.
const Name = "console"

// Plugin registers the channel: pass it in server.Options.Channels (and to
// server.LoadConfig, so `check` knows its sections).
var Plugin = channels.Plugin{
	Name:         Name,
	PerRecipient: true,
	Open:         open,
}

var (
	_ channels.Channel   = (*Channel)(nil)
	_ channels.Previewer = (*Channel)(nil)
)

// Config is the channels.console section.
type Config struct {
	// Path is the file messages are appended to, one JSON object a line.
	Path string `yaml:"path"`
}

// Templates is a notifier's console section.
type Templates struct {
	// Text is a text/template over the notification's params.
	Text string `yaml:"text"`

	text *template.Template
}

// Line is one message as written to the file.
type Line struct {
	DeliveryID     string    `json:"delivery_id"` // the idempotency handle: the same on every retry
	NotificationID string    `json:"notification_id"`
	Notifier       string    `json:"notifier"`
	Key            string    `json:"key"`
	Recipient      string    `json:"recipient"`
	Reason         string    `json:"reason"`
	Attempt        int       `json:"attempt"`
	Text           string    `json:"text"`
	At             time.Time `json:"at"`
}

// Channel appends lines to the configured file. The file is opened at the
// first send, so `notifyd check` creates nothing.
type Channel struct {
	path      string
	notifiers map[string]*Templates
	clock     func() time.Time

	mu sync.Mutex
	f  *os.File
}

func open(s *channels.Setup) (any, error) {
	p := s.Problems
	notifiers := channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *Templates) {
		if t.Text == "" {
			p.Add(n.Section, "text", "must be set")
		}
		t.text = p.Text(n.Section, "text", t.Text)
		p.RenderCheck(n.Section, "text", t.text, n.Example)
	})
	if s.Section.Empty() {
		return nil, nil // not configured: console deliveries are unavailable
	}
	cfg := &Config{}
	p.Decode(s.Section, cfg)
	if cfg.Path == "" {
		p.Add(s.Section, "path", "must be set (the file messages are appended to)")
	}
	return &Channel{path: cfg.Path, notifiers: notifiers, clock: s.Clock}, nil
}

// Name returns "console".
func (c *Channel) Name() string { return Name }

// Addressable accepts every recipient of a notifier that has a console
// section.
func (c *Channel) Addressable(notifier string, _ channels.Recipient) error {
	if _, ok := c.notifiers[notifier]; !ok {
		return fmt.Errorf("notifier %q has no console templates", notifier)
	}
	return nil
}

// Send renders the notifier's text and appends the line. A template that
// cannot render is permanent (retrying renders the same error); a file that
// cannot be written is temporary (retried with backoff).
func (c *Channel) Send(_ context.Context, msg channels.Message) error {
	t, ok := c.notifiers[msg.Notifier]
	if !ok || msg.Recipient == nil {
		return channels.Permanent(fmt.Errorf("console: no templates for %q or no recipient", msg.Notifier))
	}
	text, err := templates.RenderText(t.text, msg.Params)
	if err != nil {
		return channels.Permanent(fmt.Errorf("console: %w", err))
	}
	b, err := json.Marshal(Line{DeliveryID: msg.DeliveryID, NotificationID: msg.NotificationID, Notifier: msg.Notifier,
		Key: msg.Key, Recipient: msg.Recipient.ID, Reason: msg.Reason, Attempt: msg.Attempt, Text: text,
		At: c.clock().UTC()})
	if err != nil {
		return channels.Permanent(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		if c.f, err = os.OpenFile(c.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return channels.Temporary(fmt.Errorf("console: %w", err), 0)
		}
	}
	if _, err := c.f.Write(append(b, '\n')); err != nil {
		return channels.Temporary(fmt.Errorf("console: write %s: %w", c.path, err), 0)
	}
	return nil
}

// Preview renders the notifier's text without writing it.
func (c *Channel) Preview(notifier string, params map[string]any, _ channels.Recipient) ([]channels.Part, error) {
	t, ok := c.notifiers[notifier]
	if !ok {
		return nil, fmt.Errorf("notifier %q has no console templates", notifier)
	}
	text, err := templates.RenderText(t.text, params)
	if err != nil {
		return nil, err
	}
	return []channels.Part{{Name: "text", Value: text}}, nil
}

// Close closes the file; the server calls it when it closes.
func (c *Channel) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	return err
}
