package devicepush

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
)

// Channel is what a mobile push channel's Sender is apart from its push
// service's request and authorisation: the notifiers' templates (rendered,
// previewed, cut to the service's payload limit), the HTTP client, logger
// and clock, and the fan-out to the recipient's devices. A Sender keeps one
// and adds the request. It is safe for concurrent use once built.
type Channel struct {
	// Fanout sends a delivery to the recipient's devices of the platform.
	Fanout Fanout
	// Client talks to the push service.
	Client *http.Client
	// Clock dates tokens and HTTP-date Retry-After; never nil.
	Clock func() time.Time

	notifiers map[string]Templates
}

// Options are a Channel's collaborators, as the channel packages' own
// Options name them. The zero value is usable.
type Options struct {
	// Logger receives a debug record per push. Nil discards.
	Logger *slog.Logger
	// Clock is the time. Nil is time.Now.
	Clock func() time.Time
	// Client replaces the client NewChannel builds with NewClient.
	Client *http.Client
}

// NewChannel returns the Channel of the channel name, sending to the
// devices of platform in store (nil: every send fails as temporary, a
// channel built only to preview). Without opts.Client it builds one with
// NewClient for timeout (zero or less: fallback) and caFile; an unreadable
// caFile is an error naming channels.<name>.ca_file.
func NewChannel(name, platform string, store channels.Devices, opts Options, timeout, fallback time.Duration, caFile string) (*Channel, error) {
	c := &Channel{Client: opts.Client, Clock: opts.Clock, notifiers: map[string]Templates{}}
	if c.Client == nil {
		if timeout <= 0 {
			timeout = fallback
		}
		var err error
		if c.Client, err = NewClient(timeout, caFile); err != nil {
			return nil, fmt.Errorf("%s: channels.%s.ca_file: %w", name, name, err)
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	c.Fanout = Fanout{Channel: name, Platform: platform, Store: store, Logger: logger}
	return c, nil
}

// AddNotifier gives the channel a notifier's templates: parsed as the
// registry's open checked them, or, when parsed has no title yet (a program
// that builds the channel without the registry), parsed now from title,
// body and url and stored in parsed.
func (c *Channel) AddNotifier(notifier string, parsed *Templates, title, body, url string) error {
	if parsed.Title == nil {
		var err error
		name := c.Fanout.Channel
		if *parsed, err = ParseTemplates("notifiers."+notifier+".channels."+name+".", title, body, url); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	c.notifiers[notifier] = *parsed
	return nil
}

// AddNotifiers is AddNotifier for each notifier of a channel package's
// sections (nil ones skipped); section returns a section's parsed templates
// and their text.
func AddNotifiers[T any](c *Channel, notifiers map[string]*T, section func(*T) (parsed *Templates, title, body, url string)) error {
	for name, t := range notifiers {
		if t == nil {
			continue
		}
		parsed, title, body, url := section(t)
		if err := c.AddNotifier(name, parsed, title, body, url); err != nil {
			return err
		}
	}
	return nil
}

// Addressable reports whether the notifier has templates for the channel.
// Whether the recipient has a device of the platform the fan-out knows
// (channels.Plugin.Device).
func (c *Channel) Addressable(notifier string) error {
	if _, ok := c.notifiers[notifier]; !ok {
		return fmt.Errorf("notifier %q has no %s templates", notifier, c.Fanout.Channel)
	}
	return nil
}

func (c *Channel) render(notifier string, params map[string]any) (Parts, error) {
	t, ok := c.notifiers[notifier]
	if !ok {
		return Parts{}, fmt.Errorf("notifier %q has no %s templates", notifier, c.Fanout.Channel)
	}
	return t.Render(c.Fanout.Channel, params)
}

// Preview renders the notifier's title, body and url without sending.
func (c *Channel) Preview(notifier string, params map[string]any) ([]channels.Part, error) {
	p, err := c.render(notifier, params)
	if err != nil {
		return nil, err
	}
	return p.Preview(), nil
}

// Parts renders msg's parts and cuts its body (Fit) until encode makes at
// most limit bytes of them. Every error is permanent: another try renders
// the same.
func (c *Channel) Parts(msg channels.Message, limit int, encode func(Parts) ([]byte, error)) (Parts, error) {
	name := c.Fanout.Channel
	if msg.Recipient == nil {
		return Parts{}, channels.Permanent(fmt.Errorf("%s: message has no recipient", name))
	}
	parts, err := c.render(msg.Notifier, msg.Params)
	if err == nil {
		parts, err = Fit(parts, limit, encode)
	}
	if err != nil {
		return Parts{}, channels.Permanent(fmt.Errorf("%s %s to recipient %s: %w", name, msg.Notifier, msg.Recipient.ID, err))
	}
	return parts, nil
}

// Answer is the push service's answer to one request.
type Answer struct {
	Code int
	// Body is the first 64 KiB of the answer's body.
	Body []byte
	// RetryAfter is the answer's Retry-After (zero when none).
	RetryAfter time.Duration
}

// Do sends req and reads the answer. A request that got none (a timeout, a
// refused connection) is a temporary error naming the channel and dest
// ("POST https://api.push.apple.com"), its cause kept in the chain: that
// is what tells the send job the service does not answer.
func (c *Channel) Do(req *http.Request, dest string) (Answer, error) {
	resp, err := c.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Answer{}, channels.Temporary(fmt.Errorf("%s: %s: %w", c.Fanout.Channel, dest, err), 0)
	}
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return Answer{Code: resp.StatusCode, Body: text,
		RetryAfter: safehttp.ParseRetryAfter(resp.Header.Get("Retry-After"), c.Clock())}, nil
}

// Send pushes msg to each of the recipient's devices with push (see
// Fanout.Send); provider names the push service for the ledger.
func (c *Channel) Send(ctx context.Context, msg channels.Message, provider string,
	push func(ctx context.Context, d channels.Device) error) error {
	return c.Fanout.Send(ctx, msg, provider, push)
}

// CheckConnection checks the keys of a push channel's section that say how
// to reach the service: base_url, ca_file (when set) and timeout.
func CheckConnection(p *config.Problems, sec *config.Section, baseURL, caFile string, timeout config.Duration) {
	p.HTTPURL(sec, "base_url", baseURL)
	if caFile != "" {
		if _, err := LoadCA(caFile); err != nil {
			p.Add(sec, "ca_file", "%v", err)
		}
	}
	p.Positive(sec, "timeout", timeout)
}

// WarnWithoutStore logs that the channel's sends will fail when it is
// opened to run without a device store.
func WarnWithoutStore(s *channels.Setup, name string) {
	if s.Devices == nil && !s.Checking {
		s.Logger.Warn(name + " is opened without a device store (channels.WithDevices): its sends will fail")
	}
}
