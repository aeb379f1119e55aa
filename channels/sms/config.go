package sms

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/templates"
)

// Name is the channel's name in config and in the ledger.
const Name = "sms"

// Plugin registers the SMS channel: per-recipient, to the profile's phone.
// A notifier with an sms section sends text messages unless a preference
// says otherwise.
var Plugin = channels.Plugin{
	Name:         Name,
	PerRecipient: true,
	Address:      "phone",
	DefaultMode:  notifytype.ModeImmediate,
	Open:         open,
}

// DefaultMaxSegments is the longest text sent when channels.sms.max_segments
// is not set: ten parts, 1530 GSM characters or 670 UCS-2 ones.
const DefaultMaxSegments = 10

// Config is the channels.sms section. Without it SMS deliveries are
// `unavailable`.
type Config struct {
	// AccountSID is the Twilio account ("AC" and 32 hex digits).
	AccountSID string `yaml:"account_sid"`
	// AuthToken is the account's auth token (a secret: give it as ${VAR}).
	AuthToken string `yaml:"auth_token"`
	// From is the sender: an E.164 number of the account, or an
	// alphanumeric sender id (up to 11 letters, digits and spaces).
	From string `yaml:"from"`
	// BaseURL is where the Messages API is; default DefaultBaseURL.
	BaseURL string `yaml:"base_url"`
	// MaxSegments is the most message parts one text may take; a longer
	// text is refused. Default DefaultMaxSegments.
	MaxSegments int `yaml:"max_segments"`
	// Timeout bounds one request; default 10s.
	Timeout config.Duration `yaml:"timeout"`
	// AllowedCountries are the E.164 country calling codes ("1", "44",
	// "33") a text may be sent to; a phone elsewhere is refused (the
	// delivery is `unavailable`). Empty: every country. Against toll fraud
	// (texts to premium-rate numbers), list the countries you serve.
	AllowedCountries []string `yaml:"allowed_countries"`
	// Rate is texts per second per replica; over it the send job snoozes.
	// 0 is unlimited.
	Rate float64 `yaml:"rate"`
	// MaxPerRecipientPerDay is the most texts (attempts) one recipient may be
	// sent in any 24 hours, whatever the notifier; the rest are `throttled`.
	// Default DefaultMaxPerRecipientPerDay; 0 is no cap.
	MaxPerRecipientPerDay int `yaml:"max_per_recipient_per_day"`
	// Providers replaces account_sid, auth_token, from and base_url with an
	// ordered list of SMS providers (twilio, vonage) tried in turn for each
	// text (see Provider).
	Providers []*Provider `yaml:"providers"`
}

// DefaultMaxPerRecipientPerDay is channels.sms.max_per_recipient_per_day
// when it is not set.
const DefaultMaxPerRecipientPerDay = 20

// SetDefaults sets the base URL, ten segments, a 10 s timeout and a cap of
// 20 texts per recipient per day.
func (c *Config) SetDefaults() {
	c.BaseURL = DefaultBaseURL
	c.MaxSegments = DefaultMaxSegments
	c.Timeout = config.Duration(10 * time.Second)
	c.MaxPerRecipientPerDay = DefaultMaxPerRecipientPerDay
}

// Templates is a notifier's sms section: text is a text/template over the
// params.
type Templates struct {
	Text string `yaml:"text"`

	text *template.Template
}

var (
	sidRE      = regexp.MustCompile(`^AC[0-9a-fA-F]{32}$`)
	e164RE     = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)
	senderIDRE = regexp.MustCompile(`^[A-Za-z0-9 ]{1,11}$`)
	letterRE   = regexp.MustCompile(`[A-Za-z]`)
	countryRE  = regexp.MustCompile(`^[1-9][0-9]{0,2}$`)
	uuidRE     = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

func open(s *channels.Setup) (any, error) {
	p := s.Problems
	cfg := &Config{}
	decoded := p.Decode(s.Section, cfg) // defaults even without a section
	notifiers := channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *Templates) {
		if t.Text == "" {
			p.Add(n.Section, "text", "must be set")
			return
		}
		t.text = p.Text(n.Section, "text", t.Text)
		p.RenderCheck(n.Section, "text", t.text, n.Example)
		if t.text == nil {
			return
		}
		if out, err := templates.RenderText(t.text, n.Example); err == nil {
			if segs, enc := Segments(out); cfg.MaxSegments > 0 && segs > cfg.MaxSegments {
				p.Add(n.Section, "text", "renders the example params as %d %s segments, more than channels.sms.max_segments (%d)",
					segs, enc, cfg.MaxSegments)
			}
		}
	})
	if s.Section.Empty() || !decoded {
		return nil, nil
	}
	sec := s.Section
	if cfg.Providers != nil {
		if len(cfg.Providers) == 0 {
			p.Add(sec, "providers", "an empty list: want one provider or more, tried in order")
		}
		checkProviders(p, sec, cfg, s.Checking)
	} else {
		if !sidRE.MatchString(cfg.AccountSID) {
			p.Add(sec, "account_sid", "want a Twilio account SID (AC and 32 hex digits), got %q", cfg.AccountSID)
		}
		if cfg.AuthToken == "" && !s.Checking {
			p.Add(sec, "auth_token", "must be set (the account's auth token, for example ${TWILIO_AUTH_TOKEN})")
		}
		checkFrom(p, sec, "from", cfg.From)
		p.HTTPURL(sec, "base_url", cfg.BaseURL)
		if msg := checkBaseURL(cfg.BaseURL); msg != "" {
			p.Add(sec, "base_url", "%s", msg)
		}
	}
	for i, cc := range cfg.AllowedCountries {
		if !countryRE.MatchString(cc) {
			p.Add(sec, fmt.Sprintf("allowed_countries[%d]", i), "want an E.164 country calling code (1 to 3 digits, such as 1, 44 or 353), got %q", cc)
		}
	}
	if cfg.Rate < 0 {
		p.Add(sec, "rate", "must not be negative (0 is unlimited), got %v", cfg.Rate)
	}
	if cfg.MaxPerRecipientPerDay < 0 {
		p.Add(sec, "max_per_recipient_per_day", "must not be negative (0 is no cap), got %d", cfg.MaxPerRecipientPerDay)
	}
	if cfg.MaxSegments < 1 {
		p.Add(sec, "max_segments", "must be at least 1, got %d", cfg.MaxSegments)
	}
	p.Positive(sec, "timeout", cfg.Timeout)
	if p.Err() != nil || !credentialed(cfg) {
		return nil, nil // checking, with a secret left to the environment
	}
	return New(cfg, notifiers, Options{Logger: s.Logger, Clock: s.Clock})
}

// checkBaseURL returns why base cannot be channels.sms.base_url, "" when it
// can: it carries the account's credentials in every request, so it must be
// https, except on a loopback host (a local test double).
func checkBaseURL(base string) string {
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "https" {
		return "" // HTTPURL reports what does not parse
	}
	if u.Scheme == "http" {
		h := u.Hostname()
		if ip, err := netip.ParseAddr(h); (err == nil && ip.IsLoopback()) || strings.EqualFold(h, "localhost") {
			return ""
		}
		return "must be an https URL (it carries the account's auth token); http only for a loopback host"
	}
	return ""
}

// credentialed reports whether every provider has its secret.
func credentialed(cfg *Config) bool {
	for _, pr := range cfg.ProviderList() {
		if pr == nil || (pr.Kind == KindTwilio && pr.AuthToken == "") || (pr.Kind == KindVonage && pr.PrivateKey == "") {
			return false
		}
	}
	return true
}
