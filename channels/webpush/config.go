package webpush

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// Name is the channel's name in config and in the ledger.
const Name = "web_push"

// Plugin registers the web push channel: per-recipient, to every browser
// push subscription the recipient registered. It needs no profile field,
// but a subscription: a recipient without one gets an `unavailable`
// delivery at fan-out time ("recipient has no push subscriptions"), as a
// recipient without an email address does on email.
var Plugin = channels.Plugin{
	Name:         Name,
	PerRecipient: true,
	Address:      channels.PushSubscriptionAddress,
	DefaultMode:  notifytype.ModeImmediate,
	Open:         open,
}

// DefaultTTL is how long a push service keeps a message for a browser that
// is offline, when channels.web_push.ttl is not set.
const DefaultTTL = 24 * time.Hour

// Config is the channels.web_push section. Without it web push deliveries
// are `unavailable` and the push subscription API answers 404.
type Config struct {
	// VAPIDPublicKey and VAPIDPrivateKey are the application server's key
	// pair (`notifyd vapid-keys` makes one): unpadded base64url of the raw
	// P-256 public point and private scalar.
	VAPIDPublicKey  string `yaml:"vapid_public_key"`
	VAPIDPrivateKey string `yaml:"vapid_private_key"`
	// Subject is how a push service reaches the operator: a mailto: or
	// https: URL.
	Subject string `yaml:"subject"`
	// TTL is how long the push service keeps a message for an offline
	// browser (0: deliver only to a browser online now). Default 24h, at
	// most 28 days.
	TTL config.Duration `yaml:"ttl"`
	// Timeout bounds one request to a push service; default 10s.
	Timeout config.Duration `yaml:"timeout"`
	// AllowPrivate lets endpoints be on loopback or private addresses, and
	// plain http: a local push service for development and tests only.
	AllowPrivate bool `yaml:"allow_private"`
	// AllowedHosts, when set, are the only push services a subscription's
	// endpoint may name: host names ("fcm.googleapis.com") or "*.suffix"
	// for every name under suffix ("*.push.services.mozilla.com"). Empty:
	// any public host name.
	AllowedHosts []string `yaml:"allowed_hosts"`
}

// SetDefaults sets a 24 h TTL and a 10 s timeout.
func (c *Config) SetDefaults() {
	c.TTL = config.Duration(DefaultTTL)
	c.Timeout = config.Duration(10 * time.Second)
}

// Templates is a notifier's web_push section: text/templates over the
// params. Title is required; url, when it renders, is opened when the
// notification is clicked.
type Templates struct {
	Title string `yaml:"title"`
	Body  string `yaml:"body"`
	URL   string `yaml:"url"`

	title, body, url *template.Template
}

const maxTTL = 28 * 24 * time.Hour

func open(s *channels.Setup) (any, error) {
	p := s.Problems
	notifiers := channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *Templates) {
		if t.Title == "" {
			p.Add(n.Section, "title", "must be set (every push notification has a title)")
		}
		t.title = p.Text(n.Section, "title", t.Title)
		t.body = p.Text(n.Section, "body", t.Body)
		t.url = p.Text(n.Section, "url", t.URL)
		p.RenderCheck(n.Section, "title", t.title, n.Example)
		p.RenderCheck(n.Section, "body", t.body, n.Example)
		p.RenderCheck(n.Section, "url", t.url, n.Example)
	})
	if s.Section.Empty() {
		return nil, nil
	}
	cfg := &Config{}
	if !p.Decode(s.Section, cfg) {
		return nil, nil
	}
	sec := s.Section
	if cfg.VAPIDPublicKey == "" {
		p.Add(sec, "vapid_public_key", "must be set (`notifyd vapid-keys` prints a new pair)")
	}
	if cfg.VAPIDPrivateKey == "" && !s.Checking {
		p.Add(sec, "vapid_private_key", "must be set (`notifyd vapid-keys` prints a new pair; give it as ${VAR})")
	}
	if cfg.VAPIDPublicKey != "" && cfg.VAPIDPrivateKey != "" {
		if _, err := parseVAPIDKeys(cfg.VAPIDPublicKey, cfg.VAPIDPrivateKey); err != nil {
			var ke *keyError
			if errors.As(err, &ke) {
				p.Add(sec, ke.field, "%v", ke.err)
			}
		}
	} else if cfg.VAPIDPublicKey != "" {
		if b, err := DecodeBase64URL(cfg.VAPIDPublicKey); err != nil || len(b) != 65 || b[0] != 4 {
			p.Add(sec, "vapid_public_key", "want unpadded base64url of an uncompressed P-256 point (65 bytes)")
		}
	}
	if msg := checkSubject(cfg.Subject); msg != "" {
		p.Add(sec, "subject", "%s", msg)
	}
	if cfg.TTL < 0 || cfg.TTL.D() > maxTTL {
		p.Add(sec, "ttl", "must be between 0 and 28 days (672h), got %s", cfg.TTL)
	}
	p.Positive(sec, "timeout", cfg.Timeout)
	for i, h := range cfg.AllowedHosts {
		if err := safehttp.CheckHostName(strings.TrimPrefix(h, "*.")); err != nil {
			p.Add(sec, fmt.Sprintf("allowed_hosts[%d]", i), "want a host name or *.suffix: %v", err)
		}
	}
	if p.Err() != nil || cfg.VAPIDPrivateKey == "" {
		return nil, nil
	}
	if s.PushSubscriptions == nil && !s.Checking {
		// A registry opened without the daemon's store (a program's own
		// check): sends fail as temporary until one is given.
		s.Logger.Warn("web push is opened without a push subscription store (channels.WithPushSubscriptions): its sends will fail")
	}
	return New(cfg, notifiers, s.PushSubscriptions, Options{Logger: s.Logger, Clock: s.Clock})
}

// checkSubject returns what is wrong with a VAPID subject, "" when nothing.
func checkSubject(sub string) string {
	const want = "want a mailto: or https: URL where the push service can reach you (mailto:ops@example.com)"
	if sub == "" {
		return "must be set: " + want
	}
	u, err := url.Parse(sub)
	switch {
	case err != nil:
		return want
	case u.Scheme == "mailto" && strings.Contains(u.Opaque, "@"):
	case u.Scheme == "https" && u.Host != "":
	default:
		return want + ", got " + sub
	}
	return ""
}
