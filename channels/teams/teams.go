// Package teams is the Microsoft Teams channel: a bulk channel that posts
// one Adaptive Card per notification to the notifier's Teams webhook URL
// (notifiers.<name>.channels.teams.webhook_url: a Teams workflow's webhook
// trigger, or an incoming webhook).
//
// The request is a POST of a message with one attachment, the card:
//
//	{"type": "message",
//	 "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive",
//	                  "content": {"type": "AdaptiveCard", "version": "1.4",
//	                              "body": [{"type": "TextBlock", "text": "<title>", "weight": "Bolder", "size": "Medium", "wrap": true},
//	                                       {"type": "TextBlock", "text": "<text>", "wrap": true}]}}]}
//
// where title (left out when it renders empty) and text are the notifier's
// teams templates (text/template) rendered over the notification's params.
// Every string in the params is escaped for the markdown subset a
// TextBlock renders before rendering: a backslash goes before each of
// \ * _ ~ ` [ ] ( ) # > - + |, so a param cannot bold, italicise, link or
// start a list, and "{{" becomes "{\u200b{" (a zero-width space between),
// so a param cannot call a TextBlock's date functions ({{DATE(…)}}). The
// template's own markup is sent as written.
//
// Outcomes are classified like the other webhooks: 2xx sent (a workflow
// answers 202); 408 and 5xx temporary; 429 rate limited (Retry-After
// honoured); 410 gone; other 4xx and 3xx refused; destinations on loopback,
// private, link-local, multicast or reserved addresses refused unless
// channels.teams.allow_private is true; timeouts and connection errors
// temporary. A webhook URL is a credential (its query holds the
// signature), so errors and logs name only its scheme and host.
package teams

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/chat"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
)

var (
	_ channels.BulkChannel = (*Sender)(nil)
	_ channels.Targeter    = (*Sender)(nil)
	_ channels.Previewer   = (*Sender)(nil)
)

// DefaultTimeout bounds one post when the config gives none.
const DefaultTimeout = chat.DefaultTimeout

// CardContentType is the attachment's content type of an Adaptive Card.
const CardContentType = "application/vnd.microsoft.card.adaptive"

// Options are the Sender's collaborators: Logger (a debug record per
// attempt; nil discards), Clock (dates HTTP-date Retry-After headers; nil
// is time.Now) and Client (replaces the SSRF-guarded client built from the
// config). The zero value is usable.
type Options = chat.Options

// Sender posts Teams cards. It is safe for concurrent use.
type Sender struct {
	chat.Sender                 // webhook URLs, Configured, Target, posting
	dests       map[string]dest // by notifier
}

type dest struct {
	title, text *template.Template
}

// New returns a Sender for the notifiers (by name) that have a Teams
// webhook_url. A nil cfg means the defaults: a 10 s timeout and private
// destinations refused. Templates checked by the registry are used as
// compiled; otherwise Title and Text are parsed here. New fails when a
// notifier with a webhook_url has an invalid URL, no text, or a template
// that does not parse, naming the notifier.
func New(cfg *Config, notifiers map[string]*Templates, opts Options) (*Sender, error) {
	s := &Sender{Sender: chat.NewSender(cfg, opts), dests: map[string]dest{}}
	for name, t := range notifiers {
		if t == nil || t.WebhookURL == "" {
			continue
		}
		if err := safehttp.CheckURL(t.WebhookURL); err != nil {
			return nil, fmt.Errorf("teams: notifiers.%s.channels.teams.webhook_url: %w", name, err)
		}
		title, text := t.title, t.text
		if text == nil {
			p := config.Default().NewProblems()
			prefix := "notifiers." + name + ".channels.teams."
			title, text = p.Text(nil, prefix+"title", t.Title), p.Text(nil, prefix+"text", t.Text)
			if err := p.Err(); err != nil {
				return nil, fmt.Errorf("teams: %w", err)
			}
			if text == nil {
				return nil, fmt.Errorf("teams: %stext is empty", prefix)
			}
		}
		s.dests[name] = dest{title: title, text: text}
		s.AddURL(name, t.WebhookURL)
	}
	return s, nil
}

// Name returns "teams".
func (s *Sender) Name() string { return Name }

// escaper puts a backslash before every character a TextBlock's markdown
// gives a meaning, and breaks "{{", which opens a date function.
var escaper = strings.NewReplacer(
	`\`, `\\`, `*`, `\*`, `_`, `\_`, `~`, `\~`, "`", "\\`", `[`, `\[`, `]`, `\]`, `(`, `\(`, `)`, `\)`,
	`#`, `\#`, `>`, `\>`, `-`, `\-`, `+`, `\+`, `|`, `\|`, `{{`, "{\u200b{",
)

// Escape escapes s for a TextBlock's markdown, as params are before
// rendering.
func Escape(s string) string { return escaper.Replace(s) }

// Render renders the notifier's title and text over params, each string
// param escaped (Escape).
func (s *Sender) Render(notifier string, params map[string]any) (title, text string, err error) {
	d, ok := s.dests[notifier]
	if !ok {
		return "", "", fmt.Errorf("notifier %q has no teams webhook_url", notifier)
	}
	esc := chat.EscapeParams(params, Escape)
	if title, err = chat.Render(d.title, esc); err != nil {
		return "", "", fmt.Errorf("teams: render title: %w", err)
	}
	if text, err = chat.Render(d.text, esc); err != nil {
		return "", "", fmt.Errorf("teams: render text: %w", err)
	}
	return strings.TrimSpace(title), text, nil
}

// Preview renders the notifier's card text without sending.
func (s *Sender) Preview(notifier string, params map[string]any, _ channels.Recipient) ([]channels.Part, error) {
	title, text, err := s.Render(notifier, params)
	if err != nil {
		return nil, err
	}
	return []channels.Part{{Name: "title", Value: title}, {Name: "text", Value: text}}, nil
}

// Card is an Adaptive Card as the channel sends it.
type Card struct {
	Type    string      `json:"type"`
	Version string      `json:"version"`
	Body    []TextBlock `json:"body"`
}

// TextBlock is an Adaptive Card's text element.
type TextBlock struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Weight string `json:"weight,omitempty"`
	Size   string `json:"size,omitempty"`
	Wrap   bool   `json:"wrap"`
}

// Attachment is a message's attachment: a card.
type Attachment struct {
	ContentType string `json:"contentType"`
	Content     Card   `json:"content"`
}

// Message is what the webhook receives.
type Message struct {
	Type        string       `json:"type"`
	Attachments []Attachment `json:"attachments"`
}

// card builds the message of a title and a text.
func card(title, text string) Message {
	c := Card{Type: "AdaptiveCard", Version: "1.4"}
	if title != "" {
		c.Body = append(c.Body, TextBlock{Type: "TextBlock", Text: title, Weight: "Bolder", Size: "Medium", Wrap: true})
	}
	c.Body = append(c.Body, TextBlock{Type: "TextBlock", Text: text, Wrap: true})
	return Message{Type: "message", Attachments: []Attachment{{ContentType: CardContentType, Content: c}}}
}

// SendBulk renders the notifier's card over msg.Params and posts it. A
// notifier without a Teams webhook_url, or params the templates cannot
// render, are refused (channels.Permanent).
func (s *Sender) SendBulk(ctx context.Context, msg channels.Message) error {
	if !s.Configured(msg.Notifier) {
		return channels.Permanent(fmt.Errorf("notifier %q has no teams webhook_url", msg.Notifier))
	}
	title, text, err := s.Render(msg.Notifier, msg.Params)
	if err != nil {
		return channels.Permanent(err)
	}
	body, err := json.Marshal(card(title, text))
	if err != nil {
		return channels.Permanent(fmt.Errorf("teams: encode body: %w", err))
	}
	return s.PostMessage(ctx, Name, msg, body)
}
