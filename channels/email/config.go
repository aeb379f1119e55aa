package email

import (
	htmltemplate "html/template"
	"maps"
	"net"
	netmail "net/mail"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/unsubscribe"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// Name is the channel's name in config and in the ledger.
const Name = "email"

// Plugin registers the email channel. It is per-recipient, needs the
// profile's email address, and can digest.
var Plugin = channels.Plugin{
	Name:         Name,
	PerRecipient: true,
	Address:      "email",
	Digest:       true,
	DefaultMode:  notifytype.ModeImmediate,
	Open:         open,
}

var (
	_ channels.Channel       = (*Sender)(nil)
	_ channels.DigestChannel = (*Sender)(nil)
	_ channels.Previewer     = (*Sender)(nil)
)

// Config is the channels.email section. Without it email deliveries are
// `unavailable`.
type Config struct {
	From string `yaml:"from"`
	// SMTP is the mail server, or the first of several (see Failover).
	SMTP SMTP `yaml:"smtp"`
	// Failover are the servers tried after SMTP, in order, when it cannot be
	// reached or answers with a temporary (4xx) reply. In YAML,
	// channels.email.smtp is either one server or a list of them: the list's
	// first entry is SMTP and the rest are Failover. Empty: one server.
	Failover []SMTP `yaml:"-"`
	// Providers, when set, replace SMTP: mail servers and email APIs tried
	// in order for each message, each with its own rate, lanes and circuit
	// breaker (see Provider). Set either smtp or providers.
	Providers []*Provider `yaml:"providers"`
	// SMTPSet and ProvidersSet say which of the keys the file wrote
	// (decodeConfig sets them).
	SMTPSet, ProvidersSet bool `yaml:"-"`
	// Rate is messages per second per replica; 0 is unlimited.
	Rate float64 `yaml:"rate"`
	// Timeout bounds one SMTP conversation (waiting for a connection to the
	// server's reply to one message). Default 30s.
	Timeout config.Duration `yaml:"timeout"`

	// Deliverability: one-click unsubscribe and DKIM.
	//
	// UnsubscribeURL is notifyd's public base URL ("https://notify.acme.test"):
	// every email of a notifier that is not required carries a signed
	// one-click link to {UnsubscribeURL}/v1/unsubscribe/{token}. Empty: no
	// List-Unsubscribe header. https, or http for a loopback host.
	UnsubscribeURL string `yaml:"unsubscribe_url"`
	// UnsubscribeMailto, optional, adds <mailto:ADDRESS?subject=unsubscribe
	// TOKEN> to the header for receivers that only mail.
	UnsubscribeMailto string `yaml:"unsubscribe_mailto"`
	// UnsubscribeTTL is how long an unsubscribe link works after the
	// message is sent; default 60 days (1440h), at least a day.
	UnsubscribeTTL config.Duration `yaml:"unsubscribe_ttl"`
	// DKIM, when set, signs every message.
	DKIM *DKIM `yaml:"dkim"`
	// ListUnsubscribe is the removed list_unsubscribe template, decoded only
	// to refuse it with a message that names its replacement.
	ListUnsubscribe string `yaml:"list_unsubscribe"`
}

// SetDefaults sets tls none, a 30 s timeout and 60-day unsubscribe links.
func (c *Config) SetDefaults() {
	c.SMTP.TLS = "none"
	c.Timeout = config.Duration(30 * time.Second)
	c.UnsubscribeTTL = config.Duration(unsubscribe.DefaultTTL)
}

// SMTP is the mail server email is handed to.
type SMTP struct {
	Host     string `yaml:"host"`
	Port     int    `yaml:"port"`
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	TLS      string `yaml:"tls"` // none | starttls | tls; default none
}

// SetDefaults sets tls none (for each entry of a list of servers).
func (sm *SMTP) SetDefaults() { sm.TLS = "none" }

// Addr is the server's host:port as the ledger's provider names it (the
// port defaults by tls mode: 25, 587 for starttls, 465 for tls).
func (sm SMTP) Addr() string {
	port := sm.Port
	if port == 0 {
		switch sm.TLS {
		case "starttls":
			port = 587
		case "tls":
			port = 465
		default:
			port = 25
		}
	}
	return net.JoinHostPort(sm.Host, strconv.Itoa(port))
}

// Track is notifiers.<n>.channels.email.track: Opens adds an open pixel to
// the HTML part, Clicks rewrites its links to signed redirects. Both need
// channels.email.unsubscribe_url, the public base URL the links go to.
type Track struct {
	Opens  bool `yaml:"opens"`
	Clicks bool `yaml:"clicks"`
}

func (t *Track) on() bool { return t != nil && (t.Opens || t.Clicks) }

// Servers returns the SMTP servers in the order each message tries them:
// SMTP, then Failover.
func (c *Config) Servers() []SMTP { return append([]SMTP{c.SMTP}, c.Failover...) }

// ProviderList returns the providers each message tries, in order:
// Providers when set, else each of Servers as a provider of kind smtp
// named host:port.
func (c *Config) ProviderList() []*Provider {
	if len(c.Providers) > 0 {
		return c.Providers
	}
	var out []*Provider
	for _, sm := range c.Servers() {
		out = append(out, &Provider{Kind: KindSMTP, Name: sm.Addr(), Host: sm.Host, Port: sm.Port,
			Username: sm.Username, Password: sm.Password, TLS: sm.TLS})
	}
	return out
}

// Templates are a notifier's email section: subject and text are
// text/template, html is html/template, over the params. Locales maps a
// locale ("fr", "pt-BR") to variants; see For.
type Templates struct {
	Subject string                `yaml:"subject"`
	Text    string                `yaml:"text"`
	HTML    string                `yaml:"html"`
	Locales map[string]*Templates `yaml:"locales"`
	// Default is decoded only to refuse it in a locale variant with a clear
	// message: a notifier's own `default` is read by notifyd, not here.
	Default string `yaml:"default"`
	// Track turns on open and click tracking for the notifier's email
	// (channels/tracking); set on the email channel, not per locale.
	Track *Track `yaml:"track"`

	subjectT, textT *template.Template
	htmlT           *htmltemplate.Template
}

// For returns the templates for a recipient locale: the variant whose key
// equals locale (case-insensitive, "_" read as "-"), else the variant for its
// language ("pt" for "pt-BR"), else t itself.
func (t *Templates) For(locale string) *Templates {
	want := normLocale(locale)
	if want == "" || len(t.Locales) == 0 {
		return t
	}
	lang, _, _ := strings.Cut(want, "-")
	var byLang *Templates
	for k, v := range t.Locales {
		switch normLocale(k) {
		case want:
			return v
		case lang:
			byLang = v
		}
	}
	if byLang != nil {
		return byLang
	}
	return t
}

func normLocale(s string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "_", "-"))
}

var localeRE = regexp.MustCompile(`^[A-Za-z]{2,8}([-_][A-Za-z0-9]{1,8})*$`)

// open decodes channels.email and every notifier's email templates, and
// builds the Sender; with no channels.email section the templates are still
// checked, and email is not configured.
func open(s *channels.Setup) (any, error) {
	p := s.Problems
	var tracked []*config.Section // notifiers whose email tracks opens or clicks
	notifiers := channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *Templates) {
		sec := n.Section
		if t.Track.on() {
			tracked = append(tracked, sec)
		}
		t.compile(p, sec, "", n.Example)
		for _, loc := range slices.Sorted(maps.Keys(t.Locales)) {
			v := t.Locales[loc]
			key := "locales." + loc
			if !localeRE.MatchString(loc) {
				p.Add(sec, key, "invalid locale %q (want a language tag such as fr or pt-BR)", loc)
			}
			if v == nil {
				p.Add(sec, key, "must be a mapping with subject and text or html")
				continue
			}
			if len(v.Locales) > 0 {
				p.Add(sec, key+".locales", "locale variants do not nest")
			}
			if v.Default != "" {
				p.Add(sec, key+".default", "a locale variant has no mode of its own (set default on the email channel)")
			}
			if v.Track != nil {
				p.Add(sec, key+".track", "a locale variant has no tracking of its own (set track on the email channel)")
			}
			v.compile(p, sec, key+".", n.Example)
		}
	})
	if s.Section.Empty() {
		return nil, nil
	}
	cfg := &Config{}
	if !decodeConfig(s, cfg) {
		return nil, nil
	}
	sec := s.Section
	if cfg.From == "" {
		p.Add(sec, "from", "must be set (a sender address such as \"Acme <notify@acme.test>\")")
	} else if a, err := netmail.ParseAddress(cfg.From); err != nil {
		p.Add(sec, "from", "invalid address %q: %v", cfg.From, err)
	} else if at := strings.LastIndexByte(a.Address, '@'); at < 0 || at == len(a.Address)-1 {
		p.Add(sec, "from", "address %q has no domain (Message-IDs are made from it)", cfg.From)
	}
	if cfg.ProvidersSet {
		checkProviders(p, sec, cfg, s.Checking)
	} else {
		checkServers(p, sec, cfg)
	}
	if cfg.Rate < 0 {
		p.Add(sec, "rate", "must not be negative (0 is unlimited), got %v", cfg.Rate)
	}
	p.Positive(sec, "timeout", cfg.Timeout)
	checkUnsubscribe(p, sec, cfg, s.Config, s.Checking)
	if cfg.UnsubscribeURL == "" {
		for _, ns := range tracked {
			p.Add(ns, "track", "needs channels.email.unsubscribe_url, the public base URL tracking links go to")
		}
	}
	if cfg.DKIM != nil {
		_, problems := checkDKIM(cfg.DKIM)
		for _, k := range problems {
			p.Add(sec, "dkim."+k.key, "%s", k.msg)
		}
	}
	if p.Err() != nil {
		return nil, nil // the registry reports the problems
	}
	opts := Options{Logger: s.Logger, Clock: s.Clock, TokenSecret: s.Config.HTTP.TokenSecret,
		Notifier: func(name string) (string, bool, bool) {
			n, ok := s.Config.Notifier(name)
			if !ok {
				return "", false, false
			}
			return n.Category, n.Required, true
		}}
	if s.Checking && opts.TokenSecret == "" {
		opts.TokenSecret = "checking only: no links are sent" // the daemon refuses to start without the secret
	}
	sender, err := New(cfg, &s.Config.Digest, notifiers, opts)
	if err != nil {
		return nil, err
	}
	return sender, nil
}

// compile parses and test-renders one set of templates (the default, or the
// locale variant whose keys start with prefix).
func (t *Templates) compile(p *config.Problems, sec *config.Section, prefix string, example map[string]any) {
	if t.Subject == "" {
		p.Add(sec, prefix+"subject", "must be set")
	}
	if t.Text == "" && t.HTML == "" {
		p.Add(sec, prefix+"text", "text or html must be set")
	}
	t.subjectT = p.RecipientText(sec, prefix+"subject", t.Subject)
	t.textT = p.RecipientText(sec, prefix+"text", t.Text)
	t.htmlT = p.HTML(sec, prefix+"html", t.HTML)
	p.RenderCheck(sec, prefix+"subject", t.subjectT, example)
	p.RenderCheck(sec, prefix+"text", t.textT, example)
	p.RenderCheck(sec, prefix+"html", t.htmlT, example)
}
