package sms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/failover"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
)

// The kinds of channels.sms.providers entries.
const (
	KindTwilio = "twilio"
	KindVonage = "vonage"
)

var providerKinds = []string{KindTwilio, KindVonage}

// Provider is one entry of channels.sms.providers: an SMS API, tried in
// list order for each text (see the package doc's Failover). Only the keys
// of its Kind apply; credentials are usually ${VAR}s.
type Provider struct {
	// Kind is twilio or vonage.
	Kind string `yaml:"kind"`
	// Name is what the ledger records as the delivery's provider; unique in
	// the list. Empty: the kind.
	Name string `yaml:"name"`
	// Rate is the most texts per second this replica hands the provider
	// ("10/s", "600/m", or a bare number per second); empty or "0" is
	// unlimited. A text over it goes to the next provider.
	Rate string `yaml:"rate"`
	// Lanes is the most texts in flight to the provider at once. Zero: 8.
	Lanes int `yaml:"lanes"`
	// Timeout bounds one text to the provider, from waiting for a lane to
	// its answer. Zero: channels.sms.timeout.
	Timeout config.Duration `yaml:"timeout"`
	// BaseURL replaces the API's base URL (https, or http on a loopback
	// host). Empty: the provider's own.
	BaseURL string `yaml:"base_url"`
	// From is the sender: an E.164 number of the account, or an
	// alphanumeric sender id (up to 11 letters, digits and spaces).
	From string `yaml:"from"`

	// twilio: the account and its auth token.
	AccountSID string `yaml:"account_sid"`
	AuthToken  string `yaml:"auth_token"`

	// vonage: the application and its private key (PEM, PKCS #8 or
	// PKCS #1), which signs the JWT each request carries.
	ApplicationID string `yaml:"application_id"`
	PrivateKey    string `yaml:"private_key"`
}

// DisplayName is Name, or the kind.
func (p *Provider) DisplayName() string {
	if p.Name != "" {
		return p.Name
	}
	return p.Kind
}

// defaultLanes is a provider's lanes when its entry does not say.
const defaultLanes = 8

// ProviderList is channels.sms.providers, or the section's own Twilio
// settings as a single provider named twilio when the list is not set.
func (c *Config) ProviderList() []*Provider {
	if len(c.Providers) > 0 {
		return c.Providers
	}
	return []*Provider{{Kind: KindTwilio, AccountSID: c.AccountSID, AuthToken: c.AuthToken, From: c.From,
		BaseURL: c.BaseURL}}
}

// api is an SMS API: it sends one text and reads the provider's answer into
// its message id and the segments it billed (0: it did not say), or a
// classified error.
type api interface {
	send(ctx context.Context, to, text string) (id string, segments int, err error)
}

type provider = failover.Provider[api]

// newProviders builds the failover list of cfg.ProviderList().
func newProviders(cfg *Config, client *http.Client, clock func() time.Time) ([]*provider, error) {
	var out []*provider
	for i, pc := range cfg.ProviderList() {
		key := fmt.Sprintf("channels.sms.providers[%d]", i)
		if len(cfg.Providers) == 0 {
			key = "channels.sms"
		}
		timeout, timeoutKey := cfg.Timeout.D(), "channels.sms.timeout"
		if d := pc.Timeout.D(); d > 0 {
			timeout, timeoutKey = d, key+".timeout"
		}
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		lanes := pc.Lanes
		if lanes <= 0 {
			lanes = defaultLanes
		}
		base := strings.TrimRight(pc.BaseURL, "/")
		var via api
		switch pc.Kind {
		case KindTwilio:
			if pc.AccountSID == "" || pc.AuthToken == "" || pc.From == "" {
				return nil, fmt.Errorf("sms: %s needs account_sid, auth_token and from", key)
			}
			via = newTwilio(pc, key, base, client, clock)
		case KindVonage:
			v, err := newVonage(pc, key, base, client, clock)
			if err != nil {
				return nil, fmt.Errorf("sms: %s: %w", key, err)
			}
			via = v
		default:
			return nil, fmt.Errorf("sms: %s.kind: unknown provider kind %q", key, pc.Kind)
		}
		p, err := failover.NewProvider(failover.Spec{Name: pc.DisplayName(), Kind: pc.Kind, Timeout: timeout,
			TimeoutKey: timeoutKey, Rate: pc.Rate, Lanes: lanes}, via)
		if err != nil {
			return nil, fmt.Errorf("sms: %s.rate: %w", key, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// checkProviders reports what is wrong with each entry of
// channels.sms.providers at its own key ("providers[1].private_key").
func checkProviders(p *config.Problems, sec *config.Section, cfg *Config, checking bool) {
	if cfg.AccountSID != "" || cfg.AuthToken != "" || cfg.From != "" {
		p.Add(sec, "providers", "set either account_sid, auth_token and from or providers, not both (they are a provider of kind twilio)")
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
		switch pr.Kind {
		case KindTwilio:
			if !sidRE.MatchString(pr.AccountSID) {
				p.Add(sec, key+"account_sid", "want a Twilio account SID (AC and 32 hex digits), got %q", pr.AccountSID)
			}
			secret("auth_token", pr.AuthToken, "${TWILIO_AUTH_TOKEN}")
		case KindVonage:
			if !uuidRE.MatchString(pr.ApplicationID) {
				p.Add(sec, key+"application_id", "want the Vonage application's id (a UUID), got %q", pr.ApplicationID)
			}
			secret("private_key", pr.PrivateKey, "${VONAGE_PRIVATE_KEY}")
			if pr.PrivateKey != "" {
				if _, err := parsePrivateKey(pr.PrivateKey); err != nil {
					p.Add(sec, key+"private_key", "%v", err)
				}
			}
		case "":
			p.Add(sec, key+"kind", "must be set (one of %s)", strings.Join(providerKinds, ", "))
		default:
			p.Add(sec, key+"kind", "unknown provider kind %q (want one of %s)", pr.Kind, strings.Join(providerKinds, ", "))
		}
		checkFrom(p, sec, key+"from", pr.From)
		if pr.BaseURL != "" {
			p.HTTPURL(sec, key+"base_url", pr.BaseURL)
			if msg := checkBaseURL(pr.BaseURL); msg != "" {
				p.Add(sec, key+"base_url", "%s", msg)
			}
		}
		if _, err := failover.ParseRate(pr.Rate); err != nil {
			p.Add(sec, key+"rate", "%v", err)
		}
		if pr.Lanes < 0 {
			p.Add(sec, key+"lanes", "must not be negative (0 is 8), got %d", pr.Lanes)
		}
		if pr.Timeout < 0 {
			p.Add(sec, key+"timeout", "must not be negative (0 is channels.sms.timeout)")
		}
		name := pr.DisplayName()
		if j, dup := names[name]; dup {
			p.Add(sec, key+"name", "%q is the name of providers[%d] too: give each provider its own name", name, j)
		}
		names[name] = i
	}
}

// checkFrom reports a sender that is neither an E.164 number nor an
// alphanumeric sender id.
func checkFrom(p *config.Problems, sec *config.Section, key, from string) {
	switch {
	case from == "":
		p.Add(sec, key, "must be set: an E.164 number such as +14155550123, or an alphanumeric sender id")
	case e164RE.MatchString(from):
	case from[0] == '+' || !senderIDRE.MatchString(from) || !letterRE.MatchString(from):
		p.Add(sec, key, "want an E.164 number such as +14155550123, or an alphanumeric sender id (1 to 11 letters, digits or spaces, at least one letter), got %q", from)
	}
}

// post sends req, a provider's request, and reads its answer. A request
// that fails on the way (no connection, the provider's timeout, a dropped
// answer) is temporary: the next provider gets the text. Errors name dest,
// not the URL, which carries the account.
func post(ctx context.Context, client *http.Client, req *http.Request, dest string) (int, http.Header, []byte, error) {
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "notifyd")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", context.Cause(ctx), err) // both: the timeout, and the net.Error
		}
		return 0, nil, nil, channels.Temporary(fmt.Errorf("%s: %w", dest, err), 0)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, safehttp.MaxResponseBody))
	resp.Body.Close()
	if err != nil && resp.StatusCode/100 == 2 {
		return 0, nil, nil, channels.Temporary(fmt.Errorf("%s: read its answer: %w", dest, err), 0)
	}
	return resp.StatusCode, resp.Header, body, nil
}
