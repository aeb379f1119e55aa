// Package failover sends one message through an ordered list of providers
// (the email APIs and mail servers of channels.email.providers, the SMS APIs
// of channels.sms.providers), each with its own lanes, rate limit and
// circuit breaker, so that a slow or failing provider holds up only the
// messages that are trying it.
//
// A temporary failure (the provider unreachable, a timeout, a 5xx or 429,
// refused credentials) or the provider's own rate reached moves the message
// to the next provider within the same attempt; a permanent refusal of the
// message or its recipient (channels.KindPermanent, KindGone) is final: the
// next provider would refuse it too.
package failover

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/notifyd/notifyd/channels"
)

// A provider that failed BreakerThreshold messages in a row (it could not
// be reached, timed out or answered with a temporary error) is skipped for
// BreakerCooldown: the messages after it go straight to the next provider
// instead of each waiting for a dead primary first. When the cool-down is
// over the next message tries it again; one more failure skips it for
// another cool-down, a success closes the breaker. With every provider
// skipped they are all tried anyway.
const (
	BreakerThreshold = 3
	BreakerCooldown  = 30 * time.Second
)

// Spec is what a provider entry of the config says about its failover.
type Spec struct {
	// Name is what the ledger records as the delivery's provider.
	Name string
	// Kind is the entry's kind (ses, twilio, …), for error messages.
	Kind string
	// Timeout bounds one message to the provider, from waiting for a lane
	// to its answer; TimeoutKey is the config key that set it.
	Timeout    time.Duration
	TimeoutKey string
	// Rate is the most messages per second handed to the provider, as
	// written ("14/s", see ParseRate); empty is unlimited.
	Rate string
	// Lanes is the most messages in flight to the provider at once. Zero:
	// the provider keeps its own (an SMTP connection pool).
	Lanes int
}

// Provider is one entry of a List: Via is the channel's own sender for it.
type Provider[T any] struct {
	Name string
	Kind string
	Via  T

	timeout    time.Duration
	timeoutKey string
	rateText   string
	limiter    *rate.Limiter // nil: unlimited
	breaker    breaker
	lanes      chan struct{} // nil: Via keeps its own
}

// NewProvider returns the provider of spec, sending through via.
func NewProvider[T any](spec Spec, via T) (*Provider[T], error) {
	p := &Provider[T]{Name: spec.Name, Kind: spec.Kind, Via: via, timeout: spec.Timeout,
		timeoutKey: spec.TimeoutKey, rateText: spec.Rate}
	r, err := ParseRate(spec.Rate)
	if err != nil {
		return nil, err
	}
	if r > 0 {
		// A burst of one second's worth: a quiet replica may send that many
		// at once, and the average stays at the rate.
		p.limiter = rate.NewLimiter(rate.Limit(r), max(1, int(math.Ceil(r))))
	}
	if spec.Lanes > 0 {
		p.lanes = make(chan struct{}, spec.Lanes)
	}
	if p.timeout <= 0 {
		p.timeout = 30 * time.Second
	}
	return p, nil
}

// Send is how a List hands a message to one provider: it returns the
// provider's message id, or an error classified with channels' kinds.
type Send[T any] func(ctx context.Context, p *Provider[T]) (id string, err error)

// List is the ordered providers of a channel.
type List[T any] struct {
	Providers []*Provider[T]
	// Channel names the channel in log records ("email").
	Channel string
	// Exhausted starts the error when every provider failed ("every email
	// provider failed").
	Exhausted string
	// Clock is the time the breakers and rate limits read. Nil: time.Now.
	Clock func() time.Time
	// Log receives a record when a provider fails over or its breaker
	// opens. Nil discards.
	Log *slog.Logger
}

func (l *List[T]) now() time.Time {
	if l.Clock == nil {
		return time.Now()
	}
	return l.Clock()
}

func (l *List[T]) log() *slog.Logger {
	if l.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.Log
}

// order returns the providers a message tries, in config order, leaving
// out those whose breaker is open unless that leaves none.
func (l *List[T]) order(now time.Time) []*Provider[T] {
	if len(l.Providers) == 1 {
		return l.Providers
	}
	out := make([]*Provider[T], 0, len(l.Providers))
	for _, p := range l.Providers {
		if p.breaker.allows(now) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return l.Providers
	}
	return out
}

// Final reports whether err ends a message's failover: the provider refused
// the message or its recipient, which another provider would refuse too.
func Final(err error) bool {
	kind, _ := channels.Classify(err)
	return kind == channels.KindPermanent || kind == channels.KindGone
}

// Send sends a message to the providers in order until one takes it (see
// the package doc). Every provider tried is recorded with
// channels.SetProvider, so the delivery's provider is the one that accepted
// the message (whose message id is recorded with
// channels.SetProviderMessageID), or the last one tried. When every
// provider failed the error is temporary and names each failure; rate
// limited, when every provider was over its rate.
func (l *List[T]) Send(ctx context.Context, send Send[T]) error {
	providers := l.order(l.now())
	var failures []string
	var last error
	limited, wait := true, time.Duration(0)
	for i, p := range providers {
		id, err := l.via(ctx, p, send)
		channels.SetProvider(ctx, p.Name)
		if err == nil {
			channels.SetProviderMessageID(ctx, id)
			return nil
		}
		last = err
		if Final(err) {
			return err
		}
		if kind, after := channels.Classify(err); kind == channels.KindRateLimited {
			if wait == 0 || after < wait {
				wait = after
			}
		} else {
			limited = false
		}
		failures = append(failures, p.Name+": "+err.Error())
		if ctx.Err() != nil {
			break // the send itself was cancelled: no time left for another provider
		}
		if i < len(providers)-1 {
			l.log().Debug("provider failed, trying the next", "channel", l.Channel, "provider", p.Name, "err", err)
		}
	}
	if len(failures) == 1 {
		return last
	}
	err := fmt.Errorf("%s: %s: %w", l.Exhausted, strings.Join(failures, "; "), last)
	if limited {
		return channels.RateLimited(err, wait)
	}
	return channels.Temporary(err, 0)
}

// via sends through p within its timeout, after its rate limit and in one
// of its lanes. It keeps p's breaker (see account) before it gives its lane
// back, so a message that was waiting for the lane sees the breaker a
// failure opened.
func (l *List[T]) via(ctx context.Context, p *Provider[T], send Send[T]) (string, error) {
	if p.limiter != nil {
		now := l.now()
		res := p.limiter.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			res.CancelAt(now) // give the token back: the message goes elsewhere or comes back later
			return "", channels.RateLimited(fmt.Errorf("%s: its rate (%s) is reached", p.Name, p.rateText), d)
		}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.timeout,
		fmt.Errorf("%s send timed out after %s (%s)", p.Kind, p.timeout, p.timeoutKey))
	defer cancel()
	if p.lanes != nil {
		select {
		case p.lanes <- struct{}{}:
		case <-ctx.Done():
			err := channels.Temporary(fmt.Errorf("wait for a lane to %s: %w", p.Name, context.Cause(ctx)), 0)
			l.account(p, err)
			return "", err
		}
		defer func() { <-p.lanes }()
		if len(l.Providers) > 1 && !p.breaker.allows(l.now()) {
			// Its breaker opened while this message waited for a lane: the
			// provider is not answering, so the message does not wait on it too.
			return "", channels.Temporary(fmt.Errorf("%s is skipped: it failed %d messages in a row", p.Name, BreakerThreshold), 0)
		}
	}
	id, err := send(ctx, p)
	l.account(p, err)
	return id, err
}

// account keeps p's breaker: an answer (a success, or a refusal of the
// message) closes it; a rate limit says nothing; any other failure counts.
func (l *List[T]) account(p *Provider[T], err error) {
	if err == nil || Final(err) {
		p.breaker.succeeded()
		return
	}
	if kind, _ := channels.Classify(err); kind == channels.KindRateLimited {
		return
	}
	if p.breaker.failed(l.now()) && len(l.Providers) > 1 {
		l.log().Warn("provider keeps failing, skipping it for a while", "channel", l.Channel,
			"provider", p.Name, "cooldown", BreakerCooldown, "err", err)
	}
}

// breaker counts a provider's consecutive failed messages.
type breaker struct {
	mu        sync.Mutex
	failures  int
	openUntil time.Time
}

// allows reports whether a message may try the provider at now.
func (b *breaker) allows(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !now.Before(b.openUntil)
}

func (b *breaker) succeeded() {
	b.mu.Lock()
	b.failures, b.openUntil = 0, time.Time{}
	b.mu.Unlock()
}

// failed counts a failure and reports whether it opened the breaker.
func (b *breaker) failed(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	if b.failures >= BreakerThreshold && !now.Before(b.openUntil) {
		b.openUntil = now.Add(BreakerCooldown)
		return true
	}
	return false
}

var rateRE = regexp.MustCompile(`^\s*([0-9]+(?:\.[0-9]+)?)\s*(?:/\s*(s|sec|second|m|min|minute|h|hour))?\s*$`)

// ParseRate reads a provider's rate ("14/s", "600/m", "50000/h", "14") as
// messages per second; "" and "0" are 0, unlimited.
func ParseRate(s string) (float64, error) {
	if strings.TrimSpace(s) == "" {
		return 0, nil
	}
	m := rateRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("want a rate such as 14/s, 600/m or 50000/h, got %q", s)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil || math.IsInf(n, 0) {
		return 0, fmt.Errorf("want a rate such as 14/s, got %q", s)
	}
	switch m[2] {
	case "m", "min", "minute":
		n /= 60
	case "h", "hour":
		n /= 3600
	}
	return n, nil
}
