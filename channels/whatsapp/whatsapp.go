// Package whatsapp is the WhatsApp channel: a per-recipient channel that
// sends each recipient a WhatsApp message to the phone of their profile
// (E.164), through the WhatsApp Business Cloud API or Twilio's WhatsApp
// sender (channels.whatsapp.provider).
//
// # Templates and the 24-hour window
//
// WhatsApp lets a business send free text only within 24 hours of the
// recipient's last message to it (the customer service window); any other
// message must be an approved template. WhatsApp tells the business about
// inbound messages through its own webhooks, which notifyd does not
// receive: the application records the time in the recipient's profile
// data (data.whatsapp_last_inbound, or the key channels.whatsapp.window_key
// names; RFC 3339 or Unix seconds). A notifier's text is sent when that
// time is within the window; otherwise its template is, with its params
// rendered over the notification's params. A notifier with only text and a
// recipient outside the window is refused without a request.
//
// # Requests
//
// cloud_api:
//
//	POST {api_url}/{api_version}/{phone_number_id}/messages
//	Authorization: Bearer <access_token>
//	{"messaging_product":"whatsapp","recipient_type":"individual","to":"14155550123","type":"template",
//	 "template":{"name":"…","language":{"code":"en_US"},"components":[{"type":"body","parameters":[{"type":"text","text":"…"}]}]}}
//
// (or "type":"text","text":{"body":"…","preview_url":false} within the
// window). twilio:
//
//	POST {base_url}/2010-04-01/Accounts/{account_sid}/Messages.json
//	Authorization: Basic base64(account_sid:auth_token)
//	To=whatsapp:+14155550123&From=whatsapp:<from>&ContentSid=HX…&ContentVariables={"1":"…"}
//
// (or Body=<text> within the window).
//
// # Outcomes
//
// Success records the provider's message id (the Cloud API's wamid, the
// Twilio Message's sid). A recipient who is not a WhatsApp user, a template
// that does not exist, is not approved, is paused or disabled, or whose
// params do not match, and a free-text message WhatsApp says is outside the
// window are failed (channels.Permanent); rate limits are rate limited
// (Retry-After honoured); 5xx, timeouts, connection errors and refused
// credentials are temporary (retried).
package whatsapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/templates"
)

var (
	_ channels.Channel   = (*Sender)(nil)
	_ channels.Previewer = (*Sender)(nil)
)

// Options are the Sender's collaborators. The zero value is usable.
type Options struct {
	// Logger receives a debug record per send. Nil discards.
	Logger *slog.Logger
	// Clock decides the window and dates HTTP-date Retry-After. Nil is
	// time.Now.
	Clock func() time.Time
	// Client sends the requests. Nil: a client with the config's timeout
	// that does not follow redirects.
	Client *http.Client
}

// Sender sends WhatsApp messages. It is safe for concurrent use.
type Sender struct {
	cfg       *Config
	notifiers map[string]*Templates
	client    *http.Client
	logger    *slog.Logger
	clock     func() time.Time
}

// New returns a Sender for the notifiers (by name) with whatsapp sections.
// Templates checked by the registry are used as compiled; others are
// parsed here.
func New(cfg *Config, notifiers map[string]*Templates, opts Options) (*Sender, error) {
	if cfg == nil {
		return nil, errors.New("whatsapp: channels.whatsapp is not configured")
	}
	c := *cfg
	switch c.Provider {
	case ProviderCloudAPI:
		if c.PhoneNumberID == "" || c.AccessToken == "" {
			return nil, errors.New("whatsapp: cloud_api needs phone_number_id and access_token")
		}
	case ProviderTwilio:
		if c.AccountSID == "" || c.AuthToken == "" || c.From == "" {
			return nil, errors.New("whatsapp: twilio needs account_sid, auth_token and from")
		}
	default:
		return nil, fmt.Errorf("whatsapp: unknown provider %q", c.Provider)
	}
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if c.APIVersion == "" {
		c.APIVersion = DefaultAPIVersion
	}
	if c.BaseURL == "" {
		c.BaseURL = DefaultTwilioURL
	}
	if c.WindowKey == "" {
		c.WindowKey = DefaultWindowKey
	}
	s := &Sender{cfg: &c, notifiers: map[string]*Templates{}, client: opts.Client, logger: opts.Logger, clock: opts.Clock}
	for name, t := range notifiers {
		if t == nil {
			continue
		}
		if err := compile(name, t); err != nil {
			return nil, fmt.Errorf("whatsapp: %w", err)
		}
		s.notifiers[name] = t
	}
	if s.client == nil {
		d := c.Timeout.D()
		if d <= 0 {
			d = 10 * time.Second
		}
		s.client = &http.Client{Timeout: d,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	return s, nil
}

// compile parses what the registry did not.
func compile(name string, t *Templates) error {
	p := config.Default().NewProblems()
	key := "notifiers." + name + ".channels.whatsapp."
	if t.text == nil && t.Text != "" {
		t.text = p.Text(nil, key+"text", t.Text)
	}
	if tp := t.Template; tp != nil && len(tp.params) != len(tp.Params) {
		tp.params = make([]*template.Template, len(tp.Params))
		for i, src := range tp.Params {
			tp.params[i] = p.Text(nil, fmt.Sprintf("%stemplate.params[%d]", key, i), src)
		}
	}
	if t.Template == nil && t.text == nil {
		if err := p.Err(); err != nil {
			return err
		}
		return fmt.Errorf("%stemplate is not set", key)
	}
	return p.Err()
}

// Name returns "whatsapp".
func (s *Sender) Name() string { return Name }

// Addressable reports whether r can get the notifier's messages: the
// notifier must have a whatsapp section and r an E.164 phone.
func (s *Sender) Addressable(notifier string, r channels.Recipient) error {
	if _, ok := s.notifiers[notifier]; !ok {
		return fmt.Errorf("notifier %q has no whatsapp section", notifier)
	}
	if !e164RE.MatchString(r.Phone) {
		return fmt.Errorf("recipient phone %q is not an E.164 number", r.Phone)
	}
	return nil
}

// inWindow reports whether r wrote to the business within Window of now,
// as the profile data's window key says.
func (s *Sender) inWindow(r channels.Recipient, now time.Time) bool {
	var at time.Time
	switch v := r.Data[s.cfg.WindowKey].(type) {
	case string:
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(v)); err == nil {
			at = t
		} else if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			at = time.Unix(n, 0)
		}
	case float64:
		at = time.Unix(int64(v), 0)
	case json.Number:
		if n, err := v.Int64(); err == nil {
			at = time.Unix(n, 0)
		}
	}
	return !at.IsZero() && !at.After(now.Add(time.Minute)) && now.Sub(at) < Window
}

// message is what one send carries: free text, or a template with its
// rendered params.
type message struct {
	text     string // free text; "" for a template
	template *Template
	params   []string
}

// flatten makes a rendered param one line: WhatsApp refuses template params
// with new lines, tabs or more than four spaces in a row.
var flatten = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ")

// render builds the message for r: free text within the window when the
// notifier has text, else its template.
func (s *Sender) render(notifier string, params map[string]any, r channels.Recipient) (message, error) {
	t, ok := s.notifiers[notifier]
	if !ok {
		return message{}, fmt.Errorf("notifier %q has no whatsapp section", notifier)
	}
	in := s.inWindow(r, s.clock())
	if t.text != nil && (in || t.Template == nil) {
		if !in {
			return message{}, fmt.Errorf("recipient %s last wrote more than 24 hours ago (data.%s), and notifier %q has no template for messages outside the window",
				r.ID, s.cfg.WindowKey, notifier)
		}
		text, err := templates.RenderText(t.text, params)
		if err != nil {
			return message{}, fmt.Errorf("render whatsapp text: %w", err)
		}
		if text = strings.TrimSpace(text); text == "" {
			return message{}, errors.New("the whatsapp text renders empty")
		}
		return message{text: text}, nil
	}
	m := message{template: t.Template}
	for i, pt := range t.Template.params {
		v, err := templates.RenderText(pt, params)
		if err != nil {
			return message{}, fmt.Errorf("render whatsapp template.params[%d]: %w", i, err)
		}
		v = strings.Join(strings.Fields(flatten.Replace(v)), " ")
		if v == "" {
			return message{}, fmt.Errorf("whatsapp template.params[%d] renders empty (WhatsApp refuses an empty param)", i)
		}
		m.params = append(m.params, v)
	}
	return m, nil
}

// Preview renders the message the recipient would get: parts "text", or
// "template" and "param 1", "param 2", ….
func (s *Sender) Preview(notifier string, params map[string]any, r channels.Recipient) ([]channels.Part, error) {
	m, err := s.render(notifier, params, r)
	if err != nil {
		return nil, err
	}
	if m.template == nil {
		return []channels.Part{{Name: "text", Value: m.text}}, nil
	}
	name := m.template.Name
	if s.cfg.Provider == ProviderTwilio {
		name = m.template.ContentSID
	}
	parts := []channels.Part{{Name: "template", Value: name}}
	for i, v := range m.params {
		parts = append(parts, channels.Part{Name: fmt.Sprintf("param %d", i+1), Value: v})
	}
	return parts, nil
}

// Send renders msg for its recipient and sends it (see the package doc for
// how answers are classified).
func (s *Sender) Send(ctx context.Context, msg channels.Message) error {
	if msg.Recipient == nil {
		return channels.Permanent(errors.New("whatsapp: message has no recipient"))
	}
	r := *msg.Recipient
	if !e164RE.MatchString(r.Phone) {
		return channels.Permanent(fmt.Errorf("whatsapp to recipient %s: phone %q is not an E.164 number", r.ID, r.Phone))
	}
	m, err := s.render(msg.Notifier, msg.Params, r)
	if err != nil {
		return channels.Permanent(fmt.Errorf("whatsapp %s to recipient %s: %w", msg.Notifier, r.ID, err))
	}
	var req *http.Request
	if s.cfg.Provider == ProviderTwilio {
		req, err = s.twilioRequest(ctx, r.Phone, m)
	} else {
		req, err = s.cloudRequest(ctx, r.Phone, m)
	}
	if err != nil {
		return channels.Permanent(fmt.Errorf("whatsapp: build request: %w", err))
	}
	channels.SetProvider(ctx, s.cfg.Provider)
	id, err := s.do(ctx, req)
	s.logger.DebugContext(ctx, "whatsapp send", "channel", Name, "delivery_id", msg.DeliveryID,
		"notifier", msg.Notifier, "recipient", r.ID, "template", m.template != nil, "attempt", msg.Attempt, "error", err)
	if err != nil {
		return fmt.Errorf("whatsapp %s to recipient %s: %w", msg.Notifier, r.ID, err)
	}
	channels.SetProviderMessageID(ctx, id)
	return nil
}

// cloudRequest is the Cloud API's request for m to phone.
func (s *Sender) cloudRequest(ctx context.Context, phone string, m message) (*http.Request, error) {
	body := map[string]any{"messaging_product": "whatsapp", "recipient_type": "individual",
		"to": strings.TrimPrefix(phone, "+")}
	if m.template == nil {
		body["type"] = "text"
		body["text"] = map[string]any{"body": m.text, "preview_url": false}
	} else {
		tpl := map[string]any{"name": m.template.Name, "language": map[string]string{"code": m.template.Language}}
		if len(m.params) > 0 {
			ps := make([]map[string]string, len(m.params))
			for i, v := range m.params {
				ps[i] = map[string]string{"type": "text", "text": v}
			}
			tpl["components"] = []any{map[string]any{"type": "body", "parameters": ps}}
		}
		body["type"] = "template"
		body["template"] = tpl
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	u := strings.TrimRight(s.cfg.APIURL, "/") + "/" + s.cfg.APIVersion + "/" + url.PathEscape(s.cfg.PhoneNumberID) + "/messages"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.cfg.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// twilioRequest is Twilio's request for m to phone.
func (s *Sender) twilioRequest(ctx context.Context, phone string, m message) (*http.Request, error) {
	form := url.Values{"To": {"whatsapp:" + phone}, "From": {"whatsapp:" + s.cfg.From}}
	if m.template == nil {
		form.Set("Body", m.text)
	} else {
		form.Set("ContentSid", m.template.ContentSID)
		if len(m.params) > 0 {
			vars := make(map[string]string, len(m.params))
			for i, v := range m.params {
				vars[strconv.Itoa(i+1)] = v
			}
			b, _ := json.Marshal(vars)
			form.Set("ContentVariables", string(b))
		}
	}
	u := strings.TrimRight(s.cfg.BaseURL, "/") + "/2010-04-01/Accounts/" + url.PathEscape(s.cfg.AccountSID) + "/Messages.json"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(s.cfg.AccountSID, s.cfg.AuthToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// do sends req and reads the provider's answer into its message id or a
// classified error.
func (s *Sender) do(ctx context.Context, req *http.Request) (string, error) {
	host := channels.URLHost(req.URL.String())
	res, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL names the account
		}
		return "", channels.Temporary(fmt.Errorf("%s %s: %w", s.cfg.Provider, host, err), 0)
	}
	raw, _ := io.ReadAll(io.LimitReader(res.Body, safehttp.MaxResponseBody))
	res.Body.Close()
	after := safehttp.ParseRetryAfter(res.Header.Get("Retry-After"), s.clock())
	if s.cfg.Provider == ProviderTwilio {
		return twilioResult(res.StatusCode, raw, after, host)
	}
	return cloudResult(res.StatusCode, raw, after, host)
}

// Cloud API error codes by what they mean for the message.
var (
	// cloudRefused: the recipient or the template, whatever the retry.
	cloudRefused = map[int]string{
		100:    "invalid parameter",
		131008: "a required parameter is missing",
		131009: "a parameter value is not valid",
		131021: "the recipient is the sender",
		131026: "message undeliverable: the number is not a WhatsApp user, or cannot receive this message",
		131030: "the recipient is not in the test number's allowed list",
		131047: "more than 24 hours since the recipient last replied: only a template may be sent",
		131051: "unsupported message type",
		132000: "the template's parameter count does not match",
		132001: "the template does not exist in this language, or is not approved",
		132005: "the template's translated text is too long",
		132007: "the template's format violates WhatsApp's policy",
		132012: "a template parameter's format does not match",
		132015: "the template is paused for low quality",
		132016: "the template is disabled",
		132068: "the flow is blocked",
	}
	// cloudLimited: this sender's rate or volume, to come back to later.
	cloudLimited = map[int]bool{4: true, 80007: true, 130429: true, 131048: true, 131056: true}
)

func cloudResult(status int, raw []byte, after time.Duration, host string) (string, error) {
	var ans struct {
		Messages []struct {
			ID string `json:"id"`
		} `json:"messages"`
		Error struct {
			Message string `json:"message"`
			Code    int    `json:"code"`
			Data    struct {
				Details string `json:"details"`
			} `json:"error_data"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &ans)
	if status/100 == 2 && len(ans.Messages) > 0 && ans.Messages[0].ID != "" {
		return ans.Messages[0].ID, nil
	}
	if status/100 == 2 {
		return "", channels.Temporary(fmt.Errorf("cloud_api %s answered %d without a message id", host, status), 0)
	}
	e := ans.Error
	what := fmt.Sprintf("cloud_api %s answered %d, error %d: %s", host, status, e.Code, e.Message)
	if e.Data.Details != "" {
		what += " (" + e.Data.Details + ")"
	}
	err := errors.New(what)
	switch {
	case cloudRefused[e.Code] != "":
		return "", channels.Permanent(fmt.Errorf("%w: %s", err, cloudRefused[e.Code]))
	case cloudLimited[e.Code] || status == http.StatusTooManyRequests:
		return "", channels.RateLimited(err, after)
	case status == http.StatusUnauthorized || status == http.StatusForbidden || e.Code == 190:
		return "", channels.Temporary(fmt.Errorf("%w: check channels.whatsapp.access_token", err), 0)
	case status >= 500 || e.Code == 1 || e.Code == 2 || e.Code == 131000 || e.Code == 131016:
		return "", channels.Temporary(err, after)
	case status >= 400:
		return "", channels.Permanent(err)
	}
	return "", channels.Temporary(err, after)
}

// Twilio's WhatsApp errors by what they mean for the message.
var (
	twilioRefused = map[int]string{
		21211: "invalid To number",
		21656: "the ContentVariables do not match the template",
		63003: "the number is not a WhatsApp user",
		63016: "outside the 24-hour window: only a template may be sent",
		63024: "invalid message recipient",
		63032: "the user's number cannot receive this message",
		63027: "the template does not exist or is not approved",
	}
	twilioLimited = map[int]bool{63018: true, 63038: true}
)

func twilioResult(status int, raw []byte, after time.Duration, host string) (string, error) {
	var ans struct {
		SID     string `json:"sid"`
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(raw, &ans)
	if status/100 == 2 {
		return ans.SID, nil
	}
	err := fmt.Errorf("twilio %s answered %d, error %d: %s", host, status, ans.Code, ans.Message)
	switch {
	case twilioRefused[ans.Code] != "":
		return "", channels.Permanent(fmt.Errorf("%w: %s", err, twilioRefused[ans.Code]))
	case twilioLimited[ans.Code] || status == http.StatusTooManyRequests:
		return "", channels.RateLimited(err, after)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "", channels.Temporary(fmt.Errorf("%w: check channels.whatsapp.account_sid and auth_token", err), 0)
	case status >= 500:
		return "", channels.Temporary(err, after)
	case status >= 400:
		return "", channels.Permanent(err)
	}
	return "", channels.Temporary(err, after)
}
