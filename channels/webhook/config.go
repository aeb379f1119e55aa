package webhook

import (
	"encoding/base64"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// Name is the channel's name in config and in the ledger.
const Name = "webhook"

// Plugin registers the webhook channel: per-recipient (the profile's
// webhook_url) and bulk (a notifier's url). Per-recipient webhooks are off
// unless a notifier's section or a preference turns them on.
var Plugin = channels.Plugin{
	Name:         Name,
	PerRecipient: true,
	Bulk:         true,
	Address:      "webhook_url",
	DefaultMode:  notifytype.ModeOff,
	Open:         open,
}

// Config is the channels.webhook section. Without it webhook deliveries are
// `unavailable`.
type Config struct {
	// Secret signs payloads (Standard Webhooks): "whsec_<base64>" or raw text.
	// Secrets lists extra secrets that are also signed with while one rotates.
	Secret       string          `yaml:"secret"`
	Secrets      []string        `yaml:"secrets"`
	Timeout      config.Duration `yaml:"timeout"`       // default 10s
	AllowPrivate bool            `yaml:"allow_private"` // allow loopback/private/link-local destinations
	// AllowPrivateNotifierURLs allows loopback/private/link-local
	// destinations for the notifiers' own url (the operator's config) and
	// for no recipient's webhook_url, which recipients' profiles name:
	// what dev mode sets to capture notifier webhooks on loopback.
	AllowPrivateNotifierURLs bool `yaml:"allow_private_notifier_urls"`
}

// SetDefaults sets a 10 s timeout.
func (c *Config) SetDefaults() { c.Timeout = config.Duration(10 * time.Second) }

// Templates is a notifier's webhook section. With URL set the notifier also
// sends one bulk webhook per notification to it.
type Templates struct {
	URL string `yaml:"url"` // notifier-level (bulk) destination, optional
}

func open(s *channels.Setup) (any, error) {
	p := s.Problems
	urls := map[string]string{}
	channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *Templates) {
		if t.URL == "" {
			return
		}
		p.HTTPURL(n.Section, "url", t.URL)
		if s.Section.Empty() {
			p.Add(n.Section, "url", "a notifier-level webhook needs channels.webhook (its secret signs the payload)")
		}
		urls[n.Name] = t.URL
	})
	if s.Section.Empty() {
		return nil, nil
	}
	cfg := &Config{}
	if !p.Decode(s.Section, cfg) {
		return nil, nil
	}
	if cfg.Secret == "" && !s.Checking {
		p.Add(s.Section, "secret", "must be set: an unsigned webhook cannot be trusted by its receiver")
	}
	secretFormat(p, s.Section, "secret", cfg.Secret)
	for i, sec := range cfg.Secrets {
		key := "secrets[" + itoa(i) + "]"
		if sec == "" {
			p.Add(s.Section, key, "must not be empty")
		}
		secretFormat(p, s.Section, key, sec)
	}
	p.Positive(s.Section, "timeout", cfg.Timeout)
	if p.Err() != nil || cfg.Secret == "" {
		return nil, nil
	}
	return New(cfg, urls, Options{Logger: s.Logger, Clock: s.Clock})
}

// secretFormat checks that a "whsec_" secret carries base64, as Standard
// Webhooks defines it. Any other text is used as raw key bytes.
func secretFormat(p *config.Problems, sec *config.Section, key, s string) {
	if rest, ok := strings.CutPrefix(s, "whsec_"); ok {
		if _, err := base64.StdEncoding.DecodeString(rest); err != nil || rest == "" {
			p.Add(sec, key, "a whsec_ secret must be followed by base64")
		}
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
