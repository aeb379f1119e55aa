// Package telegram is the Telegram channel: a per-recipient channel that
// sends each recipient a message from your bot through the Bot API's
// sendMessage, to the chat id in the recipient's profile
// (data.telegram_chat_id, or the data key channels.telegram.chat_id_key
// names).
//
// The request is
//
//	POST {api_url}/bot{bot_token}/sendMessage
//	{"chat_id": <id>, "text": "<text>", "parse_mode": "HTML", "link_preview_options": {"is_disabled": true}}
//
// where text is the notifier's telegram.text template (text/template)
// rendered over the notification's params, with every string param
// HTML-escaped first (& < > and "), so a param cannot add a tag or break
// one; the template's own tags (<b>, <i>, <a href>, <code>) are sent as
// written, in the subset Telegram's HTML parse mode takes. A message is at
// most MaxText characters: a longer one is cut short with "…".
//
// Outcomes: {"ok": true} sent, the result's message_id recorded as the
// provider's message id (channels.SetProviderMessageID, with provider
// "telegram"); 429 rate limited for parameters.retry_after seconds (or
// Retry-After); 400 (chat not found, a text the parse mode refuses) and
// 403 (the bot was blocked, or the user never started it) refused; 401 and
// 404 (a bad bot token) and 5xx temporary, as are timeouts and connection
// errors. The bot token is a credential: errors name the API host only.
package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/chat"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// Name is the channel's name in config and in the ledger.
const Name = "telegram"

// DefaultAPIURL is the Bot API's base URL.
const DefaultAPIURL = "https://api.telegram.org"

// DefaultChatIDKey is the profile data key holding the recipient's chat id.
const DefaultChatIDKey = "telegram_chat_id"

// MaxText is the most characters a Telegram message's text has.
const MaxText = 4096

// Plugin registers the Telegram channel. It is per-recipient and reads the
// chat id from the profile's data (see Addressable).
var Plugin = channels.Plugin{
	Name:         Name,
	PerRecipient: true,
	DefaultMode:  notifytype.ModeImmediate,
	Open:         open,
}

var (
	_ channels.Channel   = (*Sender)(nil)
	_ channels.Previewer = (*Sender)(nil)
)

// Config is the channels.telegram section. Without it telegram deliveries
// are `unavailable`.
type Config struct {
	// BotToken is the token @BotFather gave the bot (usually ${VAR}).
	BotToken string `yaml:"bot_token"`
	// APIURL replaces the Bot API's base URL (a local Bot API server).
	APIURL string `yaml:"api_url"`
	// ChatIDKey is the key of the profile's data holding the chat id;
	// default telegram_chat_id.
	ChatIDKey string `yaml:"chat_id_key"`
	// Timeout bounds one request; default 10s.
	Timeout config.Duration `yaml:"timeout"`
}

// SetDefaults sets the API URL, the chat id key and a 10 s timeout.
func (c *Config) SetDefaults() {
	c.APIURL, c.ChatIDKey, c.Timeout = DefaultAPIURL, DefaultChatIDKey, config.Duration(10*time.Second)
}

// Templates is a notifier's telegram section: text, a text/template over
// the params, in Telegram's HTML.
type Templates struct {
	Text string `yaml:"text"`

	text *template.Template
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
		return nil, nil
	}
	cfg := &Config{}
	if !p.Decode(s.Section, cfg) {
		return nil, nil
	}
	if cfg.BotToken == "" && !s.Checking {
		p.Add(s.Section, "bot_token", "must be set (the bot's token from @BotFather, for example ${TELEGRAM_BOT_TOKEN})")
	}
	p.HTTPURL(s.Section, "api_url", cfg.APIURL)
	p.Positive(s.Section, "timeout", cfg.Timeout)
	if cfg.ChatIDKey == "" {
		p.Add(s.Section, "chat_id_key", "must not be empty (default telegram_chat_id)")
	}
	if p.Err() != nil {
		return nil, nil
	}
	return New(cfg, notifiers, Options{Logger: s.Logger})
}

// Options are the Sender's collaborators. The zero value is usable.
type Options struct {
	// Logger receives a debug record per send. Nil discards.
	Logger *slog.Logger
	// Client sends the requests. Nil: a client with the config's timeout.
	Client *http.Client
}

// Sender sends Telegram messages. It is safe for concurrent use.
type Sender struct {
	cfg       *Config
	notifiers map[string]*template.Template
	client    *http.Client
	logger    *slog.Logger
}

// New returns a Sender for the notifiers (by name) with telegram
// templates. A template checked by the registry is used as compiled; one
// built in code is parsed here.
func New(cfg *Config, notifiers map[string]*Templates, opts Options) (*Sender, error) {
	if cfg == nil {
		return nil, errors.New("telegram: channels.telegram is not configured")
	}
	c := *cfg
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if c.ChatIDKey == "" {
		c.ChatIDKey = DefaultChatIDKey
	}
	s := &Sender{cfg: &c, notifiers: map[string]*template.Template{}, client: opts.Client, logger: opts.Logger}
	for name, t := range notifiers {
		if t == nil {
			continue
		}
		tmpl := t.text
		if tmpl == nil {
			var err error
			if tmpl, err = template.New(name).Option("missingkey=zero").Parse(t.Text); err != nil {
				return nil, fmt.Errorf("telegram: notifiers.%s.channels.telegram.text: %w", name, err)
			}
		}
		s.notifiers[name] = tmpl
	}
	if s.client == nil {
		d := c.Timeout.D()
		if d <= 0 {
			d = 10 * time.Second
		}
		s.client = &http.Client{Timeout: d}
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Name returns "telegram".
func (s *Sender) Name() string { return Name }

// chatID returns the recipient's chat id from the profile data: a number
// (a user or group id) or a string ("@channelusername" or digits).
func (s *Sender) chatID(r channels.Recipient) (any, error) {
	v, ok := r.Data[s.cfg.ChatIDKey]
	switch v := v.(type) {
	case float64:
		if v == float64(int64(v)) {
			return int64(v), nil
		}
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n, nil
		}
	case string:
		if v = strings.TrimSpace(v); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n, nil
			}
			if strings.HasPrefix(v, "@") {
				return v, nil
			}
		}
	}
	if !ok {
		return nil, fmt.Errorf("recipient has no data.%s", s.cfg.ChatIDKey)
	}
	return nil, fmt.Errorf("recipient's data.%s is not a Telegram chat id", s.cfg.ChatIDKey)
}

// Addressable reports whether r can get the notifier's message: the
// notifier must have telegram templates and, when the profile's data is
// known, the data must hold a chat id. The fan-out does not read the data,
// so a recipient without a chat id is found at send time and refused.
func (s *Sender) Addressable(notifier string, r channels.Recipient) error {
	if _, ok := s.notifiers[notifier]; !ok {
		return fmt.Errorf("notifier %q has no telegram templates", notifier)
	}
	if r.Data == nil {
		return nil
	}
	_, err := s.chatID(r)
	return err
}

// Escape escapes s for Telegram's HTML parse mode, as params are before
// rendering.
func Escape(s string) string { return html.EscapeString(s) }

// Render renders the notifier's text over params, each string param
// escaped, cut to MaxText characters.
func (s *Sender) Render(notifier string, params map[string]any) (string, error) {
	t, ok := s.notifiers[notifier]
	if !ok {
		return "", fmt.Errorf("notifier %q has no telegram templates", notifier)
	}
	text, err := chat.RenderText(t, params, Escape, MaxText)
	if err != nil {
		return "", fmt.Errorf("telegram: render text: %w", err)
	}
	return text, nil
}

// Preview renders the notifier's message without sending.
func (s *Sender) Preview(notifier string, params map[string]any, _ channels.Recipient) ([]channels.Part, error) {
	return chat.TextPreview(s.Render(notifier, params))
}

type sendMessage struct {
	ChatID      any         `json:"chat_id"`
	Text        string      `json:"text"`
	ParseMode   string      `json:"parse_mode"`
	LinkPreview linkPreview `json:"link_preview_options"`
}

type linkPreview struct {
	IsDisabled bool `json:"is_disabled"`
}

// answer is the Bot API's reply.
type answer struct {
	OK          bool   `json:"ok"`
	ErrorCode   int    `json:"error_code"`
	Description string `json:"description"`
	Result      struct {
		MessageID int64 `json:"message_id"`
	} `json:"result"`
	Parameters struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
}

// Send renders msg for its recipient and sends it (see the package doc for
// how answers are classified).
func (s *Sender) Send(ctx context.Context, msg channels.Message) error {
	if msg.Recipient == nil {
		return channels.Permanent(errors.New("telegram: message has no recipient"))
	}
	id, err := s.chatID(*msg.Recipient)
	if err != nil {
		return channels.Permanent(fmt.Errorf("telegram to recipient %s: %w", msg.Recipient.ID, err))
	}
	text, err := s.Render(msg.Notifier, msg.Params)
	if err != nil {
		return channels.Permanent(err)
	}
	body, err := json.Marshal(sendMessage{ChatID: id, Text: text, ParseMode: "HTML", LinkPreview: linkPreview{IsDisabled: true}})
	if err != nil {
		return channels.Permanent(fmt.Errorf("telegram: encode body: %w", err))
	}
	base := strings.TrimSuffix(s.cfg.APIURL, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/bot"+s.cfg.BotToken+"/sendMessage", bytes.NewReader(body))
	if err != nil {
		return channels.Permanent(fmt.Errorf("telegram: build request for %s", channels.URLHost(base)))
	}
	req.Header.Set("Content-Type", "application/json")
	channels.SetProvider(ctx, Name)
	err = s.do(ctx, req, base)
	s.logger.DebugContext(ctx, "telegram send", "channel", Name, "delivery_id", msg.DeliveryID,
		"notification_id", msg.NotificationID, "recipient", msg.Recipient.ID, "attempt", msg.Attempt, "error", err)
	return err
}

// do sends req and classifies the answer.
func (s *Sender) do(ctx context.Context, req *http.Request, base string) error {
	host := channels.URLHost(base)
	res, err := s.client.Do(req)
	if err != nil {
		// The URL holds the token: keep the cause (a net.Error, a
		// timeout), not the url.Error that names it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return channels.Temporary(fmt.Errorf("telegram %s: %w", host, err), 0)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var a answer
	_ = json.Unmarshal(raw, &a)
	if res.StatusCode/100 == 2 && a.OK {
		channels.SetProviderMessageID(ctx, strconv.FormatInt(a.Result.MessageID, 10))
		return nil
	}
	e := fmt.Errorf("telegram %s answered %d: %s", host, res.StatusCode, a.Description)
	switch {
	case res.StatusCode == http.StatusTooManyRequests:
		after := time.Duration(a.Parameters.RetryAfter) * time.Second
		if after <= 0 {
			if n, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && n > 0 {
				after = time.Duration(n) * time.Second
			}
		}
		return channels.RateLimited(e, after)
	case res.StatusCode == http.StatusBadRequest, res.StatusCode == http.StatusForbidden:
		return channels.Permanent(e)
	}
	return channels.Temporary(e, 0)
}
