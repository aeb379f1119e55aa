// Package email is the email channel: it renders a notifier's email templates
// for one recipient and hands the message to an SMTP server through go-mail,
// over a small pool of persistent connections.
//
// # Templates
//
// The subject and text templates are text/template, the html template is
// html/template, so a param such as "<script>" arrives escaped in the html part
// and verbatim in the text part. The dot is the notification's params
// ({{.post_title}}); nil params are an empty map and JSON numbers read as
// float64, exactly as in `notifyd check` and the inbox. The recipient is not
// mixed into the params (they belong to the application and may use any key):
// the template function recipient returns it as a channels.Recipient,
//
//	Hello {{recipient.Name}}, {{.author_name}} commented on {{.post_title}}.
//
// (config.Load must declare the function for a YAML config to use it; see
// RecipientFunc.)
// The recipient's locale picks the templates: the variant for the exact locale
// ("pt-BR", case-insensitive, "_" read as "-"), else the variant for its
// language ("pt"), else the notifier's default templates; a variant is used as
// a whole (Templates.For).
//
// Digest templates (SendDigest) have a templates.DigestData as the dot: .Items
// (oldest first, at most digest.max_items), .Count, .More (how many were left
// out, for "and N more") and .Recipient (a channels.Recipient); the recipient
// function works there too.
//
// # Unsubscribe links
//
// With channels.email.unsubscribe_url set, every email of a notifier that is
// not required, and every digest that lists at least one such notifier,
// carries a one-click unsubscribe link (RFC 8058):
//
//	List-Unsubscribe: <{unsubscribe_url}/v1/unsubscribe/{token}>[, <mailto:…>]
//	List-Unsubscribe-Post: List-Unsubscribe=One-Click
//
// The token is signed (channels/unsubscribe) and names the recipient, this
// channel and the preference scope to turn off: the notifier's category
// ("category:comments"), or the notifier itself when it has no category; a
// digest's token names the scope of each notifier it lists. It is base64url,
// so a recipient id can never add a second URI or a line to the header. The
// list_unsubscribe template of earlier versions is gone: a config that sets
// it is refused with a pointer to unsubscribe_url.
//
// # The message
//
//	From: <channels.email.from>
//	To: Recipient Name <recipient@email>
//	Subject, Date (from Options.Clock)
//	Message-ID: <DELIVERYID@from-domain>   e.g. <0194…@acme.test>
//	X-Notifyd-Delivery: <delivery id>
//	X-Notifyd-Notifier: <notifier>          (X-Notifyd-Digest: <count> for a digest)
//	List-Unsubscribe, List-Unsubscribe-Post when unsubscribe_url is set
//	DKIM-Signature                          when channels.email.dkim is set
//
// with a text/plain body, a text/html body, or both as multipart/alternative.
// The Message-ID depends only on the delivery id, so every retry of a delivery
// carries the same one and a receiver can drop the rare duplicate (notifyd
// sends at least once).
//
// # Connections
//
// At most Options.PoolSize connections are open, each used by one send at a
// time and kept for the next, so there is no TCP or TLS handshake per message
// under load. A message costs one round trip when the server offers
// PIPELINING and CHUNKING (MAIL, RCPT and BDAT with the message in one write),
// two with PIPELINING only (MAIL, RCPT and DATA, then the data) and four
// without (MAIL, RCPT, DATA and the data, each waiting for its reply); see
// txMode. The server's acceptance of the data ends the transaction and leaves
// the connection ready for the next MAIL, with no RSET after it and no NOOP
// before.
// A connection idle for a minute is closed instead of reused. A reused
// connection that turns out to be dead before the server accepted DATA (the
// server closed it meanwhile) is redialled and the message sent once more on
// the new one; nothing can be delivered twice by that retry because the server
// never got any of the message. With BDAT the message leaves with the first
// write, so a pooled connection is checked without a round trip first (a peek
// at the socket for a close or a 421), and a connection that fails after the
// write is not retried on another (unless the server reset it unread).
//
// channels.email.timeout bounds one send, from waiting for a connection to the
// server's reply: a hung server fails the send as temporary within it, and
// sends on other connections are not held up.
//
// # Failover
//
// channels.email.smtp may list several servers. Each message tries them in
// order within one attempt: a refused or dropped connection, a timeout or a
// 4xx reply moves on to the next server (each gets its own timeout and its
// own pool); a 5xx reply is final. A server that failed three messages in a
// row is skipped for 30 seconds, so messages do not each wait on a dead
// primary; with every server skipped all are tried anyway. The server that
// accepted the message (or, when none did, the last one tried) is recorded
// as the delivery's provider ("smtp-b.example.test:587") through
// channels.SetProvider.
//
// channels.email.providers replaces smtp with a list of providers (Provider):
// SMTP servers and the email APIs of Amazon SES, SendGrid, Postmark, Mailgun
// and Resend, tried in the same way, each with its own lanes, rate limit,
// timeout and breaker. SES and Mailgun take notifyd's MIME message as it is;
// SendGrid, Postmark and Resend get its parts and headers as JSON. The
// provider's message id is recorded through channels.SetProviderMessageID
// (for SMTP, the message's Message-ID). An API's refusal of the message or
// the address is final, any other error moves on (see api.go).
//
// # Errors
//
// A 4xx reply, a refused or dropped connection and a timeout are temporary
// (channels.Temporary); a 5xx reply to MAIL, RCPT or DATA is permanent
// (channels.Permanent), with the server's reply in the error; a 5xx to RCPT
// or DATA whose enhanced status code is 5.1.x (the mailbox does not exist,
// RFC 3463) is channels.Suppress: the delivery is refused and the address
// suppressed, so nothing is sent to it again. Failures before a
// message transaction starts (greeting, EHLO, STARTTLS, AUTH) are temporary
// whatever the code: they say nothing about the message, and a fixed
// configuration lets the retries through. A template that fails to render or
// a recipient address that does not parse is permanent. When channels.email.rate
// would be exceeded the send returns channels.RateLimited with the wait, without
// waiting.
package email

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	netmail "net/mail"
	"net/textproto"
	"regexp"
	"strings"
	"time"

	"github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"
	"golang.org/x/time/rate"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/deliverytag"
	"github.com/notifyd/notifyd/channels/internal/failover"
	"github.com/notifyd/notifyd/channels/tracking"
	"github.com/notifyd/notifyd/config"
)

// DefaultPoolSize is the number of SMTP connections a Sender opens at most when
// Options.PoolSize is zero.
const DefaultPoolSize = 8

// defaultTimeout applies when channels.email.timeout is zero (a config built by
// hand; Load sets 30s).
const defaultTimeout = 30 * time.Second

// Options are a Sender's dependencies and tuning. The zero value works.
type Options struct {
	// Logger receives connection events at debug level. Nil discards them.
	Logger *slog.Logger
	// Clock stamps the Date header and drives the rate limiter. Nil is time.Now.
	Clock func() time.Time
	// PoolSize is the most SMTP connections open at once. Zero means
	// DefaultPoolSize.
	PoolSize int
	// TLSConfig verifies the server for smtp.tls starttls and tls. Nil means the
	// system roots; an empty ServerName is set to smtp.host.
	TLSConfig *tls.Config
	// TokenSecret is http.token_secret: unsubscribe links are signed with a
	// key derived from it. Required when channels.email.unsubscribe_url is set.
	TokenSecret string
	// HTTPClient sends to the email APIs of channels.email.providers. Nil:
	// each API provider gets a client of its own, keeping up to its lanes
	// connections.
	HTTPClient *http.Client
	// Notifier returns a notifier's category and whether it is required (no
	// unsubscribe link); ok false for a notifier it does not know. Nil: every
	// notifier is optional, with the message's category.
	Notifier func(name string) (category string, required, ok bool)
}

// Sender is the email channel. It is safe for concurrent use; Close releases
// its connections.
type Sender struct {
	cfg       *Config
	from      *netmail.Address
	domain    string
	timeout   time.Duration
	notifiers map[string]*notifierTemplates
	digest    *digestTemplates
	unsub     *unsubscriber          // nil: no List-Unsubscribe
	tags      *deliverytag.Signer    // nil without http.token_secret: no delivery tags
	track     *tracking.Rewriter     // nil without unsubscribe_url and http.token_secret: no tracking
	dkim      *dkimSigner            // nil: unsigned
	limiter   *rate.Limiter          // nil: unlimited
	providers *failover.List[*route] // in order (see failover)
	log       *slog.Logger
	clock     func() time.Time
}

type notifierTemplates struct {
	t    *Templates
	sets map[*Templates]*tmplSet // the default and each locale variant
}

type digestTemplates struct {
	maxItems int
	set      *tmplSet
}

// New builds an email Sender from the channels.email config, the digest
// config (nil when digests are not used: SendDigest then fails) and the
// notifiers' email templates by notifier name (only those notifiers are
// sendable). Templates checked by the registry are used as compiled; a
// config built in code may leave them uncompiled and New parses the sources.
// New does not connect: the first send dials.
func New(cfg *Config, digest *config.Digest, notifiers map[string]*Templates, opts Options) (*Sender, error) {
	if cfg == nil {
		return nil, errors.New("email: channels.email is not configured")
	}
	from, err := netmail.ParseAddress(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("email: channels.email.from %q: %w", cfg.From, err)
	}
	at := strings.LastIndexByte(from.Address, '@')
	if at < 0 || at == len(from.Address)-1 {
		return nil, fmt.Errorf("email: channels.email.from %q has no domain for Message-IDs", cfg.From)
	}
	s := &Sender{
		cfg:       cfg,
		from:      from,
		domain:    from.Address[at+1:],
		timeout:   cfg.Timeout.D(),
		notifiers: make(map[string]*notifierTemplates),
		log:       opts.Logger,
		clock:     opts.Clock,
	}
	if s.timeout <= 0 {
		s.timeout = defaultTimeout
	}
	// The delivery tag API providers echo back with their events, signed
	// so a forged tag matches no delivery (POST /v1/providers/{kind}/events).
	s.tags, _ = deliverytag.New(opts.TokenSecret)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	for name, t := range notifiers {
		if t == nil {
			continue
		}
		nt := &notifierTemplates{t: t, sets: make(map[*Templates]*tmplSet)}
		p := "notifiers." + name + ".channels.email"
		if nt.sets[t], err = emailSet(p, t); err != nil {
			return nil, fmt.Errorf("email: %w", err)
		}
		for loc, v := range t.Locales {
			if v == nil {
				continue
			}
			if nt.sets[v], err = emailSet(p+".locales."+loc, v); err != nil {
				return nil, fmt.Errorf("email: %w", err)
			}
		}
		s.notifiers[name] = nt
	}
	if digest != nil {
		set, err := newTmplSet("digest", digest.Subject, digest.Text, digest.HTML,
			digest.SubjectTmpl, digest.TextTmpl, digest.HTMLTmpl)
		if err != nil {
			return nil, fmt.Errorf("email: %w", err)
		}
		s.digest = &digestTemplates{maxItems: digest.MaxItems, set: set}
	}
	if cfg.ListUnsubscribe != "" {
		return nil, errors.New("email: channels.email.list_unsubscribe was removed: set unsubscribe_url")
	}
	if s.unsub, err = newUnsubscriber(cfg, opts); err != nil {
		return nil, err
	}
	if s.unsub != nil {
		// Tracking links go to the same public base URL as unsubscribe
		// links, and never replace one.
		signer, err := tracking.New(opts.TokenSecret)
		if err != nil {
			return nil, err
		}
		base := s.unsub.base
		s.track = &tracking.Rewriter{Signer: signer, Base: base, Skip: func(u string) bool {
			return strings.HasPrefix(u, base+UnsubscribePath) || strings.Contains(strings.ToLower(u), "unsubscribe")
		}}
	}
	if cfg.DKIM != nil {
		if s.dkim, err = newDKIMSigner(cfg.DKIM); err != nil {
			return nil, err
		}
	}
	if cfg.Rate > 0 {
		// A burst of one second's worth: a quiet replica may send that many at
		// once, and the average stays at the rate.
		s.limiter = rate.NewLimiter(rate.Limit(cfg.Rate), max(1, int(math.Ceil(cfg.Rate))))
	}
	size := opts.PoolSize
	if size <= 0 {
		size = DefaultPoolSize
	}
	client := func(lanes int) *http.Client {
		if opts.HTTPClient != nil {
			return opts.HTTPClient
		}
		return newHTTPClient(lanes)
	}
	what := "every email provider failed"
	if len(cfg.Providers) == 0 {
		what = "every smtp server failed" // channels.email.smtp's list
	}
	s.providers = &failover.List[*route]{Channel: Name, Exhausted: what, Clock: s.clock, Log: s.log}
	if s.providers.Providers, err = s.newProviders(opts.TLSConfig, size, client); err != nil {
		return nil, err
	}
	return s, nil
}

func emailSet(path string, t *Templates) (*tmplSet, error) {
	return newTmplSet(path, t.Subject, t.Text, t.HTML, t.subjectT, t.textT, t.htmlT)
}

// Name returns "email".
func (s *Sender) Name() string { return Name }

// Addressable reports whether r can get the notifier's email: the notifier must
// have email templates and r a valid email address ("recipient has no email
// address" otherwise).
func (s *Sender) Addressable(notifier string, r channels.Recipient) error {
	if _, ok := s.notifiers[notifier]; !ok {
		return fmt.Errorf("notifier %q has no email templates", notifier)
	}
	_, err := recipientAddress(r)
	return err
}

func recipientAddress(r channels.Recipient) (*netmail.Address, error) {
	if r.Email == "" {
		return nil, errors.New("recipient has no email address")
	}
	a, err := netmail.ParseAddress(r.Email)
	if err != nil || a.Address != strings.TrimSpace(r.Email) {
		return nil, fmt.Errorf("recipient email address %q is invalid", r.Email)
	}
	return &netmail.Address{Name: r.Name, Address: a.Address}, nil
}

// Send renders msg for msg.Recipient and sends it. See the package doc for how
// errors are classified.
func (s *Sender) Send(ctx context.Context, msg channels.Message) error {
	if msg.Recipient == nil {
		return channels.Permanent(errors.New("email: message has no recipient"))
	}
	r := *msg.Recipient
	nt, ok := s.notifiers[msg.Notifier]
	if !ok {
		return channels.Permanent(fmt.Errorf("email: notifier %q has no email templates", msg.Notifier))
	}
	to, err := recipientAddress(r)
	if err != nil {
		return channels.Permanent(fmt.Errorf("email to recipient %s: %w", r.ID, err))
	}
	set := nt.sets[nt.t.For(r.Locale)]
	subject, text, html, err := set.renderEmail(r, msg.Params)
	if err != nil {
		return channels.Permanent(fmt.Errorf("email %s to recipient %s: %w", msg.Notifier, r.ID, err))
	}
	if tr := nt.t.Track; tr.on() && s.track != nil && html != "" {
		html = s.track.Rewrite(html, msg.DeliveryID, s.clock(), tr.Opens, tr.Clicks)
	}
	var scopes []string
	if s.unsub != nil {
		if sc := s.unsub.scope(msg.Notifier, msg.Category); sc != "" {
			scopes = []string{sc}
		}
	}
	m, err := s.message(msg.DeliveryID, to, subject, text, html, r.ID, scopes)
	if err != nil {
		return channels.Permanent(fmt.Errorf("email %s to recipient %s: %w", msg.Notifier, r.ID, err))
	}
	if t := msg.Tenant; t != nil && t.Branding.EmailFrom != "" {
		// The tenant's own From (checked when the tenant was written).
		from, err := netmail.ParseAddress(t.Branding.EmailFrom)
		if err != nil {
			return channels.Permanent(fmt.Errorf("email %s to recipient %s: tenant %s's email_from %q: %w",
				msg.Notifier, r.ID, t.ID, t.Branding.EmailFrom, err))
		}
		m.FromMailAddress(from)
	}
	m.SetGenHeader("X-Notifyd-Notifier", msg.Notifier)
	if err := s.deliver(ctx, m, msg.DeliveryID, subject, text, html); err != nil {
		return fmt.Errorf("send email %s to recipient %s: %w", msg.Notifier, r.ID, err)
	}
	return nil
}

// Preview renders the notifier's email for r (its locale picks the
// templates, its name reaches {{recipient.Name}}) without sending it.
func (s *Sender) Preview(notifier string, params map[string]any, r channels.Recipient) ([]channels.Part, error) {
	nt, ok := s.notifiers[notifier]
	if !ok {
		return nil, fmt.Errorf("notifier %q has no email templates", notifier)
	}
	subject, text, html, err := nt.sets[nt.t.For(r.Locale)].renderEmail(r, params)
	if err != nil {
		return nil, err
	}
	return []channels.Part{{Name: "subject", Value: subject}, {Name: "text", Value: text}, {Name: "html", Value: html}}, nil
}

// message builds the headers and body common to notifications and digests.
// scopes are what its unsubscribe link turns off (none: no link).
func (s *Sender) message(deliveryID string, to *netmail.Address, subject, text, html, recipient string, scopes []string) (*mail.Msg, error) {
	if deliveryID == "" || strings.ContainsAny(deliveryID, " \t\r\n<>@()[]\\\",;:") {
		return nil, fmt.Errorf("delivery id %q cannot be a Message-ID", deliveryID)
	}
	m := mail.NewMsg()
	m.SetUserAgent("notifyd")
	m.FromMailAddress(s.from)
	m.ToMailAddress(to)
	m.Subject(subject)
	m.SetDateWithValue(s.clock())
	m.SetMessageIDWithValue(deliveryID + "@" + s.domain)
	m.SetGenHeader("X-Notifyd-Delivery", deliveryID)
	if err := s.unsub.set(m, recipient, scopes); err != nil {
		return nil, fmt.Errorf("unsubscribe link: %w", err)
	}
	switch {
	case text != "" && html != "":
		m.SetBodyString(mail.TypeTextPlain, text)
		m.AddAlternativeString(mail.TypeTextHTML, html)
	case html != "":
		m.SetBodyString(mail.TypeTextHTML, html)
	default:
		m.SetBodyString(mail.TypeTextPlain, text)
	}
	return m, nil
}

// deliver sends m (whose rendered parts are subject, text and html) to
// the recipients in its headers through the first provider that takes it
// (see failover), after checking channels.email.rate.
func (s *Sender) deliver(ctx context.Context, m *mail.Msg, delivery, subject, text, html string) error {
	from, err := m.GetSender(false)
	if err != nil {
		return channels.Permanent(fmt.Errorf("envelope sender: %w", err))
	}
	rcpts, err := m.GetRecipients()
	if err != nil {
		return channels.Permanent(fmt.Errorf("envelope recipients: %w", err))
	}
	o := &outgoing{m: m, from: from, rcpts: rcpts, smtpBody: m, subject: subject, text: text, html: html, delivery: delivery, tag: delivery}
	if s.tags != nil {
		o.tag = s.tags.Tag(delivery)
	}
	if s.dkim != nil {
		var raw bytes.Buffer
		if _, err := m.WriteTo(&raw); err != nil {
			return channels.Permanent(fmt.Errorf("render message: %w", err))
		}
		signed, err := s.dkim.sign(raw.Bytes())
		if err != nil {
			return channels.Permanent(err)
		}
		o.smtpBody = bytesMessage(signed)
		o.raw = raw.Bytes() // API providers sign with their own verified domain
	}
	if s.limiter != nil {
		now := s.clock()
		res := s.limiter.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			// Give the token back: the job snoozes and comes back later.
			res.CancelAt(now)
			return channels.RateLimited(fmt.Errorf("channels.email.rate (%g/s) reached", s.cfg.Rate), d)
		}
	}
	return s.failover(ctx, o)
}

// sendOn sends m from the envelope sender from to rcpts on c, as one mail
// transaction, and releases c to the pool, keeping it only when it is known to
// be in a clean state.
//
// It drives the smtp.Client itself rather than through go-mail's
// Client.SendWithSMTPClient, which sends RSET after every message (and NOOP
// before it unless told not to), a round trip each on top of MAIL, RCPT, DATA
// and the data. Neither is needed. The server's reply to the end of the data
// completes the transaction and clears its state, leaving the session ready
// for the next MAIL (RFC 5321 §4.1.1.4); RSET is sent only to abort a
// transaction the server refused. And rather than checking every pooled
// connection first, one that turns out dead before DATA is redialled (see
// deliver).
//
// MAIL carries the parameters smtp.Client.Mail adds from the EHLO reply
// (BODY=8BITMIME, SMTPUTF8), as with SendWithSMTPClient. When the server
// offers PIPELINING (and CHUNKING) the transaction is written on the
// client's textproto.Conn by hand (conn.pipelined): the smtp package reads
// each reply before it returns.
func (s *Sender) sendOn(ctx context.Context, c *conn, from string, rcpts []string, m io.WriterTo) (err error) {
	keep := false
	defer func() { c.pool.release(c, keep) }()

	// The socket deadline set when the connection was last used has passed or
	// soon will: set a fresh backstop. This fails only on a closed socket, on
	// which MAIL fails anyway.
	_ = c.sc.UpdateDeadline(s.socketTimeout())
	// The smtp client has no context: closing the socket is what interrupts a
	// read from a hung server (smtp.Client.Close would wait for the lock the
	// blocked read holds).
	stop := context.AfterFunc(ctx, func() { _ = c.raw.Close() })
	err = c.transact(from, rcpts, m)
	if !stop() {
		// The connection was closed under the send. If the server still
		// accepted the message, it was delivered: reporting an error would
		// send it again.
		if err != nil {
			return fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		return nil
	}
	if err == nil {
		keep = true
		return nil
	}
	var te *txError
	if errors.As(err, &te) && te.code >= 400 && te.code != 421 && !te.drop {
		// The server refused and is still talking to us: RSET ends the
		// transaction it may hold open (after a refused RCPT or DATA), so the
		// connection is clean for the next message. 421 means it is closing
		// the connection, and drop that it cannot take an RSET (see txError).
		keep = c.sc.Reset() == nil
	}
	return err
}

// transact runs one mail transaction on sc sequentially (modeSequential),
// waiting for each reply: MAIL, RCPT for each recipient, DATA, then m and the end of the data. Its errors are *txError. It stops at
// the first refusal; after a failure while writing m the connection is in the
// middle of the data and must be dropped (the error has no reply code).
func transact(sc *smtp.Client, from string, rcpts []string, m io.WriterTo) error {
	if err := sc.Mail(from); err != nil {
		return newTxError(stepMail, err)
	}
	for _, to := range rcpts {
		if err := sc.Rcpt(to); err != nil {
			e := newTxError(stepRcpt, err)
			e.rcpt = to
			return e
		}
	}
	w, err := sc.Data()
	if err != nil {
		return newTxError(stepData, err)
	}
	if _, err := m.WriteTo(w); err != nil {
		return newTxError(stepMessage, err)
	}
	if err := w.Close(); err != nil {
		e := newTxError(stepMessage, err)
		if len(rcpts) == 1 {
			e.rcpt = rcpts[0] // a refusal of the data is about the one mailbox
		}
		return e
	}
	return nil
}

// txStep is the step of a mail transaction that failed.
type txStep string

const (
	stepMail    txStep = "MAIL FROM"
	stepRcpt    txStep = "RCPT TO"
	stepData    txStep = "DATA"
	stepMessage txStep = "message data" // writing the message, then the reply to its end
)

// txError is a failed mail transaction step, with the server's reply code when
// it refused.
type txError struct {
	step txStep
	code int    // 0 when there was no reply: the connection failed (or the reply was garbled)
	rcpt string // the mailbox the refusal is about, when it names one
	err  error
	// sent: the connection failed after the message was written (pipelined
	// BDAT), so the server may have it even though the failing step is
	// earlier.
	sent bool
	// drop: the connection is not fit for RSET and must be closed (a
	// pipelined refusal the server answered with 354, or a connection that
	// failed after a refusal).
	drop bool
}

func newTxError(step txStep, err error) *txError {
	e := &txError{step: step, err: err}
	// smtp.Client returns a refusal as the *textproto.Error of the reply.
	var te *textproto.Error
	if errors.As(err, &te) {
		e.code = te.Code
	}
	return e
}

func (e *txError) Error() string { return fmt.Sprintf("smtp %s: %v", e.step, e.err) }

func (e *txError) Unwrap() error { return e.err }

// beforeData reports whether err is a connection failure that happened before
// the server accepted DATA, so the server has none of the message.
func beforeData(err error) bool {
	var te *txError
	return errors.As(err, &te) && te.code == 0 && te.step != stepMessage && !te.sent
}

// classify turns a send error into the channels error kind: a 5xx reply is
// permanent (a suppression when its enhanced code is 5.1.x and it is about
// the recipient's mailbox); a 4xx reply, a closed connection, a timeout or any other failure
// is temporary.
func classify(err error) error {
	var te *txError
	if errors.As(err, &te) && te.code >= 500 {
		if status := enhancedStatus(te.err); strings.HasPrefix(status, "5.1.") && (te.step == stepRcpt || te.step == stepMessage) {
			return channels.Suppress(err, strings.Trim(te.rcpt, "<>"), "smtp "+status+": "+replyText(te.err))
		}
		return channels.Permanent(err)
	}
	return channels.Temporary(err, 0)
}

// enhancedStatusRE matches an RFC 3463 enhanced status code at the start of a
// reply's text ("5.1.1 no such user").
var enhancedStatusRE = regexp.MustCompile(`^([245])\.(\d{1,3})\.(\d{1,3})(\s|$)`)

// enhancedStatus returns the enhanced status code ("5.1.1") of the reply in
// err, "" when it has none.
func enhancedStatus(err error) string {
	var te *textproto.Error
	if !errors.As(err, &te) {
		return ""
	}
	m := enhancedStatusRE.FindStringSubmatch(strings.TrimSpace(te.Msg))
	if m == nil {
		return ""
	}
	return m[1] + "." + m[2] + "." + m[3]
}

// replyText is the reply's text without its enhanced code, on one line and
// at most 200 bytes (it is stored with the suppression).
func replyText(err error) string {
	var te *textproto.Error
	if !errors.As(err, &te) {
		return err.Error()
	}
	t := strings.Join(strings.Fields(enhancedStatusRE.ReplaceAllString(strings.TrimSpace(te.Msg), "")), " ")
	if len(t) > 200 {
		t = t[:200]
	}
	return t
}

// bytesMessage is a rendered (and signed) message, written as it is.
type bytesMessage []byte

func (b bytesMessage) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// Advice is what `notifyd check` tells the operator: with DKIM configured,
// the DNS TXT record that publishes the key, which receivers look up to
// verify the signatures.
func (s *Sender) Advice() []string {
	if s.dkim == nil {
		return nil
	}
	return []string{fmt.Sprintf("channels.email.dkim: publish this DNS TXT record at %s._domainkey.%s: %s",
		s.dkim.opts.Selector, s.dkim.opts.Domain, s.dkim.record)}
}

var _ channels.Advisor = (*Sender)(nil)

// Close closes the pooled connections. Sends in flight finish (or time out)
// and close their connection; sends after Close fail.
func (s *Sender) Close() error {
	for _, p := range s.providers.Providers {
		if p.Via.pool != nil {
			p.Via.pool.close()
		}
	}
	return nil
}
