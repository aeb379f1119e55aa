package email

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	netmail "net/mail"
	"strings"
	"time"

	"github.com/wneessen/go-mail"

	"github.com/notifyd/notifyd/channels/internal/failover"
)

// provider is one entry of the provider list (Config.ProviderList): its
// failover.Provider keeps the lanes, rate limit and circuit breaker.
type provider = failover.Provider[*route]

// route is how a provider sends: an smtp entry's pool of connections (which
// are its lanes), or an email API.
type route struct {
	pool *pool // kind smtp
	api  api   // other kinds
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
	b.Grow(2*(len(o.text)+len(o.html)) + 2048) // the bodies encoded, and the headers
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

// structured returns what a JSON API is given besides the subject and the
// bodies: From, To and the carried headers by name.
func (o *outgoing) structured() (from, to *netmail.Address, headers map[string]string, err error) {
	if from, to, err = o.addresses(); err != nil {
		return nil, nil, nil, err
	}
	hs, err := o.headers()
	if err != nil {
		return nil, nil, nil, err
	}
	headers = make(map[string]string, len(hs))
	for _, h := range hs {
		headers[h[0]] = h[1]
	}
	return from, to, headers, nil
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
		spec := failover.Spec{Name: pc.DisplayName(), Kind: pc.Kind, Timeout: pc.timeoutOf(s.timeout),
			TimeoutKey: "channels.email.timeout", Rate: pc.Rate, Lanes: lanes}
		if pc.Timeout > 0 {
			spec.TimeoutKey = fmt.Sprintf("channels.email.providers[%d].timeout", i)
		}
		r := &route{}
		if pc.Kind == KindSMTP {
			dial, err := s.dialer(pc.smtp(), tlsConfig)
			if err != nil {
				return nil, err
			}
			// Idle expiry is about real sockets, not Options.Clock.
			r.pool = newPool(lanes, dial, time.Now)
			spec.Lanes = 0 // the pool's connections are the lanes
		} else {
			if legacy {
				return nil, fmt.Errorf("email: unknown provider kind %q", pc.Kind)
			}
			var err error
			if r.api, err = newAPI(pc, client(lanes), s.clock); err != nil {
				return nil, fmt.Errorf("email: channels.email.providers[%d]: %w", i, err)
			}
		}
		p, err := failover.NewProvider(spec, r)
		if err != nil {
			return nil, fmt.Errorf("email: channels.email.providers[%d].rate: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// failover sends o to the providers in order until one takes it (see
// package failover): a temporary failure (an unreachable provider, a
// timeout, a 4xx SMTP reply, an API's 5xx, 429, or refusal of the
// credentials), or the provider's own rate reached, moves on to the next
// provider within the same attempt; a permanent refusal of the message or
// its address (a 5xx SMTP reply) is final.
func (s *Sender) failover(ctx context.Context, o *outgoing) error {
	return s.providers.Send(ctx, func(ctx context.Context, p *provider) (string, error) {
		if p.Via.pool != nil {
			if err := s.sendSMTP(ctx, p, o); err != nil {
				return "", classify(err)
			}
			return o.messageID(), nil
		}
		return s.sendAPI(ctx, p, o)
	})
}

// sendSMTP sends o on a connection to p's server.
func (s *Sender) sendSMTP(ctx context.Context, p *provider, o *outgoing) error {
	for attempt := 1; ; attempt++ {
		c, err := p.Via.pool.acquire(ctx)
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
			s.log.Debug("smtp connection was dead, redialling", "channel", Name, "server", p.Name, "err", err)
			p.Via.pool.dropIdle()
			continue
		}
		return err
	}
}
