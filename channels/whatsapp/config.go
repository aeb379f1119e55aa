package whatsapp

import (
	"fmt"
	"regexp"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// Name is the channel's name in config and in the ledger.
const Name = "whatsapp"

// The providers channels.whatsapp.provider names.
const (
	ProviderCloudAPI = "cloud_api"
	ProviderTwilio   = "twilio"
)

// Defaults of channels.whatsapp.
const (
	DefaultAPIURL     = "https://graph.facebook.com"
	DefaultAPIVersion = "v21.0"
	DefaultTwilioURL  = "https://api.twilio.com"
	DefaultWindowKey  = "whatsapp_last_inbound"
)

// Window is how long after the recipient's last message to the business a
// free-text message may be sent: WhatsApp's customer service window.
const Window = 24 * time.Hour

// Plugin registers the WhatsApp channel: per-recipient, to the profile's
// phone (E.164).
var Plugin = channels.Plugin{
	Name:         Name,
	PerRecipient: true,
	Address:      "phone",
	DefaultMode:  notifytype.ModeImmediate,
	Open:         open,
}

// Config is the channels.whatsapp section. Without it whatsapp deliveries
// are `unavailable`.
type Config struct {
	// Provider is cloud_api (the WhatsApp Business Cloud API) or twilio
	// (Twilio's WhatsApp sender).
	Provider string `yaml:"provider"`

	// cloud_api: the business phone number's id and a system user's access
	// token (usually ${VAR}); APIURL and APIVersion address the Graph API.
	PhoneNumberID string `yaml:"phone_number_id"`
	AccessToken   string `yaml:"access_token"`
	APIURL        string `yaml:"api_url"`
	APIVersion    string `yaml:"api_version"`

	// twilio: the account, its auth token and the WhatsApp-enabled sender
	// number (E.164, without the whatsapp: prefix); BaseURL addresses the
	// REST API.
	AccountSID string `yaml:"account_sid"`
	AuthToken  string `yaml:"auth_token"`
	From       string `yaml:"from"`
	BaseURL    string `yaml:"base_url"`

	// WindowKey is the profile data key holding when the recipient last
	// wrote to the business (RFC 3339, or Unix seconds): within Window of
	// it a notifier's free text is sent, otherwise its template. Default
	// whatsapp_last_inbound.
	WindowKey string `yaml:"window_key"`
	// Timeout bounds one request; default 10s.
	Timeout config.Duration `yaml:"timeout"`
}

// SetDefaults sets the API addresses, the window key and a 10 s timeout.
func (c *Config) SetDefaults() {
	c.APIURL, c.APIVersion, c.BaseURL = DefaultAPIURL, DefaultAPIVersion, DefaultTwilioURL
	c.WindowKey, c.Timeout = DefaultWindowKey, config.Duration(10*time.Second)
}

// Template is an approved message template: business-initiated messages
// outside the customer service window must be one.
type Template struct {
	// Name and Language are the template's as approved (cloud_api).
	Name     string `yaml:"name"`
	Language string `yaml:"language"`
	// ContentSID is the approved Content template's SID (HX…, twilio).
	ContentSID string `yaml:"content_sid"`
	// Params are text/templates over the notification's params, filling
	// the template's body variables {{1}}, {{2}}, … in order.
	Params []string `yaml:"params"`

	params []*template.Template
}

// Templates is a notifier's whatsapp section: a template, free text, or
// both (the text is sent within the window, the template otherwise).
type Templates struct {
	Template *Template `yaml:"template"`
	// Text is a text/template over the params, sent as a free-text message
	// only within the customer service window.
	Text string `yaml:"text"`

	text *template.Template
}

var (
	e164RE       = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)
	sidRE        = regexp.MustCompile(`^AC[0-9a-fA-F]{32}$`)
	contentSIDRE = regexp.MustCompile(`^HX[0-9a-fA-F]{32}$`)
	digitsRE     = regexp.MustCompile(`^[0-9]+$`)
	languageRE   = regexp.MustCompile(`^[a-z]{2,3}(_[A-Z]{2})?$`)
)

func open(s *channels.Setup) (any, error) {
	p := s.Problems
	cfg := &Config{}
	decoded := p.Decode(s.Section, cfg)
	notifiers := channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *Templates) {
		if t.Template == nil && t.Text == "" {
			p.Add(n.Section, "template", "must be set (an approved template; text alone is sent only within 24 hours of the recipient's last message)")
		}
		if t.Text != "" {
			t.text = p.Text(n.Section, "text", t.Text)
			p.RenderCheck(n.Section, "text", t.text, n.Example)
		}
		if tp := t.Template; tp != nil {
			switch cfg.Provider {
			case ProviderTwilio:
				if !contentSIDRE.MatchString(tp.ContentSID) {
					p.Add(n.Section, "template.content_sid", "want the approved Content template's SID (HX and 32 hex digits), got %q", tp.ContentSID)
				}
			default:
				if tp.Name == "" {
					p.Add(n.Section, "template.name", "must be set (the approved template's name)")
				}
				if !languageRE.MatchString(tp.Language) {
					p.Add(n.Section, "template.language", "want the template's language code, such as en or en_US, got %q", tp.Language)
				}
			}
			tp.params = make([]*template.Template, len(tp.Params))
			for i, src := range tp.Params {
				key := fmt.Sprintf("template.params[%d]", i)
				tp.params[i] = p.Text(n.Section, key, src)
				p.RenderCheck(n.Section, key, tp.params[i], n.Example)
			}
		}
	})
	if s.Section.Empty() || !decoded {
		return nil, nil
	}
	sec := s.Section
	secret := func(key, v, example string) {
		if v == "" && !s.Checking {
			p.Add(sec, key, "must be set (for example %s)", example)
		}
	}
	switch cfg.Provider {
	case ProviderCloudAPI:
		if !digitsRE.MatchString(cfg.PhoneNumberID) {
			p.Add(sec, "phone_number_id", "want the business phone number's id (digits), got %q", cfg.PhoneNumberID)
		}
		secret("access_token", cfg.AccessToken, "${WHATSAPP_ACCESS_TOKEN}")
		p.HTTPURL(sec, "api_url", cfg.APIURL)
		if cfg.APIVersion == "" {
			p.Add(sec, "api_version", "must not be empty (default %s)", DefaultAPIVersion)
		}
	case ProviderTwilio:
		if !sidRE.MatchString(cfg.AccountSID) {
			p.Add(sec, "account_sid", "want a Twilio account SID (AC and 32 hex digits), got %q", cfg.AccountSID)
		}
		secret("auth_token", cfg.AuthToken, "${TWILIO_AUTH_TOKEN}")
		if !e164RE.MatchString(cfg.From) {
			p.Add(sec, "from", "want the WhatsApp sender's E.164 number, such as +14155550123, got %q", cfg.From)
		}
		p.HTTPURL(sec, "base_url", cfg.BaseURL)
	case "":
		p.Add(sec, "provider", "must be set (cloud_api or twilio)")
	default:
		p.Add(sec, "provider", "unknown provider %q (want cloud_api or twilio)", cfg.Provider)
	}
	if cfg.WindowKey == "" {
		p.Add(sec, "window_key", "must not be empty (default %s)", DefaultWindowKey)
	}
	p.Positive(sec, "timeout", cfg.Timeout)
	if p.Err() != nil || (cfg.AccessToken == "" && cfg.AuthToken == "") {
		return nil, nil // checking, with the secret left to the environment
	}
	return New(cfg, notifiers, Options{Logger: s.Logger, Clock: s.Clock})
}
