// Package webpush is the web push channel: it sends a notification to every
// browser push subscription of the recipient, as the Web Push protocol (RFC
// 8030) says, with the payload encrypted for the browser (RFC 8291,
// aes128gcm) and the request signed by the application server (VAPID, RFC
// 8292).
//
// # Request
//
//	POST <subscription endpoint>
//	TTL: <channels.web_push.ttl in seconds>
//	Urgency: normal
//	Content-Encoding: aes128gcm
//	Content-Type: application/octet-stream
//	Authorization: vapid t=<JWT>, k=<vapid_public_key>
//
// The JWT is ES256 over {"aud": "<endpoint scheme://host>", "exp": <now +
// 12h>, "sub": "<channels.web_push.subject>"}; one is made per push service
// and reused until an hour before it expires. The body decrypts, with the
// subscription's private key and auth secret, to the JSON
//
//	{"id": "<delivery id>", "notifier": "comment.created", "key": "comment-1",
//	 "title": "...", "body": "...", "url": "https://..."}
//
// rendered from the notifier's web_push templates (title, body, url; an
// empty one is left out). A push message carries at most MaxPayload bytes:
// a longer body is cut short (with "…") to fit.
//
// # Outcomes
//
// One delivery is one message to each subscription of the recipient, all
// at once. The delivery is sent when at least one subscription took
// it; the others are not tried again (retrying would repeat the message on
// the devices that have it). When none did: a 429 anywhere snoozes the
// delivery (Retry-After honoured); a 5xx, 408, timeout or connection error
// retries it; otherwise it is refused. A 404 or 410 removes that
// subscription (the browser unsubscribed). A recipient without
// subscriptions gets `unavailable` deliveries at fan-out time until they
// subscribe again (one whose last subscription went between the fan-out
// and the send gets a refused one). Every
// success records the subscription's last success; every failure counts
// against it. Endpoints on loopback, private and other reserved addresses
// are refused before connecting unless channels.web_push.allow_private is
// true.
//
// # Targets
//
// Each push service is a destination of its own (channels.PreparedTargeter):
// a delivery's target is the push service of the recipient's subscriptions
// (the scheme and host of the endpoints; several, joined, for a recipient
// subscribed on more than one), so a push service that does not answer holds
// up, parks and trips the breaker of only the deliveries that need it.
package webpush

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/templates"
)

var (
	_ channels.Channel          = (*Sender)(nil)
	_ channels.Previewer        = (*Sender)(nil)
	_ channels.PushService      = (*Sender)(nil)
	_ channels.PreparedTargeter = (*Sender)(nil)
)

// jwtLifetime is a VAPID token's exp after its making (RFC 8292 allows at
// most 24 hours); a token is reused until jwtRenew before it.
const (
	jwtLifetime = 12 * time.Hour
	jwtRenew    = time.Hour
)

// Options are the Sender's collaborators. The zero value is usable.
type Options struct {
	// Logger receives a debug record per push. Nil discards.
	Logger *slog.Logger
	// Clock dates the VAPID tokens and HTTP-date Retry-After. Nil is time.Now.
	Clock func() time.Time
	// Client replaces the SSRF-guarded client (safehttp with the timeout and
	// allow_private of the config).
	Client *http.Client
	// Lookup resolves an endpoint's host when a subscription is registered
	// (CheckEndpoint). Nil is the system resolver.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Sender delivers web push notifications. It is safe for concurrent use.
type Sender struct {
	cfg       *Config
	key       *ecdsa.PrivateKey
	notifiers map[string]*Templates
	store     channels.PushSubscriptions
	client    *http.Client
	logger    *slog.Logger
	clock     func() time.Time
	lookup    func(ctx context.Context, host string) ([]netip.Addr, error)
	ttl       string

	mu   sync.Mutex
	jwts map[string]vapidToken // by audience
}

type vapidToken struct {
	header string
	until  time.Time
}

// New returns a Sender for channels.web_push cfg, sending the notifiers'
// web_push templates (by notifier name) to the subscriptions in store. A nil
// store only previews.
func New(cfg *Config, notifiers map[string]*Templates, store channels.PushSubscriptions, opts Options) (*Sender, error) {
	if cfg == nil {
		return nil, errors.New("webpush: channels.web_push is not configured")
	}
	key, err := parseVAPIDKeys(cfg.VAPIDPublicKey, cfg.VAPIDPrivateKey)
	if err != nil {
		return nil, fmt.Errorf("webpush: channels.web_push.%w", err)
	}
	if msg := checkSubject(cfg.Subject); msg != "" {
		return nil, fmt.Errorf("webpush: channels.web_push.subject: %s", msg)
	}
	s := &Sender{cfg: cfg, key: key, notifiers: map[string]*Templates{}, store: store, client: opts.Client,
		logger: opts.Logger, clock: opts.Clock, jwts: map[string]vapidToken{},
		ttl: strconv.Itoa(int(cfg.TTL.D() / time.Second))}
	if s.lookup = opts.Lookup; s.lookup == nil {
		s.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if s.client == nil {
		s.client = safehttp.New(cfg.Timeout.D(), cfg.AllowPrivate)
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	for name, t := range notifiers {
		if t == nil {
			continue
		}
		if t.title == nil {
			p := config.Default().NewProblems()
			prefix := "notifiers." + name + ".channels.web_push."
			t.title, t.body, t.url = p.Text(nil, prefix+"title", t.Title), p.Text(nil, prefix+"body", t.Body),
				p.Text(nil, prefix+"url", t.URL)
			if err := p.Err(); err != nil {
				return nil, fmt.Errorf("webpush: %w", err)
			}
			if t.title == nil {
				return nil, fmt.Errorf("webpush: %stitle is empty", prefix)
			}
		}
		s.notifiers[name] = t
	}
	return s, nil
}

// Name returns "web_push".
func (s *Sender) Name() string { return Name }

// VAPIDPublicKey returns channels.web_push.vapid_public_key, for the
// browser's applicationServerKey.
func (s *Sender) VAPIDPublicKey() string { return s.cfg.VAPIDPublicKey }

// CheckKeys is the package's CheckKeys, for the HTTP API
// (channels.PushService).
func (s *Sender) CheckKeys(p256dh, auth string) (field string, err error) {
	return CheckKeys(p256dh, auth)
}

// endpointLookupTimeout bounds the resolution of an endpoint's host at
// registration.
const endpointLookupTimeout = 2 * time.Second

// CheckEndpoint returns why endpoint cannot be a push endpoint: not an
// absolute https URL (http too with allow_private), credentials in it, a
// host that is not a plain DNS name (an IP literal in any spelling, "127.1",
// "2130706433", "0x7f.0.0.1", a trailing dot, localhost) or a port other than
// 443 (both allowed with allow_private, which a development push service on
// loopback needs), or, when channels.web_push.allowed_hosts is set, a host it
// does not list. Then the host is resolved (for at most 2 s): a name that
// resolves to a special-purpose address is refused too. A name that does not
// resolve now is accepted; whatever it resolves to is checked again when a
// message is sent, by the client's connect-time guard.
func (s *Sender) CheckEndpoint(endpoint string) error {
	if err := s.checkEndpoint(endpoint); err != nil {
		return err
	}
	if s.cfg.AllowPrivate {
		return nil
	}
	u, _ := url.Parse(endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), endpointLookupTimeout)
	defer cancel()
	addrs, err := s.lookup(ctx, u.Hostname())
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		var ae *safehttp.AddressError
		if err := safehttp.Forbidden(a.Unmap()); errors.As(err, &ae) {
			return fmt.Errorf("push endpoint: host %q resolves to %s, %s: %w", u.Hostname(), ae.Addr, ae.Reason,
				safehttp.ErrForbiddenAddress)
		}
	}
	return nil
}

// checkEndpoint is CheckEndpoint without the resolution: what a send checks
// again before it connects (the connection checks the addresses).
func (s *Sender) checkEndpoint(endpoint string) error {
	if err := safehttp.CheckURL(endpoint); err != nil {
		return err
	}
	u, _ := url.Parse(endpoint)
	if u.Scheme != "https" && !(s.cfg.AllowPrivate && u.Scheme == "http") {
		return errors.New("a push endpoint must be an https URL")
	}
	if u.User != nil {
		return errors.New("a push endpoint must not carry credentials")
	}
	host := u.Hostname()
	if len(s.cfg.AllowedHosts) > 0 && !hostAllowed(s.cfg.AllowedHosts, host) {
		return fmt.Errorf("the endpoint's host %q is not in channels.web_push.allowed_hosts", host)
	}
	if s.cfg.AllowPrivate {
		return nil
	}
	if err := safehttp.CheckHostName(host); err != nil {
		return fmt.Errorf("push endpoint: %w", err)
	}
	if p := u.Port(); p != "" && p != "443" {
		return fmt.Errorf("the endpoint's port %s is not 443", p)
	}
	return nil
}

// hostAllowed reports whether host matches one of allowed: a name equal to
// it (case-insensitively) or "*.suffix", which matches any name under suffix
// (not suffix itself).
func hostAllowed(allowed []string, host string) bool {
	host = strings.ToLower(host)
	for _, a := range allowed {
		a = strings.ToLower(a)
		if rest, ok := strings.CutPrefix(a, "*."); ok {
			if strings.HasSuffix(host, "."+rest) {
				return true
			}
		} else if host == a {
			return true
		}
	}
	return false
}

// Addressable reports whether the notifier has web_push templates. Whether
// the recipient has subscriptions is known at send time.
func (s *Sender) Addressable(notifier string, _ channels.Recipient) error {
	if _, ok := s.notifiers[notifier]; !ok {
		return fmt.Errorf("notifier %q has no web_push templates", notifier)
	}
	return nil
}

// payload is what the browser's service worker decrypts.
type payload struct {
	ID       string `json:"id"`
	Notifier string `json:"notifier"`
	Key      string `json:"key"`
	Title    string `json:"title"`
	Body     string `json:"body,omitempty"`
	URL      string `json:"url,omitempty"`
}

// render renders the notifier's templates into the payload.
func (s *Sender) render(msg channels.Message) (payload, error) {
	t, ok := s.notifiers[msg.Notifier]
	if !ok {
		return payload{}, fmt.Errorf("notifier %q has no web_push templates", msg.Notifier)
	}
	p := payload{ID: msg.DeliveryID, Notifier: msg.Notifier, Key: msg.Key}
	var err error
	if p.Title, err = templates.RenderText(t.title, msg.Params); err != nil {
		return p, fmt.Errorf("render web_push title: %w", err)
	}
	if p.Body, err = templates.RenderText(t.body, msg.Params); err != nil {
		return p, fmt.Errorf("render web_push body: %w", err)
	}
	if p.URL, err = templates.RenderText(t.url, msg.Params); err != nil {
		return p, fmt.Errorf("render web_push url: %w", err)
	}
	p.Title, p.Body, p.URL = strings.TrimSpace(p.Title), strings.TrimSpace(p.Body), strings.TrimSpace(p.URL)
	if p.URL != "" {
		if u, err := url.Parse(p.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http" && !strings.HasPrefix(p.URL, "/")) {
			return p, fmt.Errorf("web_push url %q is not an http(s) URL or an absolute path", p.URL)
		}
	}
	return p, nil
}

// encode marshals p, cutting the body short until it fits a push message.
func encode(p payload) ([]byte, error) {
	for {
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		if len(b) <= MaxPayload {
			return b, nil
		}
		if p.Body == "" {
			return nil, fmt.Errorf("the push payload is %d bytes without a body, more than a push message carries (%d)", len(b), MaxPayload)
		}
		// Drop what is over, and a little more for the ellipsis and JSON escapes.
		over := len(b) - MaxPayload + len("…")
		body := strings.TrimSuffix(p.Body, "…")
		cut := max(0, len(body)-max(over, 8))
		for cut > 0 && !utf8.RuneStart(body[cut]) {
			cut--
		}
		p.Body = body[:cut] + "…"
		if cut == 0 {
			p.Body = ""
		}
	}
}

// Preview renders the notifier's payload parts without sending.
func (s *Sender) Preview(notifier string, params map[string]any, _ channels.Recipient) ([]channels.Part, error) {
	p, err := s.render(channels.Message{Notifier: notifier, Params: params})
	if err != nil {
		return nil, err
	}
	return []channels.Part{{Name: "title", Value: p.Title}, {Name: "body", Value: p.Body}, {Name: "url", Value: p.URL}}, nil
}

// Send pushes msg to each of the recipient's subscriptions. See the package
// doc for the outcomes.
func (s *Sender) Send(ctx context.Context, msg channels.Message) error {
	if msg.Recipient == nil {
		return channels.Permanent(errors.New("web push: message has no recipient"))
	}
	if s.store == nil {
		return channels.Temporary(errors.New("web push: no push subscription store"), 0)
	}
	rid := msg.Recipient.ID
	p, err := s.render(msg)
	if err != nil {
		return channels.Permanent(fmt.Errorf("web push %s to recipient %s: %w", msg.Notifier, rid, err))
	}
	body, err := encode(p)
	if err != nil {
		return channels.Permanent(fmt.Errorf("web push %s to recipient %s: %w", msg.Notifier, rid, err))
	}
	subs, err := s.subscriptions(ctx, rid)
	if err != nil {
		return channels.Temporary(fmt.Errorf("web push to recipient %s: read subscriptions: %w", rid, err), 0)
	}
	// The wall between tenants: a subscription registered under a tenant
	// gets that tenant's notifications only.
	subs = channels.PushSubscriptionsFor(subs, msg.TenantID())
	if len(subs) == 0 {
		return channels.Permanent(fmt.Errorf("web push to recipient %s: recipient has no push subscriptions%s", rid, forTenant(msg)))
	}
	// One request per subscription, at once: a recipient's devices may sit
	// behind different push services, and the slowest bounds the delivery.
	results := make([]error, len(subs))
	var wg sync.WaitGroup
	for i, sub := range subs[1:] {
		wg.Go(func() { results[i+1] = s.push(ctx, sub, body) })
	}
	results[0] = s.push(ctx, subs[0], body)
	wg.Wait()
	var ok, failed, gone []string
	var errs []error
	for i, sub := range subs {
		err := results[i]
		kind, _ := channels.Classify(err)
		switch {
		case err == nil:
			ok = append(ok, sub.ID)
		case kind == channels.KindGone:
			gone = append(gone, sub.ID)
			errs = append(errs, err)
		default:
			failed = append(failed, sub.ID)
			errs = append(errs, err)
		}
		s.logger.DebugContext(ctx, "web push", "channel", Name, "delivery_id", msg.DeliveryID, "recipient", rid,
			"subscription", sub.ID, "push_service", channels.URLHost(sub.Endpoint), "error", err)
	}
	channels.SetProvider(ctx, pushServices(subs))
	// The bookkeeping is best effort: the messages are out, and a failure
	// here must not send them again.
	bctx := context.WithoutCancel(ctx)
	for _, op := range []struct {
		ids []string
		f   func(context.Context, []string) error
	}{{ok, s.store.Succeeded}, {failed, s.store.Failed}, {gone, s.store.Remove}} {
		if len(op.ids) == 0 {
			continue
		}
		if err := op.f(bctx, op.ids); err != nil {
			s.logger.WarnContext(ctx, "web push: record subscription outcome", "channel", Name, "recipient", rid, "error", err)
		}
	}
	if len(ok) > 0 {
		return nil
	}
	return outcome(rid, errs)
}

// outcome is the delivery's error when no subscription took the message: a
// rate limit first, then anything temporary, else refused.
func outcome(rid string, errs []error) error {
	var rate, temp error
	var after time.Duration
	for _, err := range errs {
		switch k, d := channels.Classify(err); k {
		case channels.KindRateLimited:
			if rate == nil || d > after {
				rate, after = err, d
			}
		case channels.KindTemporary:
			if temp == nil {
				temp = err
			}
		}
	}
	joined := errors.Join(errs...)
	msg := strings.ReplaceAll(joined.Error(), "\n", "; ")
	wrapped := fmt.Errorf("web push to recipient %s: %s", rid, msg)
	switch {
	case rate != nil:
		return channels.RateLimited(wrapped, after)
	case temp != nil:
		_, d := channels.Classify(temp)
		return channels.Temporary(wrapped, d)
	default:
		return channels.Permanent(wrapped)
	}
}

// TargetPrepared names the push services of the recipient's subscriptions
// as Prepare read them for the batch: "https://fcm.googleapis.com", or
// several, sorted, joined by " + ". "" (the channel as one target) when the
// batch was not prepared or the recipient has no subscription; such a send
// reads or refuses for itself.
func (s *Sender) TargetPrepared(v any, msg channels.Message) string {
	p, ok := v.(prepared)
	if !ok || msg.Recipient == nil {
		return ""
	}
	subs := channels.PushSubscriptionsFor(p[msg.Recipient.ID], msg.TenantID())
	hosts := make([]string, 0, len(subs))
	for _, sub := range subs {
		hosts = append(hosts, channels.URLHost(sub.Endpoint))
	}
	slices.Sort(hosts)
	return strings.Join(slices.Compact(hosts), " + ")
}

// forTenant is " of tenant <id>" for a message of a tenant, for errors.
func forTenant(msg channels.Message) string {
	if t := msg.TenantID(); t != "" {
		return fmt.Sprintf(" of tenant %q", t)
	}
	return ""
}

// pushServices names the push services of subs for the ledger's provider
// ("fcm.googleapis.com", several joined by ", ").
func pushServices(subs []channels.PushSubscription) string {
	var hosts []string
	seen := map[string]bool{}
	for _, sub := range subs {
		h := sub.Endpoint
		if u, err := url.Parse(sub.Endpoint); err == nil {
			h = u.Host
		}
		if !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	return strings.Join(hosts, ", ")
}

// push sends body to one subscription and classifies the answer.
func (s *Sender) push(ctx context.Context, sub channels.PushSubscription, body []byte) error {
	dest := "push to " + channels.URLHost(sub.Endpoint)
	enc, err := encryptFor(body, sub.P256dh, sub.Auth)
	if err != nil {
		return channels.Permanent(fmt.Errorf("%s: %w", dest, err))
	}
	u, err := url.Parse(sub.Endpoint)
	if err != nil || u.Host == "" {
		return channels.Gone(fmt.Errorf("%s: invalid endpoint", dest))
	}
	// A subscription stored before the registration checks it fails now
	// (an IP literal, a port other than 443, a host allowed_hosts leaves
	// out, or allow_private turned off since) is refused unsent. It is not
	// removed: a config change may make it valid again.
	if err := s.checkEndpoint(sub.Endpoint); err != nil {
		return channels.Permanent(fmt.Errorf("%s: endpoint refused: %w", dest, err))
	}
	auth, err := s.vapid(u.Scheme + "://" + u.Host)
	if err != nil {
		return channels.Temporary(fmt.Errorf("%s: sign VAPID token: %w", dest, err), 0)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sub.Endpoint, bytes.NewReader(enc))
	if err != nil {
		return channels.Gone(fmt.Errorf("%s: invalid endpoint", dest))
	}
	req.Header.Set("TTL", s.ttl)
	req.Header.Set("Urgency", "normal")
	req.Header.Set("Content-Encoding", "aes128gcm")
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", auth)
	req.Header.Set("User-Agent", "notifyd")
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the endpoint URL is a capability: do not repeat it
		}
		if errors.Is(err, safehttp.ErrForbiddenAddress) {
			return channels.Permanent(fmt.Errorf("%s: %w", dest, err))
		}
		return channels.Temporary(fmt.Errorf("%s: %w", dest, err), 0)
	}
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	err = fmt.Errorf("%s: HTTP %d %s: %s", dest, code, http.StatusText(code), strings.Join(strings.Fields(strings.ToValidUTF8(string(text), "")), " "))
	retryAfter := safehttp.ParseRetryAfter(resp.Header.Get("Retry-After"), s.clock())
	switch {
	case code == http.StatusNotFound || code == http.StatusGone:
		return channels.Gone(err)
	case code == http.StatusTooManyRequests:
		return channels.RateLimited(err, retryAfter)
	case code == http.StatusRequestTimeout || code >= 500:
		return channels.Temporary(err, retryAfter)
	default:
		// 400, 401/403 (the subscription belongs to another VAPID key), 413.
		return channels.Permanent(err)
	}
}

// Prepare reads the subscriptions of a batch's recipients in one statement
// (channels.Preparer); Send finds each recipient's there.
func (s *Sender) Prepare(ctx context.Context, recipients []string) (any, error) {
	if s.store == nil {
		return nil, errors.New("web push: no push subscription store")
	}
	subs, err := s.store.List(ctx, recipients)
	if err != nil {
		return nil, err
	}
	return prepared(subs), nil
}

// prepared is what Prepare hands each Send: the batch's subscriptions by
// recipient, absent for a recipient with none.
type prepared map[string][]channels.PushSubscription

// subscriptions returns rid's subscriptions: from the batch's Prepare when
// ctx carries it, else read now.
func (s *Sender) subscriptions(ctx context.Context, rid string) ([]channels.PushSubscription, error) {
	if p, ok := channels.Prepared(ctx).(prepared); ok {
		return p[rid], nil
	}
	m, err := s.store.List(ctx, []string{rid})
	return m[rid], err
}

var _ channels.Preparer = (*Sender)(nil)

// vapid returns the Authorization header for a push service origin,
// reusing a token until an hour before its exp.
func (s *Sender) vapid(aud string) (string, error) {
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.jwts[aud]; ok && now.Before(t.until) {
		return t.header, nil
	}
	exp := now.Add(jwtLifetime)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"aud": aud, "exp": exp.Unix(), "sub": s.cfg.Subject,
	}).SignedString(s.key)
	if err != nil {
		return "", err
	}
	h := "vapid t=" + tok + ", k=" + s.cfg.VAPIDPublicKey
	if len(s.jwts) > 1000 {
		clear(s.jwts) // a bound, should endpoints name very many push services
	}
	s.jwts[aud] = vapidToken{header: h, until: exp.Add(-jwtRenew)}
	return h, nil
}
