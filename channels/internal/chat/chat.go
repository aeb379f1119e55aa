// Package chat is what the chat channels (Discord, Slack, Teams, Telegram)
// share: their params escaped for the target's markup before the notifier's
// templates see them, a text cut to the target's length, and one webhook
// post with the SSRF-guarded client; and, for the webhook ones (Discord,
// Slack, Teams), their channels.<name> section (Config), the checks of a
// notifier's webhook_url and text, and the sender's webhook URLs (Sender).
package chat

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/templates"
)

// EscapeParams returns a copy of params with every string escaped by esc,
// in maps and arrays at any depth. Map keys are kept as they are: templates
// look values up by them.
func EscapeParams(params map[string]any, esc func(string) string) map[string]any {
	out, _ := escape(params, esc).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	return out
}

func escape(v any, esc func(string) string) any {
	switch v := v.(type) {
	case string:
		return esc(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = escape(e, esc)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = escape(e, esc)
		}
		return out
	}
	return v
}

// Render renders t over params as notifier templates see them; a nil t
// renders "".
func Render(t *template.Template, params map[string]any) (string, error) {
	return templates.RenderText(t, params)
}

// RenderText renders t over params with every string param escaped by esc
// (EscapeParams), cut to limit characters with "…" when longer.
func RenderText(t *template.Template, params map[string]any, esc func(string) string, limit int) (string, error) {
	text, err := Render(t, EscapeParams(params, esc))
	if err != nil {
		return "", err
	}
	if utf8.RuneCountInString(text) > limit {
		r := []rune(text)
		text = string(r[:limit-1]) + "…"
	}
	return text, nil
}

// TextPreview is a chat channel's preview: its rendered text, one part
// named "text", or render's error.
func TextPreview(text string, err error) ([]channels.Part, error) {
	if err != nil {
		return nil, err
	}
	return []channels.Part{{Name: "text", Value: text}}, nil
}

// Post posts the JSON body to a webhook URL with client and classifies the
// outcome (safehttp.Deliver). The URL is a credential: errors name its
// scheme and host only.
func Post(ctx context.Context, client *http.Client, rawURL string, body []byte, clock func() time.Time) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return channels.Permanent(errors.New("build request: invalid webhook_url"))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "notifyd")
	return safehttp.Deliver(client, req, "POST "+safehttp.Redact(rawURL, false), clock)
}
