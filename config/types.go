// Package config loads and validates notifyd's YAML configuration
// (docs/configuration.md; config.example.yaml documents every key).
//
// Load expands ${VAR} from the environment, rejects unknown keys, and validates
// every value; each error names the file, the key path and the line. A loaded
// Config carries compiled JSON Schemas, parsed templates and cron schedules,
// so the rest of the daemon never re-parses config text.
//
// Templates are text/template (html/template for email and digest html) with
// missingkey=zero. A notifier's templates see the params object as their dot;
// a param that is absent renders as "" (not "<no value>"), but reaching into
// an absent object ({{.author.name}} without author) is an execution error:
// write {{with .author}}{{.name}}{{end}} for optional objects. Numbers are
// float64, as encoding/json decodes them: pass params decoded without
// UseNumber if templates format numbers ({{printf "%.2f" .amount}}).
package config

import (
	"text/template"
	"time"

	htmltemplate "html/template"

	"github.com/robfig/cron/v3"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/notifyd/notifyd/templates"
)

// Config is the whole daemon configuration. The zero value is not useful: use
// Load, Parse or Default.
type Config struct {
	Database  Database             `yaml:"database"`
	HTTP      HTTP                 `yaml:"http"`
	Queues    Queues               `yaml:"queues"`
	Reasons   []string             `yaml:"reasons"`
	Channels  Channels             `yaml:"channels"`
	Retry     Retry                `yaml:"retry"`
	Digest    Digest               `yaml:"digest"`
	Retention Retention            `yaml:"retention"`
	Notifiers map[string]*Notifier `yaml:"notifiers"`
	// Providers verifies the event webhooks of POST /v1/providers/{kind}/events.
	Providers Providers `yaml:"providers"`
	// Console configures the operator's console at /admin/: single sign-on.
	Console Console `yaml:"console"`
	// Locales is the directory of message catalogs, one <locale>.yaml per
	// locale (docs/translations.md), relative to the config file; "" for
	// none (templates cannot call t).
	Locales string `yaml:"locales"`
	// DefaultLocale is the last step of every fallback chain and the locale
	// of recipients without one. Default "en".
	DefaultLocale string `yaml:"default_locale"`

	// Catalog is Locales loaded by Load; nil without locales. Warnings are
	// what `notifyd check` prints without failing: keys a locale other than
	// the default lacks.
	Catalog  *templates.Catalog `yaml:"-"`
	Warnings []string           `yaml:"-"`
	// usedKeys are the catalog keys templates name, gathered while they
	// are parsed, for the catalog check.
	usedKeys map[string]bool

	// Path is the file the config was loaded from ("" when parsed from bytes).
	Path string `yaml:"-"`

	// lines maps every key path of the file to its line, for the problems
	// the channels report about their sections (NewProblems).
	lines map[string]int
	// unset names, by key path, the environment variables the file's
	// values were written with that were unset or empty (see errorList).
	unset map[string][]string
}

// Database says where notifyd keeps its tables and River's.
type Database struct {
	// URL is a libpq/pgx connection string. Empty means "no database configured":
	// `notifyd dev` then starts a private PostgreSQL; `run` refuses to start.
	URL string `yaml:"url"`
	// Schema holds notifyd's notify_* tables and River's river_* tables. Default "public".
	Schema string `yaml:"schema"`
	// MaxConns caps the connection pool. Zero means 10 + the fan-out, digest and
	// maintenance workers + a quarter of the send workers (send jobs hold a
	// connection only to claim and settle, never across a provider call).
	MaxConns int `yaml:"max_conns"`
	// ReadURL is a connection string of a streaming standby of the database
	// (a read replica). Set, the API reads inbox pages and counts,
	// preferences, recipients and the ledger from it while it is no more
	// than MaxReadLag behind; writes, the stream's change-log reads and a
	// read that must see the request's own write stay on URL. Empty: every
	// read is on URL.
	ReadURL string `yaml:"read_url"`
	// MaxReadLag is how far behind the primary the standby may be and
	// still serve reads (default 1s). It is checked a few times per
	// MaxReadLag, never per request; a standby that is further behind, down,
	// or no longer in recovery sends reads to the primary until it is back.
	MaxReadLag Duration `yaml:"max_read_lag"`
}

// HTTP configures the API server.
type HTTP struct {
	Listen      string `yaml:"listen"`       // default 127.0.0.1:8080
	AdminToken  string `yaml:"admin_token"`  // bearer token for admin endpoints; empty disables them
	TokenSecret string `yaml:"token_secret"` // HS256 secret for recipient JWTs; empty disables recipient endpoints
	// BounceToken is a bearer token that authorises POST /v1/bounces and
	// nothing else, for a bounce relay that faces the internet and should
	// not hold the admin token. Empty: only the admin token reports bounces.
	BounceToken string `yaml:"bounce_token"`
	MaxBody     int64  `yaml:"max_body"` // request body limit in bytes, default 1 MiB
	// AllowedOrigins lists the browser origins ("https://app.example.com", or
	// "*") that may call the API from another origin (CORS). Empty: same
	// origin only.
	AllowedOrigins []string `yaml:"allowed_origins"`

	// ReadHeaderTimeout bounds reading a request's headers (default 10s),
	// ReadTimeout the whole request, body included (default 30s),
	// WriteTimeout writing a response (default 30s; the inbox stream sets its
	// own deadline per write instead), IdleTimeout how long a keep-alive
	// connection may wait for its next request (default 120s).
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	ReadTimeout       Duration `yaml:"read_timeout"`
	WriteTimeout      Duration `yaml:"write_timeout"`
	IdleTimeout       Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes caps a request's header block (default 64 KiB).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnections caps the connections the API serves at once, per
	// replica (default 1024); more wait to be accepted.
	MaxConnections int `yaml:"max_connections"`
	// MaxStreamsPerRecipient caps the inbox streams one recipient may hold
	// open per replica (default 5).
	MaxStreamsPerRecipient int `yaml:"max_streams_per_recipient"`
	// MaxTopics caps the topics of one POST /v1/notifications (default 100).
	MaxTopics int `yaml:"max_topics"`
	// MaxTokenTTL caps a recipient token's lifetime, exp − iat (default 24h):
	// a token minted for longer is refused, however far it is from expiry.
	MaxTokenTTL Duration `yaml:"max_token_ttl"`
	// Rate limits requests per token.
	Rate Rate `yaml:"rate"`
}

// Rate is the token-bucket limit of API requests, per recipient (all of one
// recipient's tokens share a bucket) and for the admin token, per replica.
// A request over the limit is answered 429 with Retry-After. Zero means
// unlimited.
type Rate struct {
	Recipient      float64 `yaml:"recipient"`       // requests per second per recipient, default 20
	RecipientBurst int     `yaml:"recipient_burst"` // bucket size, default 40
	Admin          float64 `yaml:"admin"`           // requests per second for the admin token, default 200
	AdminBurst     int     `yaml:"admin_burst"`     // bucket size, default 400
	// TenantKey is the limit of each tenant API key (requests per second,
	// default 50) unless the key was created with a rate of its own.
	TenantKey      float64 `yaml:"tenant_key"`
	TenantKeyBurst int     `yaml:"tenant_key_burst"` // bucket size, default 100
}

// Queues sets River's max workers per notifyd queue, plus fetch tuning.
type Queues struct {
	Fanout      int `yaml:"fanout"`      // default 4
	Send        int `yaml:"send"`        // default 50
	Digest      int `yaml:"digest"`      // default 128
	Maintenance int `yaml:"maintenance"` // default 2
	// FetchCooldown and FetchPollInterval tune River's producers (defaults 5ms and 50ms:
	// River's own defaults cap a queue near 1,000 jobs/s).
	FetchCooldown     Duration `yaml:"fetch_cooldown"`
	FetchPollInterval Duration `yaml:"fetch_poll_interval"`
	// FanoutChunk is how many recipients one fan-out transaction writes. Default 2000.
	FanoutChunk int `yaml:"fanout_chunk"`
	// SendBatch is how many deliveries one notify.send job carries. Default 50.
	SendBatch int `yaml:"send_batch"`
	// SendPerHost is the most sends one process has in flight to one target
	// (the SMTP relay, one webhook host) at once; further sends to it wait,
	// and are parked when it stops answering. Default 8.
	SendPerHost int `yaml:"send_per_host"`
}

// Channels holds the channels' sections of the file (channels.<name>) by
// channel name, undecoded: each registered channel decodes its own (see
// Section). A channel without a section is not configured, and its deliveries
// are `unavailable` at fan-out time, unless the channel needs no config.
type Channels map[string]*Section

// Retry bounds how long a failing delivery is retried.
type Retry struct {
	MaxAge Duration `yaml:"max_age"` // default 72h
	// Lease is how long a claimed (`sending`) delivery may stay claimed before the
	// retry sweep takes it back. Default 5m.
	Lease Duration `yaml:"lease"`
	// Sweep is the retry sweep's cron spec. Default "CRON_TZ=UTC * * * * *" (every minute).
	Sweep string `yaml:"sweep"`

	// SweepCron is Sweep parsed, set by Load. It satisfies river.PeriodicSchedule.
	SweepCron cron.Schedule `yaml:"-"`
}

// Digest configures digests (docs/digests.md).
type Digest struct {
	Schedule string `yaml:"schedule"` // per recipient, in their timezone; default "0 8 * * *"
	Sweep    string `yaml:"sweep"`    // default "CRON_TZ=UTC */5 * * * *"
	Timezone string `yaml:"timezone"` // default UTC
	MaxItems int    `yaml:"max_items"`
	Subject  string `yaml:"subject"`
	Text     string `yaml:"text"`
	HTML     string `yaml:"html"`

	// Compiled forms, set by Load. The templates' dot is a templates.DigestData. HTMLTmpl
	// is nil when HTML is empty (text-only digests). Location is Timezone
	// loaded: the zone for recipients whose profile has no timezone.
	SubjectTmpl *template.Template     `yaml:"-"`
	TextTmpl    *template.Template     `yaml:"-"`
	HTMLTmpl    *htmltemplate.Template `yaml:"-"`
	Location    *time.Location         `yaml:"-"`

	// ScheduleCron is Schedule parsed. It carries no zone of its own: its Next
	// works in the zone of the time it is given, so call
	// ScheduleCron.Next(t.In(recipientLocation)).
	ScheduleCron cron.Schedule `yaml:"-"`
	// SweepCron is Sweep parsed. It satisfies river.PeriodicSchedule.
	SweepCron cron.Schedule `yaml:"-"`
}

// Providers configures POST /v1/providers/{kind}/events: how the event
// webhook of each provider is verified. A provider left out has no route
// (404): nothing unverified is ever taken.
type Providers struct {
	SES      *SESEvents      `yaml:"ses"`
	SendGrid *SendGridEvents `yaml:"sendgrid"`
	Postmark *PostmarkEvents `yaml:"postmark"`
	Mailgun  *MailgunEvents  `yaml:"mailgun"`
	Twilio   *TwilioEvents   `yaml:"twilio"`
}

// SESEvents takes Amazon SES events through an SNS topic subscribed over
// HTTPS.
type SESEvents struct {
	// TopicARNs are the SNS topics whose messages are taken (required): a
	// message of another topic, a subscription confirmation included, is
	// refused, however well signed (anyone can make an SNS topic).
	TopicARNs []string `yaml:"topic_arns"`
	// CertFile is a PEM file with SNS's signing certificate. Set, it is the
	// only certificate used and nothing is fetched.
	CertFile string `yaml:"cert_file"`
	// CertHosts are the hosts a signing certificate (SigningCertURL) and a
	// subscription's SubscribeURL may be fetched from, over HTTPS. Empty:
	// sns.<region>.amazonaws.com (and .com.cn).
	CertHosts []string `yaml:"cert_hosts"`
	// MaxAge is how old a message's Timestamp may be (default 1h).
	MaxAge Duration `yaml:"max_age"`
}

// SendGridEvents takes SendGrid's signed Event Webhook.
type SendGridEvents struct {
	// PublicKey is the webhook's verification key as SendGrid shows it
	// (base64 of the DER ECDSA public key). Required.
	PublicKey string `yaml:"public_key"`
	// MaxAge is how far the signed timestamp may be from now (default 10m).
	MaxAge Duration `yaml:"max_age"`
}

// PostmarkEvents takes Postmark's webhooks, authenticated by the basic
// auth credentials in the webhook's URL.
type PostmarkEvents struct {
	Username string `yaml:"username"` // required
	Password string `yaml:"password"` // required
}

// MailgunEvents takes Mailgun's webhooks, signed with the HTTP webhook
// signing key.
type MailgunEvents struct {
	SigningKey string `yaml:"signing_key"` // required
	// MaxAge is how far the signed timestamp may be from now (default 10m).
	MaxAge Duration `yaml:"max_age"`
}

// TwilioEvents takes Twilio's message status callbacks (X-Twilio-Signature).
type TwilioEvents struct {
	AuthToken string `yaml:"auth_token"` // required: the account's auth token
	// URL is the callback URL exactly as Twilio calls it (the signature
	// covers it). Empty: https:// and the request's Host and path.
	URL string `yaml:"url"`
}

// Retention says how long rows are kept.
type Retention struct {
	Inbox      Duration `yaml:"inbox"`      // default 2160h
	Deliveries Duration `yaml:"deliveries"` // default 720h
	Changes    Duration `yaml:"changes"`    // inbox change log; default 168h
	Schedule   string   `yaml:"schedule"`   // default "CRON_TZ=UTC 17 3 * * *"

	// ScheduleCron is Schedule parsed, set by Load. It satisfies river.PeriodicSchedule.
	ScheduleCron cron.Schedule `yaml:"-"`
}

// Notifier is one kind of notification.
//
// Params and Example hold JSON-shaped values (map[string]any, []any, string,
// float64, bool, nil; an integer too large for a float64 is a json.Number),
// exactly what encoding/json decodes, so templates see config examples and
// HTTP params alike.
type Notifier struct {
	// Name is the notifier's key under `notifiers:`, set by Load.
	Name          string           `yaml:"-"`
	Category      string           `yaml:"category"`
	Required      bool             `yaml:"required"`
	NotifyActor   bool             `yaml:"notify_actor"`
	MaxRecipients int              `yaml:"max_recipients"` // default 10000
	Params        map[string]any   `yaml:"params"`         // JSON Schema, draft 2020-12; nil accepts any object
	Example       map[string]any   `yaml:"example"`        // params used by `notifyd check` to render templates
	Channels      NotifierChannels `yaml:"channels"`
	// Batch collapses bursts of this notifier per recipient (nil: none);
	// see docs/workflows.md.
	Batch *Batch `yaml:"batch"`
	// Audience reads recipients from the application's own tables at
	// fan-out, besides the inline recipients and topics (nil: none); see
	// docs/audiences.md.
	Audience *Audience `yaml:"audience"`
	// AudienceTimeout is the audience query's statement timeout (default
	// 30s): a query that runs longer fails, and the notification is
	// rejected with the database's message.
	AudienceTimeout Duration `yaml:"audience_timeout"`

	// Schema is Params compiled, set by Load (nil when Params is nil).
	Schema *jsonschema.Schema `yaml:"-"`

	// example is what ExampleParams returns, set by Load.
	example map[string]any
}

// NotifierChannels holds a notifier's sections per channel
// (notifiers.<n>.channels.<name>). A channel without a section is not used by
// the notifier.
type NotifierChannels map[string]*NotifierChannel

// NotifierChannel is one notifier's section for one channel. The key
// `default`, the notifier's mode on the channel before any preference, is
// read by notifyd itself; every other key belongs to the channel, which
// decodes Section (its templates, a destination URL).
type NotifierChannel struct {
	// Default is the `default` key: immediate, digest or off, as the channel
	// allows; "" means the channel's own default.
	Default string
	// Section is the rest of the mapping, for the channel to decode.
	Section *Section

	// Workflow keys, read by notifyd itself (docs/workflows.md); the
	// registry says which channels may use them.

	// Delay is the `delay` key: the channel's delivery is due that long
	// after fan-out (`scheduled` until then). Zero sends at once.
	Delay Duration
	// Unless is the `unless` key: "read" or "seen" skips a delivery whose
	// recipient has read (or seen) the notification's in-app item by the
	// time it is due, or by the time the digest is rendered. "" never skips.
	Unless string
	// Throttle is the `throttle` key: nil is unthrottled.
	Throttle *Throttle
	// If is the `if` key: a template over the params rendered once per
	// notification; any result but "true" leaves the channel out for every
	// recipient (their deliveries `skipped`, last_error "condition false").
	// "" always sends.
	If string
	// IfTmpl is If parsed, set by Load (nil when If is "").
	IfTmpl *template.Template
}

// Audience is a notifier's `audience` key: a read-only SQL query over the
// application's tables that returns a column `id` (any type, read as text)
// and optionally `reason`, with $1… bound from the params Args names, in
// order (never interpolated). The fan-out runs it once per notification in a
// READ ONLY transaction with the notifier's AudienceTimeout, and merges its
// rows with the inline recipients and topics (strongest reason wins).
type Audience struct {
	Query string   `yaml:"query"`
	Args  []string `yaml:"args"`
}

// Batch is a notifier's `batch` key: for each recipient, notifications with
// the same rendered Key that arrive within Window of the first form one
// batch; the in-app item is updated in place as they join, and every other
// channel sends one message when the window closes or Max have joined.
// Templates see .Count, .Actors and .Items besides the params.
type Batch struct {
	// Key is a text/template over the params ("{{.post_id}}"); every
	// notification of the notifier with the same rendered key batches
	// together. Required.
	Key string `yaml:"key"`
	// Window is how long a batch stays open after its first notification.
	// Required, positive.
	Window Duration `yaml:"window"`
	// Max closes the batch early when that many notifications have joined
	// it. Zero: only the window closes it.
	Max int `yaml:"max"`

	// KeyTmpl is Key parsed, set by Load.
	KeyTmpl *template.Template `yaml:"-"`
}

// Throttle caps a notifier's deliveries on one channel per recipient: at
// most Limit in any window of Per; the rest are `throttled` (terminal).
type Throttle struct {
	Limit int      `yaml:"limit"`
	Per   Duration `yaml:"per"`
}

// Duration is a time.Duration written in YAML as a Go duration string ("72h").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// SearchSchema is the schema River and the migrations are told to use: "" for
// public (the connection's search_path decides), else the configured name.
func (d Database) SearchSchema() string {
	if d.Schema == "public" {
		return ""
	}
	return d.Schema
}

// Console configures the operator's console at /admin/.
type Console struct {
	// OIDC, when set, signs people in to the console with OpenID Connect
	// (authorization code with PKCE) into cookie sessions.
	OIDC *OIDC `yaml:"oidc"`
}

// OIDC is console.oidc: the identity provider the console signs in with.
type OIDC struct {
	// Issuer is the provider's issuer URL; its discovery document is at
	// <issuer>/.well-known/openid-configuration.
	Issuer       string `yaml:"issuer"`
	ClientID     string `yaml:"client_id"`
	ClientSecret string `yaml:"client_secret"` // write it as ${VAR}
	// RedirectURL is <the console's public origin>/admin/sso/callback,
	// registered with the provider. It must be https, except on a loopback
	// host.
	RedirectURL string `yaml:"redirect_url"`
	// RolesClaim names the ID token claim (a string or a list of strings,
	// such as "groups") whose values RoleMap turns into a role. Empty: a
	// person's role is their row in the operators table only.
	RolesClaim string `yaml:"roles_claim"`
	// RoleMap maps a value of RolesClaim to viewer, operator or admin; a
	// person with several gets the strongest. An operators-table row for
	// the person's email wins over the claim.
	RoleMap map[string]string `yaml:"role_map"`
	// SessionTTL is how long a session lives at most (default 12h).
	SessionTTL Duration `yaml:"session_ttl"`
	// IdleTimeout ends a session unused this long (default 1h).
	IdleTimeout Duration `yaml:"idle_timeout"`
}
