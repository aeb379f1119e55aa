package email

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels/internal/failover"
	"github.com/notifyd/notifyd/config"
)

// The kinds of channels.email.providers entries.
const (
	KindSMTP     = "smtp"
	KindSES      = "ses"
	KindSendGrid = "sendgrid"
	KindPostmark = "postmark"
	KindMailgun  = "mailgun"
	KindResend   = "resend"
)

var providerKinds = []string{KindSMTP, KindSES, KindSendGrid, KindPostmark, KindMailgun, KindResend}

// Provider is one entry of channels.email.providers: a mail server or an
// email API, tried in list order for each message (see the package doc's
// Failover). Only the keys of its Kind apply; credentials are usually
// ${VAR}s.
type Provider struct {
	// Kind is smtp, ses, sendgrid, postmark, mailgun or resend.
	Kind string `yaml:"kind"`
	// Name is what the ledger records as the delivery's provider; unique in
	// the list. Empty: the kind ("ses"), or host:port for smtp.
	Name string `yaml:"name"`
	// Rate is the most messages per second this replica hands the provider
	// ("14/s", "600/m", "50000/h", or a bare number per second); empty or
	// "0" is unlimited. A message over it goes to the next provider.
	Rate string `yaml:"rate"`
	// Lanes is the most messages in flight to the provider at once (for
	// smtp, its connections). Zero: 8.
	Lanes int `yaml:"lanes"`
	// Timeout bounds one message to the provider, from waiting for a lane
	// to its answer. Zero: channels.email.timeout.
	Timeout config.Duration `yaml:"timeout"`
	// Endpoint replaces an API's base URL ("https://api.eu.mailgun.net");
	// empty: the provider's own (SES's is made from Region).
	Endpoint string `yaml:"endpoint"`

	// smtp: as channels.email.smtp.
	Host     string `yaml:"host"`
	Port     int    `yaml:"port"`
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	TLS      string `yaml:"tls"`

	// ses: the region and an IAM key allowed ses:SendRawEmail.
	Region           string `yaml:"region"`
	AccessKeyID      string `yaml:"access_key_id"`
	SecretAccessKey  string `yaml:"secret_access_key"`
	SessionToken     string `yaml:"session_token"`
	ConfigurationSet string `yaml:"configuration_set"`

	// sendgrid, mailgun, resend: the API key.
	APIKey string `yaml:"api_key"`
	// mailgun: the sending domain.
	Domain string `yaml:"domain"`
	// postmark: the server token and message stream (default "outbound").
	ServerToken   string `yaml:"server_token"`
	MessageStream string `yaml:"message_stream"`
}

// SetDefaults sets tls none, as for channels.email.smtp.
func (p *Provider) SetDefaults() { p.TLS = "none" }

// smtp returns an smtp entry's server settings.
func (p *Provider) smtp() SMTP {
	return SMTP{Host: p.Host, Port: p.Port, Username: p.Username, Password: p.Password, TLS: p.TLS}
}

// DisplayName is Name, or its default: host:port for smtp, else the kind.
func (p *Provider) DisplayName() string {
	switch {
	case p.Name != "":
		return p.Name
	case p.Kind == KindSMTP:
		return p.smtp().Addr()
	}
	return p.Kind
}

// checkProviders reports what is wrong with each entry of
// channels.email.providers at its own key ("providers[1].api_key").
// A missing credential is not reported when only checking: it usually
// comes from the environment, which the daemon needs and `notifyd check`
// may not have.
func checkProviders(p *config.Problems, sec *config.Section, cfg *Config, checking bool) {
	if cfg.SMTPSet {
		p.Add(sec, "providers", "set either smtp or providers, not both (an smtp server is a provider of kind smtp)")
	}
	if len(cfg.Providers) == 0 {
		p.Add(sec, "providers", "an empty list: want one provider or more, tried in order")
	}
	names := map[string]int{}
	for i, pr := range cfg.Providers {
		key := fmt.Sprintf("providers[%d].", i)
		if pr == nil {
			p.Add(sec, strings.TrimSuffix(key, "."), "must be a mapping with kind and its settings")
			continue
		}
		secret := func(k, v, example string) {
			if v == "" && !checking {
				p.Add(sec, key+k, "must be set (for example %s)", example)
			}
		}
		required := func(k, v, what string) {
			if v == "" {
				p.Add(sec, key+k, "must be set (%s)", what)
			}
		}
		switch pr.Kind {
		case KindSMTP:
			checkSMTP(p, sec, key, pr.smtp())
		case KindSES:
			required("region", pr.Region, "the SES region, such as us-east-1")
			secret("access_key_id", pr.AccessKeyID, "${AWS_ACCESS_KEY_ID}")
			secret("secret_access_key", pr.SecretAccessKey, "${AWS_SECRET_ACCESS_KEY}")
		case KindSendGrid:
			secret("api_key", pr.APIKey, "${SENDGRID_API_KEY}")
		case KindPostmark:
			secret("server_token", pr.ServerToken, "${POSTMARK_SERVER_TOKEN}")
		case KindMailgun:
			required("domain", pr.Domain, "the Mailgun sending domain, such as mg.acme.test")
			secret("api_key", pr.APIKey, "${MAILGUN_API_KEY}")
		case KindResend:
			secret("api_key", pr.APIKey, "${RESEND_API_KEY}")
		case "":
			p.Add(sec, key+"kind", "must be set (one of %s)", strings.Join(providerKinds, ", "))
		default:
			p.Add(sec, key+"kind", "unknown provider kind %q (want one of %s)", pr.Kind, strings.Join(providerKinds, ", "))
		}
		if pr.Kind != KindSMTP && pr.Kind != "" && pr.Host != "" {
			p.Add(sec, key+"host", "applies to kind smtp only (an API's base URL is endpoint)")
		}
		if _, err := failover.ParseRate(pr.Rate); err != nil {
			p.Add(sec, key+"rate", "%v", err)
		}
		if pr.Lanes < 0 {
			p.Add(sec, key+"lanes", "must not be negative (0 is 8), got %d", pr.Lanes)
		}
		if pr.Timeout < 0 {
			p.Add(sec, key+"timeout", "must not be negative (0 is channels.email.timeout)")
		}
		if pr.Endpoint != "" {
			if pr.Kind == KindSMTP {
				p.Add(sec, key+"endpoint", "applies to API providers only (smtp has host and port)")
			} else if u, err := url.Parse(pr.Endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				p.Add(sec, key+"endpoint", "want an http(s) base URL, got %q", pr.Endpoint)
			}
		}
		name := pr.DisplayName()
		if j, dup := names[name]; dup {
			p.Add(sec, key+"name", "%q is the name of providers[%d] too: give each provider its own name", name, j)
		}
		names[name] = i
	}
}

// timeoutOf is the provider's timeout, else the channel's.
func (p *Provider) timeoutOf(channel time.Duration) time.Duration {
	if d := p.Timeout.D(); d > 0 {
		return d
	}
	return channel
}
