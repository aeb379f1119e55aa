package devmode

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/notifyd/notifyd/channels/discord"
	"github.com/notifyd/notifyd/channels/slack"
	"github.com/notifyd/notifyd/channels/sms"
	"github.com/notifyd/notifyd/channels/teams"
	"github.com/notifyd/notifyd/channels/telegram"
	"github.com/notifyd/notifyd/channels/webhook"
	"github.com/notifyd/notifyd/channels/whatsapp"
	"github.com/notifyd/notifyd/config"
)

// Hooks is dev mode's capture of the HTTP channels: an HTTP server on
// loopback that every notifier-level webhook and every Slack, Discord and
// Teams incoming-webhook URL of the config is pointed at, which answers each
// POST 200 "ok" (as Slack does) and keeps it for the dev page. With it, the example config's
// billing webhook and Slack message are delivered and shown on /dev/ instead
// of failing to resolve hosts that do not exist.
type Hooks struct {
	srv *http.Server
	ln  net.Listener

	mu   sync.Mutex
	reqs []Hook // oldest first, at most maxHooks
	seq  int    // requests captured, numbering the providers' message ids
}

// Hook is one captured request.
type Hook struct {
	At       time.Time
	Channel  string // webhook, slack, discord or teams: the first path segment
	Notifier string
	// Headers are the request's Content-Type, User-Agent and, for a
	// webhook, its Standard Webhooks headers (webhook-id,
	// webhook-timestamp, webhook-signature).
	Headers [][2]string
	// Body is the request's body, indented when it is JSON, cut at 64 KiB.
	Body string
}

// maxHooks bounds the captured requests kept: the oldest go first.
const maxHooks = 200

// StartHooks starts the capture server on 127.0.0.1 (a free port).
func StartHooks() (*Hooks, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start the dev webhook capture: %w", err)
	}
	h := &Hooks{ln: ln}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.capture), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

// URL is where the channel's messages of notifier are captured.
func (h *Hooks) URL(channel, notifier string) string {
	return "http://" + h.ln.Addr().String() + "/" + channel + "/" + notifier
}

func (h *Hooks) capture(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if json.Valid(body) {
		var b bytes.Buffer
		if json.Indent(&b, body, "", "  ") == nil {
			body = b.Bytes()
		}
	}
	channel, notifier, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	var answer func(n int) (int, string)
	if channel == providerPrefix {
		// /provider/<channel>/<provider>/<the API's own path>
		rest := strings.SplitN(notifier, "/", 3)
		if len(rest) < 3 {
			http.NotFound(w, r)
			return
		}
		channel, notifier = rest[0], rest[1]+" (provider)"
		if answer = providerAnswer("/" + rest[2]); answer == nil {
			http.NotFound(w, r)
			return
		}
	}
	hk := Hook{At: time.Now(), Channel: channel, Notifier: notifier, Body: string(body)}
	for _, k := range []string{"Content-Type", "User-Agent", "Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"} {
		if v := r.Header.Get(k); v != "" {
			hk.Headers = append(hk.Headers, [2]string{strings.ToLower(k), v})
		}
	}
	h.mu.Lock()
	h.reqs = append(h.reqs, hk)
	if len(h.reqs) > maxHooks {
		h.reqs = h.reqs[len(h.reqs)-maxHooks:]
	}
	h.seq++
	n := h.seq
	h.mu.Unlock()
	if answer != nil {
		status, body := answer(n)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// providerPrefix is the first path segment of the provider APIs dev mode
// stands in for (ProviderURL).
const providerPrefix = "provider"

// ProviderURL is the base URL a provider API of channel is pointed at: its
// requests are captured as the channel's, and answered with the provider's
// own success body.
func (h *Hooks) ProviderURL(channel, provider string) string {
	return "http://" + h.ln.Addr().String() + "/" + providerPrefix + "/" + channel + "/" + url.PathEscape(provider)
}

// providerAnswer returns the success answer of the provider API whose path
// is path (the n-th captured request), nil for a path no provider has.
func providerAnswer(path string) func(n int) (int, string) {
	switch {
	case strings.HasSuffix(path, "/sendMessage"): // Telegram's Bot API
		return func(n int) (int, string) {
			return http.StatusOK, fmt.Sprintf(`{"ok":true,"result":{"message_id":%d,"date":%d}}`, n, time.Now().Unix())
		}
	case strings.HasSuffix(path, "/Messages.json"): // Twilio (SMS and WhatsApp)
		return func(n int) (int, string) {
			return http.StatusCreated, fmt.Sprintf(`{"sid":"SMdev%029d","status":"queued"}`, n)
		}
	case path == "/v1/messages": // Vonage's Messages API
		return func(n int) (int, string) {
			return http.StatusAccepted, fmt.Sprintf(`{"message_uuid":"00000000-0000-4000-8000-%012d"}`, n)
		}
	case strings.HasSuffix(path, "/messages"): // the WhatsApp Cloud API
		return func(n int) (int, string) {
			return http.StatusOK, fmt.Sprintf(`{"messaging_product":"whatsapp","messages":[{"id":"wamid.dev%d"}]}`, n)
		}
	}
	return nil
}

// Requests returns the captured requests, newest first.
func (h *Hooks) Requests() []Hook {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	out := slices.Clone(h.reqs)
	h.mu.Unlock()
	slices.Reverse(out)
	return out
}

// Close stops the capture server.
func (h *Hooks) Close() error {
	if h == nil {
		return nil
	}
	return h.srv.Close()
}

// hookKeys are the channels dev mode captures, each with the key of a
// notifier's section that holds its URL.
var hookKeys = map[string]string{webhook.Name: "url", slack.Name: "webhook_url", discord.Name: "webhook_url", teams.Name: "webhook_url"}

// CaptureHooks points every notifier-level webhook url and every Slack,
// Discord and Teams webhook_url of cfg at h, and lets those channels reach
// loopback so that they can (allow_private; for the webhook channel,
// allow_private_notifier_urls). A recipient's own webhook_url (their
// profile) is left alone: it goes where it says, and is still refused a
// loopback or private address.
func CaptureHooks(cfg *config.Config, h *Hooks) error {
	used := map[string]bool{}
	for _, name := range cfg.NotifierNames() {
		nf := cfg.Notifiers[name]
		for channel, key := range hookKeys {
			nc := nf.Channels[channel]
			if nc == nil || nc.Section == nil {
				continue
			}
			if _, ok := nc.Section.Value(key); !ok {
				continue // a per-recipient webhook: each profile's URL
			}
			sec, err := nc.Section.With("", map[string]any{key: h.URL(channel, name)})
			if err != nil {
				return err
			}
			nc.Section = sec
			used[channel] = true
		}
	}
	if cfg.Channels == nil {
		cfg.Channels = config.Channels{}
	}
	var errs []error
	for _, channel := range slices.Sorted(maps.Keys(hookKeys)) {
		if !used[channel] {
			continue
		}
		// The webhook channel also posts to recipients' own webhook_url,
		// which must stay off loopback: only its notifier urls are opened.
		open := "allow_private"
		if channel == webhook.Name {
			open = "allow_private_notifier_urls"
		}
		sec, err := cfg.Channels[channel].With("channels."+channel, map[string]any{open: true})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cfg.Channels[channel] = sec
	}
	return errors.Join(errs...)
}

// CaptureProviders points the provider APIs of the per-recipient channels
// that send to people's phones and chats (channels.sms and each of its
// providers, channels.whatsapp, channels.telegram) at h, which captures
// each message for the dev page and answers it as the provider does. Email
// needs none of this: dev mode sends it all to its mailbox (Configure).
func CaptureProviders(cfg *config.Config, h *Hooks) error {
	set := func(channel string, values map[string]any) error {
		sec, err := cfg.Channels[channel].With("channels."+channel, values)
		if err != nil {
			return err
		}
		cfg.Channels[channel] = sec
		return nil
	}
	var errs []error
	if sec, ok := cfg.Channels[sms.Name]; ok && !sec.Empty() {
		values := map[string]any{}
		if _, listed := sec.Value("providers.0.kind"); listed {
			for i := 0; ; i++ {
				kind, ok := sec.Value(fmt.Sprintf("providers.%d.kind", i))
				if !ok {
					break
				}
				name, named := sec.Value(fmt.Sprintf("providers.%d.name", i))
				if !named {
					name = kind
				}
				key := fmt.Sprintf("providers.%d.", i)
				values[key+"base_url"] = h.ProviderURL(sms.Name, name)
				switch kind {
				case sms.KindTwilio:
					devSecret(sec, values, key+"auth_token", "dev-auth-token")
				case sms.KindVonage:
					if v, _ := sec.Value(key + "private_key"); v == "" {
						pem, err := devKey()
						if err != nil {
							return err
						}
						values[key+"private_key"] = pem
					}
				}
			}
		} else {
			values["base_url"] = h.ProviderURL(sms.Name, sms.KindTwilio)
			devSecret(sec, values, "auth_token", "dev-auth-token")
		}
		errs = append(errs, set(sms.Name, values))
	}
	if sec, ok := cfg.Channels[whatsapp.Name]; ok && !sec.Empty() {
		u := h.ProviderURL(whatsapp.Name, "whatsapp")
		values := map[string]any{"api_url": u, "base_url": u}
		if p, _ := sec.Value("provider"); p == whatsapp.ProviderTwilio {
			devSecret(sec, values, "auth_token", "dev-auth-token")
		} else {
			devSecret(sec, values, "access_token", "dev-access-token")
		}
		errs = append(errs, set(whatsapp.Name, values))
	}
	if sec, ok := cfg.Channels[telegram.Name]; ok && !sec.Empty() {
		values := map[string]any{"api_url": h.ProviderURL(telegram.Name, telegram.Name)}
		devSecret(sec, values, "bot_token", "0:dev-bot-token")
		errs = append(errs, set(telegram.Name, values))
	}
	return errors.Join(errs...)
}

// devSecret sets key to v when the section leaves it empty: the capture
// server takes any credential, and a secret left to an unset ${VAR} would
// keep the channel from opening.
func devSecret(sec *config.Section, values map[string]any, key, v string) {
	if got, _ := sec.Value(key); got == "" {
		values[key] = v
	}
}

// devKey is a throwaway RSA key in PEM for a Vonage entry without one.
func devKey() (string, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}
