package devmode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/notifyd/notifyd/channels/discord"
	"github.com/notifyd/notifyd/channels/slack"
	"github.com/notifyd/notifyd/channels/teams"
	"github.com/notifyd/notifyd/channels/webhook"
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
	h.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
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
