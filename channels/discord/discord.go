// Package discord is the Discord channel: a bulk channel that posts one
// message per notification to the notifier's Discord webhook URL
// (notifiers.<name>.channels.discord.webhook_url).
//
// The request is a POST of
//
//	{"content": "<text>", "allowed_mentions": {"parse": []}}
//
// where text is the notifier's discord.text template (text/template)
// rendered over the notification's params. Every string in the params is
// escaped for Discord's markdown before rendering: a backslash goes before
// each of \ * _ ~ ` | > < [ ] # - @, so a param cannot bold, strike,
// spoil, quote, link or mention; the template's own markup is sent as
// written. allowed_mentions with no parse kinds keeps any mention left in
// the text (@everyone, @here, <@id>, a role) from notifying anybody,
// whoever wrote it. A message is at most MaxContent characters: a longer
// one is cut short with "…".
//
// Outcomes are classified like the other webhooks: 2xx sent; 408 and 5xx
// temporary; 429 rate limited (Retry-After honoured); 410 gone; 404 (a
// deleted webhook) and other 4xx and 3xx refused; destinations on
// loopback, private, link-local, multicast or reserved addresses refused
// unless channels.discord.allow_private is true; timeouts and connection
// errors temporary. A webhook URL is a credential (its path holds the
// token), so errors and logs name only its scheme and host.
package discord

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

// MaxContent is the most characters a Discord message's content has.
const MaxContent = 2000

// Options are the Sender's collaborators: Logger (a debug record per
// attempt; nil discards), Clock (dates HTTP-date Retry-After headers; nil
// is time.Now) and Client (replaces the SSRF-guarded client built from the
// config). The zero value is usable.
type Options = chat.Options

// Sender posts Discord messages. It is safe for concurrent use.
type Sender struct {
	chat.Sender                 // webhook URLs, Configured, Target, posting
	dests       map[string]dest // by notifier
}

type dest struct {
	text *template.Template
}

// New returns a Sender for the notifiers (by name) that have a Discord
// webhook_url. A nil cfg means the defaults: a 10 s timeout and private
// destinations refused. A notifier's text checked by the registry is used
// as compiled; otherwise its Text is parsed here. New fails when a
// notifier with a webhook_url has an invalid URL, no text, or text that
// does not parse, naming the notifier.
func New(cfg *Config, notifiers map[string]*Templates, opts Options) (*Sender, error) {
	s := &Sender{Sender: chat.NewSender(cfg, opts), dests: map[string]dest{}}
	for name, t := range notifiers {
		if t == nil || t.WebhookURL == "" {
			continue
		}
		if err := safehttp.CheckURL(t.WebhookURL); err != nil {
			return nil, fmt.Errorf("discord: notifiers.%s.channels.discord.webhook_url: %w", name, err)
		}
		tmpl := t.text
		if tmpl == nil {
			p := config.Default().NewProblems()
			tmpl = p.Text(nil, "notifiers."+name+".channels.discord.text", t.Text)
			if err := p.Err(); err != nil {
				return nil, fmt.Errorf("discord: %w", err)
			}
			if tmpl == nil {
				return nil, fmt.Errorf("discord: notifiers.%s.channels.discord.text is empty", name)
			}
		}
		s.dests[name] = dest{text: tmpl}
		s.AddURL(name, t.WebhookURL)
	}
	return s, nil
}

// Name returns "discord".
func (s *Sender) Name() string { return Name }

// escaper puts a backslash before every character Discord's markdown gives
// a meaning, and before @ (mentions) and < (mentions, channels, emoji,
// timestamps).
var escaper = strings.NewReplacer(
	`\`, `\\`, `*`, `\*`, `_`, `\_`, `~`, `\~`, "`", "\\`", `|`, `\|`, `>`, `\>`, `<`, `\<`,
	`[`, `\[`, `]`, `\]`, `#`, `\#`, `-`, `\-`, `@`, `\@`,
)

// Escape escapes s for Discord's markdown, as params are before rendering.
func Escape(s string) string { return escaper.Replace(s) }

// Render renders the notifier's text over params, each string param
// escaped (Escape), cut to MaxContent characters.
func (s *Sender) Render(notifier string, params map[string]any) (string, error) {
	d, ok := s.dests[notifier]
	if !ok {
		return "", fmt.Errorf("notifier %q has no discord webhook_url", notifier)
	}
	text, err := chat.RenderText(d.text, params, Escape, MaxContent)
	if err != nil {
		return "", fmt.Errorf("discord: render text: %w", err)
	}
	return text, nil
}

// Preview renders the notifier's message without sending.
func (s *Sender) Preview(notifier string, params map[string]any, _ channels.Recipient) ([]channels.Part, error) {
	return chat.TextPreview(s.Render(notifier, params))
}

// message is the webhook's JSON body.
type message struct {
	Content         string          `json:"content"`
	AllowedMentions allowedMentions `json:"allowed_mentions"`
}

type allowedMentions struct {
	Parse []string `json:"parse"`
}

// SendBulk renders the notifier's text over msg.Params and posts it. A
// notifier without a Discord webhook_url, or params the template cannot
// render, are refused (channels.Permanent).
func (s *Sender) SendBulk(ctx context.Context, msg channels.Message) error {
	if !s.Configured(msg.Notifier) {
		return channels.Permanent(fmt.Errorf("notifier %q has no discord webhook_url", msg.Notifier))
	}
	text, err := s.Render(msg.Notifier, msg.Params)
	if err != nil {
		return channels.Permanent(err)
	}
	body, err := json.Marshal(message{Content: text, AllowedMentions: allowedMentions{Parse: []string{}}})
	if err != nil {
		return channels.Permanent(fmt.Errorf("discord: encode body: %w", err))
	}
	return s.PostMessage(ctx, Name, msg, body)
}
