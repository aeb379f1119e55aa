package email

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	netmail "net/mail"
	"strings"
	"time"

	"github.com/wneessen/go-mail"
	"golang.org/x/time/rate"

	"github.com/notifyd/notifyd/channels"
)

// provider is one entry of the provider list (Config.ProviderList) with its
// own lanes, rate limiter and circuit breaker, so that a slow or failing
// provider holds up only the messages that are trying it.
type provider struct {
	name       string // recorded as the delivery's provider
	kind       string
	timeout    time.Duration
	timeoutKey string // the config key of timeout, for its error
	rateText   string
	limiter    *rate.Limiter // nil: unlimited
	breaker    breaker
	pool       *pool // kind smtp: its connections (the lanes)
	api        api   // other kinds
	lanes      chan struct{}
}

// api is an email API: it builds the request for a message and reads the
// provider's answer into its message id or a classified error.
type api interface {
	request(ctx context.Context, o *outgoing) (*http.Request, []byte, error)
	result(status int, h http.Header, body []byte, o *outgoing) (string, error)
	common() *apiClient
}

// outgoing is one rendered message on its way to the providers.
type outgoing struct {
	m        *mail.Msg // nil for DeliverRaw
	from     string    // envelope sender
	rcpts    []string
	smtpBody io.WriterTo // m, or its DKIM-signed rendering
	subject  string
	text     string
	html     string
	delivery string // the delivery (or digest) id
	// tag is the delivery's signed tag (deliverytag), the value of the
	// tag, custom arg, metadata or variable an API provider echoes back with
	// its events; the bare id without http.token_secret.
	tag string

	raw []byte // m rendered, unsigned; filled by rawMessage
}

// rawMessage is the message as notifyd renders it, without a DKIM
// signature (an API provider signs it with the domain it verified).
func (o *outgoing) rawMessage() ([]byte, error) {
	if o.raw != nil {
		return o.raw, nil
	}
	if o.m == nil {
		if b, ok := o.smtpBody.(bytesMessage); ok {
			o.raw = b
			return o.raw, nil
		}
		return nil, errors.New("no message to render")
	}
	var b bytes.Buffer
	if _, err := o.m.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("render message: %w", err)
	}
	o.raw = b.Bytes()
	return o.raw, nil
}

// carriedHeaders are the headers of notifyd's message that a structured
// (JSON) API is given besides from, to, subject and the bodies.
var carriedHeaders = []string{"Message-ID", "X-Notifyd-Delivery", "X-Notifyd-Notifier", "X-Notifyd-Digest",
	"List-Unsubscribe", "List-Unsubscribe-Post"}

// headers returns the carried headers the message has, in carriedHeaders'
// order, as the rendered message has them (unfolded).
func (o *outgoing) headers() ([][2]string, error) {
	raw, err := o.rawMessage()
	if err != nil {
		return nil, err
	}
	msg, err := netmail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("read rendered message: %w", err)
	}
	var out [][2]string
	for _, k := range carriedHeaders {
		if v := msg.Header.Get(k); v != "" {
			out = append(out, [2]string{k, v})
		}
	}
	return out, nil
}

// addresses returns the message's From and To.
func (o *outgoing) addresses() (from, to *netmail.Address, err error) {
	if o.m == nil {
		return nil, nil, errors.New("no message headers")
	}
	f, t := o.m.GetFrom(), o.m.GetTo()
	if len(f) == 0 || len(t) == 0 {
		return nil, nil, errors.New("message has no From or To")
	}
	return f[0], t[0], nil
}

// messageID is the message's own Message-ID without brackets.
func (o *outgoing) messageID() string {
	if o.m == nil {
		return ""
	}
	return strings.Trim(o.m.GetMessageID(), "<>")
}

// newProviders builds each provider of cfg.ProviderList(), in order; an
// smtp provider gets a pool of its lanes (default size) connections.
func (s *Sender) newProviders(tlsConfig *tls.Config, size int, client func(lanes int) *http.Client) ([]*provider, error) {
	var out []*provider
	legacy := len(s.cfg.Providers) == 0
	for i, pc := range s.cfg.ProviderList() {
		lanes := pc.Lanes
		if lanes <= 0 {
			lanes = size
		}
		p := &provider{name: pc.DisplayName(), kind: pc.Kind, timeout: pc.timeoutOf(s.timeout),
			timeoutKey: "channels.email.timeout", rateText: pc.Rate}
		if pc.Timeout > 0 {
			p.timeoutKey = fmt.Sprintf("channels.email.providers[%d].timeout", i)
		}
		r, err := ParseRate(pc.Rate)
		if err != nil {
			return nil, fmt.Errorf("email: channels.email.providers[%d].rate: %w", i, err)
		}
		if r > 0 {
			p.limiter = rate.NewLimiter(rate.Limit(r), max(1, int(math.Ceil(r))))
		}
		if pc.Kind == KindSMTP {
			dial, err := s.dialer(pc.smtp(), tlsConfig)
			if err != nil {
				return nil, err
			}
			// Idle expiry is about real sockets, not Options.Clock.
			p.pool = newPool(lanes, dial, time.Now)
		} else {
			if legacy {
				return nil, fmt.Errorf("email: unknown provider kind %q", pc.Kind)
			}
			if p.api, err = newAPI(pc, client(lanes), s.clock); err != nil {
				return nil, fmt.Errorf("email: channels.email.providers[%d]: %w", i, err)
			}
			p.lanes = make(chan struct{}, lanes)
		}
		out = append(out, p)
	}
	return out, nil
}

// order returns the providers a message tries, in config order, leaving
// out those whose breaker is open unless that leaves none.
func (s *Sender) order(now time.Time) []*provider {
	if len(s.providers) == 1 {
		return s.providers
	}
	out := make([]*provider, 0, len(s.providers))
	for _, p := range s.providers {
		if p.breaker.allows(now) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return s.providers
	}
	return out
}

// final reports whether err ends the message's failover: the provider
// refused the message or its recipient (a permanent error, 5xx over SMTP),
// which another provider would refuse too.
func final(err error) bool {
	kind, _ := channels.Classify(err)
	return kind == channels.KindPermanent || kind == channels.KindGone
}

// failover sends o to the providers in order until one takes it. A
// temporary failure (an unreachable provider, a timeout, a 4xx SMTP reply,
// an API's 5xx, 429, or refusal of the credentials), or the provider's own
// rate reached, moves on to the next provider within the same attempt; a
// permanent refusal of the message or its address is final. Every provider
// tried is recorded with channels.SetProvider, so the delivery's provider is
// the one that accepted the message (whose message id is recorded with
// channels.SetProviderMessageID), or the last one tried. When every
// provider failed the error is temporary and names each failure; rate
// limited, when every provider was over its rate.
func (s *Sender) failover(ctx context.Context, o *outgoing) error {
	providers := s.order(s.clock())
	var failures []string
	var last error
	limited, wait := true, time.Duration(0)
	for i, p := range providers {
		id, err := s.sendVia(ctx, p, o)
		channels.SetProvider(ctx, p.name)
		if err == nil {
			channels.SetProviderMessageID(ctx, id)
			return nil
		}
		last = err
		if final(err) {
			return err
		}
		if kind, after := channels.Classify(err); kind == channels.KindRateLimited {
			if wait == 0 || after < wait {
				wait = after
			}
		} else {
			limited = false
		}
		failures = append(failures, p.name+": "+err.Error())
		if ctx.Err() != nil {
			break // the send itself was cancelled: no time left for another provider
		}
		if i < len(providers)-1 {
			s.log.Debug("email provider failed, trying the next", "channel", Name, "provider", p.name, "err", err)
		}
	}
	if len(failures) == 1 {
		return last
	}
	what := "every email provider failed"
	if len(s.cfg.Providers) == 0 {
		what = "every smtp server failed" // channels.email.smtp's list
	}
	err := fmt.Errorf("%s: %s: %w", what, strings.Join(failures, "; "), last)
	if limited {
		return channels.RateLimited(err, wait)
	}
	return channels.Temporary(err, 0)
}

// sendVia sends o through p within p's timeout, after p's rate limit, and
// returns the provider's message id. Its errors are classified. It keeps
// p's breaker (see account) before it gives its lane back, so a message
// that was waiting for the lane sees the breaker a failure opened.
func (s *Sender) sendVia(ctx context.Context, p *provider, o *outgoing) (id string, err error) {
	if p.limiter != nil {
		now := s.clock()
		res := p.limiter.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			res.CancelAt(now) // give the token back: the message goes elsewhere or comes back later
			return "", channels.RateLimited(fmt.Errorf("%s: its rate (%s) is reached", p.name, p.rateText), d)
		}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.timeout,
		fmt.Errorf("%s send timed out after %s (%s)", p.kind, p.timeout, p.timeoutKey))
	defer cancel()
	if p.pool != nil {
		if err := s.sendSMTP(ctx, p, o); err != nil {
			err = classify(err)
			s.account(p, err)
			return "", err
		}
		s.account(p, nil)
		return o.messageID(), nil
	}
	select {
	case p.lanes <- struct{}{}:
	case <-ctx.Done():
		err := channels.Temporary(fmt.Errorf("wait for a lane to %s: %w", p.name, context.Cause(ctx)), 0)
		s.account(p, err)
		return "", err
	}
	defer func() { <-p.lanes }()
	if len(s.providers) > 1 && !p.breaker.allows(s.clock()) {
		// Its breaker opened while this message waited for a lane: the
		// provider is not answering, so the message does not wait on it too.
		return "", channels.Temporary(fmt.Errorf("%s is skipped: it failed %d messages in a row", p.name, breakerThreshold), 0)
	}
	id, err = s.sendAPI(ctx, p, o)
	s.account(p, err)
	return id, err
}

// account keeps p's breaker: an answer (a success, or a refusal of the
// message) closes it; a rate limit says nothing; any other failure counts.
func (s *Sender) account(p *provider, err error) {
	if err == nil || final(err) {
		p.breaker.succeeded()
		return
	}
	if kind, _ := channels.Classify(err); kind == channels.KindRateLimited {
		return
	}
	if p.breaker.failed(s.clock()) && len(s.providers) > 1 {
		s.log.Warn("email provider keeps failing, skipping it for a while", "channel", Name,
			"provider", p.name, "cooldown", breakerCooldown, "err", err)
	}
}

// sendSMTP sends o on a connection to p's server.
func (s *Sender) sendSMTP(ctx context.Context, p *provider, o *outgoing) error {
	for attempt := 1; ; attempt++ {
		c, err := p.pool.acquire(ctx)
		if err != nil {
			return err
		}
		err = s.sendOn(ctx, c, o.from, o.rcpts, o.smtpBody)
		if err == nil {
			return nil
		}
		// A connection that sat in the pool may have been closed by the server.
		// If it failed before the server saw any of the message, the message is
		// safe to send again on a new connection, once.
		if attempt == 1 && c.reused && beforeData(err) && ctx.Err() == nil {
			// The server most likely dropped its other idle connections too
			// (a restart, an idle timeout): dial afresh rather than try them.
			s.log.Debug("smtp connection was dead, redialling", "channel", Name, "server", p.name, "err", err)
			p.pool.dropIdle()
			continue
		}
		return err
	}
}
