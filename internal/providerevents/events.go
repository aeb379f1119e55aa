// Package providerevents verifies and reads the event webhooks of email and
// SMS providers (POST /v1/providers/{kind}/events): Amazon SES through SNS,
// SendGrid's Event Webhook, Postmark, Mailgun and Twilio's status callbacks,
// each by that provider's own signature scheme, and maps their events to
// notifyd's words (stores.ProviderEvent). It makes no database call: the
// caller records what it returns in one statement. The only network calls
// it makes are SES's: fetching SNS's signing certificate from an allowed
// host (then cached) and confirming a subscription to a configured topic,
// both before anything is written.
package providerevents

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/notifyd/notifyd/channels/deliverytag"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/stores"
)

// Kinds are the providers the route takes events from.
var Kinds = []string{"ses", "sendgrid", "postmark", "mailgun", "twilio"}

// Refusal is the error of a request that is not taken: a bad or missing
// signature, a stale timestamp, a topic not configured, a body that does not
// parse. Status is the HTTP status the provider expects for it (Mailgun
// stops retrying on 406, Postmark wants 401 for bad credentials...).
type Refusal struct {
	Status int
	Reason string
}

func (r *Refusal) Error() string { return r.Reason }

func refuse(status int, format string, args ...any) error {
	return &Refusal{Status: status, Reason: fmt.Sprintf(format, args...)}
}

// Result is what a verified request carries.
type Result struct {
	// Events are the events to record, in the order the provider gave them.
	Events []stores.ProviderEvent
	// Confirmed is set when the request was an SNS subscription
	// confirmation that was confirmed.
	Confirmed bool
	// Ignored counts the provider's events notifyd has no word for
	// (SendGrid's processed, Twilio's queued...).
	Ignored int
}

// Options configure a Verifier.
type Options struct {
	// Providers is the providers section of the config.
	Providers config.Providers
	// TokenSecret is http.token_secret, the key of the delivery tags; ""
	// matches events by the provider's message id only.
	TokenSecret string
	// Client fetches SNS signing certificates and confirms subscriptions.
	// Nil: a client with a 10s timeout.
	Client *http.Client
	// Clock is now; nil is time.Now.
	Clock func() time.Time
}

// Verifier checks and reads provider webhooks. It is safe for concurrent use.
type Verifier struct {
	p      config.Providers
	tags   *deliverytag.Signer
	client *http.Client
	clock  func() time.Time

	certMu   sync.Mutex
	certs    map[string]*x509.Certificate // SigningCertURL -> certificate (or the file's under "")
	fileCert *x509.Certificate
}

// New returns a Verifier. A providers.ses.cert_file that cannot be read is
// an error.
func New(o Options) (*Verifier, error) {
	v := &Verifier{p: o.Providers, client: o.Client, clock: o.Clock, certs: map[string]*x509.Certificate{}}
	if o.TokenSecret != "" {
		v.tags, _ = deliverytag.New(o.TokenSecret)
	}
	if v.client == nil {
		v.client = &http.Client{Timeout: 10 * time.Second}
	}
	if v.clock == nil {
		v.clock = time.Now
	}
	if s := v.p.SES; s != nil && s.CertFile != "" {
		c, err := readCertFile(s.CertFile)
		if err != nil {
			return nil, fmt.Errorf("providers.ses.cert_file: %w", err)
		}
		v.fileCert = c
	}
	return v, nil
}

// Configured reports whether kind has a providers.<kind> section.
func (v *Verifier) Configured(kind string) bool {
	switch kind {
	case "ses":
		return v.p.SES != nil
	case "sendgrid":
		return v.p.SendGrid != nil
	case "postmark":
		return v.p.Postmark != nil
	case "mailgun":
		return v.p.Mailgun != nil
	case "twilio":
		return v.p.Twilio != nil
	}
	return false
}

// ErrNotConfigured is Read's error for a kind that is unknown or has no
// providers.<kind> section.
var ErrNotConfigured = errors.New("provider not configured")

// Read verifies one webhook request of kind whose body is body (already
// read, within the size limit) and returns its events. Any error but
// ErrNotConfigured is a *Refusal.
func (v *Verifier) Read(ctx context.Context, kind string, r *http.Request, body []byte) (*Result, error) {
	if !v.Configured(kind) {
		return nil, ErrNotConfigured
	}
	switch kind {
	case "ses":
		return v.readSES(ctx, r, body)
	case "sendgrid":
		return v.readSendGrid(r, body)
	case "postmark":
		return v.readPostmark(r, body)
	case "mailgun":
		return v.readMailgun(body)
	default:
		return v.readTwilio(r, body)
	}
}

// delivery returns the delivery id a tag names, "" for none or a forged one.
func (v *Verifier) delivery(tag string) string {
	if v.tags == nil || tag == "" {
		return ""
	}
	id, ok := v.tags.Delivery(tag)
	if !ok {
		return ""
	}
	return id
}

// within reports whether t is no further than maxAge from now, either way.
func (v *Verifier) within(t time.Time, maxAge config.Duration) bool {
	d := v.clock().Sub(t)
	if d < 0 {
		d = -d
	}
	return d <= maxAge.D()
}

// oneLine folds s onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// joinDetail is "kind: text" or kind alone.
func joinDetail(kind, text string) string {
	text = oneLine(text)
	if text == "" {
		return kind
	}
	return kind + ": " + text
}
