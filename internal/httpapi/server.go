package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/notifyd/notifyd/channels"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/tracking"
	"github.com/notifyd/notifyd/channels/unsubscribe"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/internal/providerevents"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/web"
)

// Options configure a Server.
type Options struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Config supplies http.admin_token, http.token_secret, http.max_body,
	// database.schema and the notifiers. Nil means config.Default().
	Config *config.Config
	// Client enqueues and cancels notifications. Nil means a client built on
	// Pool with ClientConfig{Config: Config}; a client given here must be built
	// with the same Config, or unknown notifiers and bad params are only caught
	// at fan-out.
	Client *notifyd.Client
	// Operations are the operator's actions the admin routes share with the
	// console and the CLI (retry), run by the daemon on its River client.
	// Nil: those routes answer 503 not_ready.
	Operations Operations
	// Logger receives one line per request. Nil discards.
	Logger *slog.Logger
	// Clock is the time written into read_at, seen_at and archived_at, and
	// the time recipient tokens' expiry is checked against. Nil means
	// time.Now.
	Clock func() time.Time
	// Extra are more routes, mounted as they are by pattern
	// ("GET /v1/inbox/stream", "GET /metrics"). They do their own
	// authorisation (see Server.Recipient and Server.RequireAdmin). A pattern
	// that conflicts with a built-in route panics in New.
	Extra map[string]http.Handler
	// AdminExtra are more routes mounted behind the admin token ("/riverui/").
	AdminExtra map[string]http.Handler
	// Registry is the daemon's channels: preference rules and the effective
	// preferences are checked and resolved against it. Required.
	Registry *channels.Registry
	// Metrics counts the requests refused by a limit. Nil counts nothing.
	Metrics *metrics.Metrics
	// WebhookSecret returns the secret recipient's webhooks are signed with
	// (the webhook channel's RecipientSecret): shown to the admin in the
	// profile and to the recipient at GET /v1/webhook-secret. Nil means the
	// webhook channel is not configured: the profile's webhook_secret is
	// null and GET /v1/webhook-secret is a 404.
	WebhookSecret func(recipient string) string
	// Queues are the daemon's River queues, whose depth GET /v1/overview
	// reports; nil reports none.
	Queues []string
	// Push is the opened web push channel: it checks subscription
	// endpoints and gives browsers the VAPID key. Nil means web push is not
	// configured: the push subscription routes answer 404.
	Push channels.PushService
	// ProviderClient fetches SNS signing certificates and confirms SNS
	// subscriptions for POST /v1/providers/ses/events. Nil: a client with a
	// 10s timeout.
	ProviderClient *http.Client
	// Reads routes the read-only queries (inbox pages and counts,
	// preferences, recipients, the ledger) to a read replica
	// (database.read_url) while it is close enough behind. Nil: every query
	// runs on Pool.
	Reads ReadRouter
}

// ReadRouter says where a read-only query goes now (see Options.Reads).
type ReadRouter interface {
	// ReadDB is the standby while it serves reads, the primary otherwise.
	ReadDB() stores.DB
	// ReadStatus is the standby's latest check, for /readyz.
	ReadStatus() ReadStatus
}

// ReadStatus is a read replica's state as /readyz reports it.
type ReadStatus struct {
	// Configured is true when database.read_url is set.
	Configured bool
	// Reads is where read-only queries go: "standby" or "primary".
	Reads string
	// Lag is how far the standby was behind the primary at CheckedAt.
	Lag       time.Duration
	CheckedAt time.Time
	// Error says why reads are on the primary: the standby is down, too far
	// behind, or not a standby.
	Error string
}

// Operations are the operator's actions that enqueue work, which the daemon
// (server.Server) runs on its one River client.
type Operations interface {
	// RetryDelivery makes a failed or expired delivery due now with a send
	// job and returns the status it had; an unknown delivery wraps
	// stores.ErrNotFound, one that cannot be retried
	// stores.ErrNotRetryable, and one whose target's circuit breaker is
	// open is a *Circuit (nothing changed).
	RetryDelivery(ctx context.Context, id string) (status string, err error)
	// CloseCircuitAndRetry closes the breaker of the delivery's target,
	// then retries it as RetryDelivery does.
	CloseCircuitAndRetry(ctx context.Context, id string) (status string, err error)
	// DeliveryCircuit returns the open breaker of the target of a delivery
	// that could be retried, or nil.
	DeliveryCircuit(ctx context.Context, id string) (*Circuit, error)
	// RetryDeliveries re-drives the deliveries matching f (re-drivable
	// statuses only, wrapping stores.ErrNotRetryable otherwise), at most
	// limit, and says how many matched and how many it re-drove.
	RetryDeliveries(ctx context.Context, f stores.DeliveryFilter, limit int) (matched, retried int, err error)
}

// Circuit is an open circuit breaker: the delivery's target did not answer
// Failures times in a row, and its deliveries are parked until Until. It is
// the error RetryDelivery returns for such a delivery.
type Circuit struct {
	Target    string
	Failures  int
	Until     time.Time
	LastError string
}

func (c *Circuit) Error() string {
	return fmt.Sprintf("the target %s is paused until %s after %d failures in a row (last error: %s)",
		c.Target, c.Until.UTC().Format(time.RFC3339), c.Failures, c.LastError)
}

// Server is the HTTP API. Create it with New; it is safe for concurrent use.
type Server struct {
	pool    *pgxpool.Pool
	cfg     *config.Config
	reg     *channels.Registry
	openapi []byte // the API document with reg's channels
	client  *notifyd.Client
	ops     Operations
	logger  *slog.Logger
	clock   func() time.Time
	maxBody int64
	schema  string
	mux     *routeMux
	handler http.Handler
	metrics *metrics.Metrics
	secret  func(recipient string) string // Options.WebhookSecret
	unsub   *unsubscribe.Signer           // nil without http.token_secret: unsubscribe links are 404s
	track   *tracking.Signer              // nil without http.token_secret: tracking links are 404s
	push    channels.PushService          // Options.Push
	reads   ReadRouter                    // Options.Reads; nil: the primary
	queues  []string                      // Options.Queues

	recipientRate *buckets // per recipient id; nil is unlimited
	adminRate     *buckets // one bucket, the admin token's; nil is unlimited
	tenantRate    tenantLimits

	adminLazy adminState // what the operator's endpoints open on first use (admin.go)

	events     *providerevents.Verifier // nil: no providers.<kind> is configured, or eventsErr
	eventsErr  error                    // providers.ses.cert_file could not be read
	sso        *sso                     // console single sign-on; nil without console.oidc
	breakGlass atomic.Int64             // when the config's admin token was last used (UnixNano); 0: never
}

// read is where a read-only query that need not see this request's own
// writes goes: the read replica while it serves reads, else the primary.
// Writes, the revocation check of tokens, and any read after a write in the
// same request use s.pool.
func (s *Server) read() stores.DB {
	if s.reads == nil {
		return s.pool
	}
	return s.reads.ReadDB()
}

// readByID reads one row by id (a notification, a delivery, a recipient) with
// get where s.read says, and again on the primary when the replica has no
// such row: one the client has just created may not have reached it yet,
// and "not found" must not be the answer to that.
func readByID[T any](ctx context.Context, s *Server, id string, get func(context.Context, stores.DB, string) (T, error)) (T, error) {
	db := s.read()
	v, err := get(ctx, db, id)
	if errors.Is(err, stores.ErrNotFound) && db != stores.DB(s.pool) {
		return get(ctx, s.pool, id)
	}
	return v, err
}

// DefaultMaxBody is the request body limit when http.max_body is not set.
const DefaultMaxBody = 1 << 20

// maxDeliveries bounds the ledger GET /v1/notifications/{id} reports.
const maxDeliveries = 1000

// New builds a Server from opts. It mounts every built-in route and the
// extras; it panics only on a conflicting Extra pattern (a wiring bug).
func New(opts Options) *Server {
	s := &Server{pool: opts.Pool, cfg: opts.Config, reg: opts.Registry, client: opts.Client, ops: opts.Operations, logger: opts.Logger,
		clock: opts.Clock, metrics: opts.Metrics, secret: opts.WebhookSecret, push: opts.Push,
		reads: opts.Reads, queues: opts.Queues}
	if s.cfg == nil {
		s.cfg = config.Default()
	}
	if s.reg == nil {
		panic("httpapi: Options.Registry is required")
	}
	doc, err := openAPIFor(s.reg)
	if err != nil {
		panic("httpapi: " + err.Error()) // the embedded document is checked by its tests
	}
	s.openapi = doc
	s.unsub, _ = unsubscribe.NewSigner(s.cfg.HTTP.TokenSecret) // nil without a secret
	s.track, _ = tracking.New(s.cfg.HTTP.TokenSecret)          // nil without a secret
	if p := s.cfg.Providers; p.SES != nil || p.SendGrid != nil || p.Postmark != nil || p.Mailgun != nil || p.Twilio != nil {
		s.events, s.eventsErr = providerevents.New(providerevents.Options{Providers: p, TokenSecret: s.cfg.HTTP.TokenSecret,
			Client: opts.ProviderClient, Clock: opts.Clock})
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.client == nil {
		// NewClient never fails.
		s.client, _ = notifyd.NewClient(s.pool, notifyd.ClientConfig{Config: s.cfg, Logger: s.logger})
	}
	s.maxBody = s.cfg.HTTP.MaxBody
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBody
	}
	// The same convention as `notifyd run`: the default schema is the
	// connection's search_path.
	s.schema = s.cfg.Database.SearchSchema()
	s.recipientRate = newBuckets(s.cfg.HTTP.Rate.Recipient, s.cfg.HTTP.Rate.RecipientBurst)
	s.adminRate = newBuckets(s.cfg.HTTP.Rate.Admin, s.cfg.HTTP.Rate.AdminBurst)
	if opts.Config != nil && opts.Config.Console.OIDC != nil {
		s.sso = &sso{cfg: opts.Config.Console.OIDC}
	}

	s.mux = &routeMux{ServeMux: http.NewServeMux()}
	s.routes()
	for pattern, h := range opts.Extra {
		s.mux.Handle(pattern, h)
	}
	for pattern, h := range opts.AdminExtra {
		s.mux.Handle(pattern, AdminPage(s.RequireAdmin(s.limitAdmin(h))))
	}
	s.handler = s.logRequests(s.recoverPanics(s.cors(s.jsonMux(s.mux.ServeMux))))
	return s
}

// routeMux is the API's ServeMux, recording every pattern mounted on it
// (Routes lists them: a test walks them all).
type routeMux struct {
	*http.ServeMux
	patterns []string
}

// Handle mounts h at pattern and records the pattern.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.ServeMux.Handle(pattern, h)
	m.patterns = append(m.patterns, pattern)
}

// Routes lists the pattern of every route mounted (built-in, Extra,
// AdminExtra and Handle's), in the order they were mounted.
func (s *Server) Routes() []string { return append([]string(nil), s.mux.patterns...) }

func (s *Server) routes() {
	// Ops.
	s.mux.Handle("GET /healthz", s.public(s.healthz))
	s.mux.Handle("GET /readyz", s.public(s.readyz))
	s.mux.Handle("GET /v1/openapi.json", s.public(s.openAPI))

	// Admin.
	s.mux.Handle("POST /v1/notifications", s.tenantOrAdmin(s.sendNotification))
	s.mux.Handle("GET /v1/notifications/{id}", s.tenantOrAdmin(s.getNotification))
	s.mux.Handle("DELETE /v1/notifications/{notifier}/{key...}", s.admin(s.cancelNotification))
	s.mux.Handle("PUT /v1/recipients/{id}", s.admin(s.putRecipient))
	s.mux.Handle("GET /v1/recipients/{id}", s.admin(s.getRecipient))
	s.mux.Handle("GET /v1/recipients/{id}/inbox", s.admin(s.recipientInbox))
	s.mux.Handle("DELETE /v1/recipients/{id}", s.admin(s.eraseRecipient))
	s.mux.Handle("GET /v1/recipients/{id}/preferences", s.forRecipientOrTenant(s.getPreferences))
	s.mux.Handle("PUT /v1/recipients/{id}/preferences", s.forRecipientOrTenant(s.putPreferences))
	s.mux.Handle("GET /v1/recipients/{id}/mutes", s.forRecipient(s.listMutes))
	s.mux.Handle("PUT /v1/recipients/{id}/mutes", s.forRecipient(s.putMute))
	s.mux.Handle("DELETE /v1/recipients/{id}/mutes", s.forRecipient(s.deleteMute))
	s.mux.Handle("GET /v1/recipients/{id}/subscriptions", s.forRecipient(s.listSubscriptions))
	s.mux.Handle("GET /v1/topics/{topic}/subscribers", s.admin(s.listSubscribers))
	s.mux.Handle("PUT /v1/topics/{topic}/subscribers/{recipient}", s.admin(s.subscribe))
	s.mux.Handle("DELETE /v1/topics/{topic}/subscribers/{recipient}", s.admin(s.unsubscribe))

	// Tenants (tenants.go). A tenant key reaches only the routes above and
	// below wrapped in tenantOrAdmin, confined to its tenant.
	s.mux.Handle("GET /v1/tenants", s.admin(s.listTenants))
	s.mux.Handle("PUT /v1/tenants/{id}", s.admin(s.putTenant))
	s.mux.Handle("GET /v1/tenants/{id}", s.admin(s.getTenant))
	s.mux.Handle("DELETE /v1/tenants/{id}", s.admin(s.deleteTenant))
	s.mux.Handle("POST /v1/tenants/{id}/keys", s.admin(s.createTenantKey))
	s.mux.Handle("GET /v1/tenants/{id}/keys", s.admin(s.listTenantKeys))
	s.mux.Handle("DELETE /v1/tenants/{id}/keys/{key_id}", s.admin(s.revokeTenantKey))

	// The operator's console (web/admin) and the endpoints it reads (admin.go).
	s.mux.Handle("GET /v1/notifications", s.tenantOrAdmin(s.listNotifications))
	s.mux.Handle("DELETE /v1/notifications/{id}", s.admin(s.cancelByID))
	s.mux.Handle("GET /v1/deliveries", s.tenantOrAdmin(s.listDeliveries))
	s.mux.Handle("POST /v1/deliveries/retry", s.admin(s.retryDeliveries))
	s.mux.Handle("GET /v1/deliveries/{id}", notRetry(s.tenantOrAdmin(s.getDelivery)))
	s.mux.Handle("POST /v1/deliveries/{id}/retry", s.admin(s.retryDelivery))
	s.mux.Handle("GET /v1/deliveries/{id}/preview", s.admin(s.previewDelivery))
	s.mux.Handle("GET /v1/overview", s.admin(s.overview))
	s.mux.Handle("GET /v1/recipients/{id}/deliveries", s.admin(s.recipientDeliveries))
	s.mux.Handle("GET /v1/notifiers", s.admin(s.listNotifiers))
	s.mux.Handle("GET /v1/notifiers/{notifier}/preview/{channel}", s.admin(s.previewTemplate))
	// Team access (staff.go): who the caller is, operators and their tokens.
	s.mux.Handle("GET /v1/me", s.admin(s.me))
	s.mux.Handle("GET /v1/operators", s.admin(s.listOperators))
	s.mux.Handle("PUT /v1/operators/{id}", s.admin(s.putOperator))
	s.mux.Handle("DELETE /v1/operators/{id}", s.admin(s.deleteOperator))
	s.mux.Handle("POST /v1/operator-tokens", s.admin(s.createOperatorToken))
	s.mux.Handle("GET /v1/operator-tokens", s.admin(s.listOperatorTokens))
	s.mux.Handle("DELETE /v1/operator-tokens/{id}", s.admin(s.revokeOperatorToken))
	s.mux.Handle("GET /v1/audit", s.admin(s.listAudit))
	s.mux.Handle("GET /admin/sso/login", AdminPage(s.limitAdmin(s.public(s.ssoLogin))))
	s.mux.Handle("GET /admin/sso/callback", AdminPage(s.limitAdmin(s.public(s.ssoCallback))))
	s.mux.Handle("POST /admin/sso/logout", AdminPage(s.sameOrigin(s.limitAdmin(s.public(s.ssoLogout)))))
	s.mux.Handle("GET /admin/{file...}", AdminPage(web.Admin()))
	s.mux.Handle("GET /admin", http.RedirectHandler("/admin/", http.StatusMovedPermanently))

	// Recipient.
	s.mux.Handle("GET /v1/inbox", s.recipient(s.listInbox))
	s.mux.Handle("GET /v1/inbox/counts", s.recipient(s.inboxCounts))
	s.mux.Handle("POST /v1/inbox/read", s.recipient(s.markRead))
	s.mux.Handle("POST /v1/inbox/unread", s.recipient(s.markUnread))
	s.mux.Handle("POST /v1/inbox/seen", s.recipient(s.markSeen))
	s.mux.Handle("POST /v1/inbox/archive", s.recipient(s.archive))
	s.mux.Handle("POST /v1/inbox/{id}/clicked", s.recipient(s.inboxClicked))
	s.mux.Handle("GET /v1/preferences", s.recipient(s.getPreferences))
	s.mux.Handle("PUT /v1/preferences", s.recipient(s.putPreferences))
	s.mux.Handle("GET /v1/mutes", s.recipientUnconfined(s.listMutes, "mutes are"))
	s.mux.Handle("PUT /v1/mutes", s.recipientUnconfined(s.putMute, "mutes are"))
	s.mux.Handle("DELETE /v1/mutes", s.recipientUnconfined(s.deleteMute, "mutes are"))
	s.mux.Handle("GET /v1/subscriptions", s.recipientUnconfined(s.listSubscriptions, "topic subscriptions are"))
	s.mux.Handle("GET /v1/webhook-secret", s.recipientUnconfined(s.webhookSecret, "the webhook secret is"))

	// Deliverability: one-click unsubscribe (the link's token is the only
	// authority), the suppression list and bounce reports (admin).
	s.mux.Handle("GET /v1/unsubscribe/{token}", AdminPage(s.public(s.unsubscribePage)))
	s.mux.Handle("POST /v1/unsubscribe/{token}", AdminPage(s.public(s.unsubscribePost)))
	s.mux.Handle("GET /v1/suppressions", s.admin(s.listSuppressions))
	s.mux.Handle("PUT /v1/suppressions/{channel}/{address}", s.admin(s.putSuppression))
	s.mux.Handle("DELETE /v1/suppressions/{channel}/{address}", s.admin(s.deleteSuppression))
	// A bounce relay may hold http.bounce_token instead of the admin token.
	s.mux.Handle("POST /v1/providers/{kind}/events", s.public(s.postProviderEvents))
	// Open and click tracking: the signed token is the only authority.
	s.mux.Handle("GET /t/o/{token}", s.public(s.trackOpen))
	s.mux.Handle("GET /t/c/{token}", s.public(s.trackClick))
	s.mux.Handle("POST /v1/bounces", AdminPage(s.sameOrigin(s.requireBounce(s.limitAdmin(s.public(s.postBounce))))))
	s.mux.Handle("POST /v1/push-subscriptions", s.recipient(s.createPushSubscription))
	s.mux.Handle("GET /v1/push-subscriptions", s.recipient(s.listPushSubscriptions))
	s.mux.Handle("DELETE /v1/push-subscriptions/{id}", notVAPIDKey(s.recipient(s.deletePushSubscription)))
	s.mux.Handle("GET /v1/push-subscriptions/vapid-key", s.recipient(s.vapidKey))
	s.mux.Handle("POST /v1/devices", s.recipient(s.createDevice))
	s.mux.Handle("GET /v1/devices", s.recipient(s.listDevices))
	s.mux.Handle("DELETE /v1/devices/{id}", s.recipient(s.deleteDevice))
	s.mux.Handle("GET /v1/recipients/{id}/devices", s.forRecipient(s.listDevices))
	s.mux.Handle("GET /v1/quiet-hours", s.recipientUnconfined(s.getQuietHours, "quiet hours are"))
	s.mux.Handle("PUT /v1/quiet-hours", s.recipientUnconfined(s.putQuietHours, "quiet hours are"))
	s.mux.Handle("GET /v1/recipients/{id}/quiet-hours", s.forRecipient(s.getQuietHours))
	s.mux.Handle("PUT /v1/recipients/{id}/quiet-hours", s.forRecipient(s.putQuietHours))
}

// Handler returns the API's root handler: routing, JSON 404/405, panic
// recovery and request logging.
func (s *Server) Handler() http.Handler { return s.handler }

// Handle mounts one more route after New, for a handler that needs the
// Server (a stream that calls s.Recipient). Like Extra, it does its own
// authorisation. Call it before serving.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// handlerFunc is a handler that returns its error instead of writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// recipientFunc is a recipient endpoint: it gets the token's subject.
type recipientFunc func(w http.ResponseWriter, r *http.Request, recipient string) error

func (s *Server) public(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			wire.WriteError(w, r, err)
		}
	})
}

// admin is an admin endpoint: behind the admin token, never framed or
// cached (AdminPage), its refusals included, and refusing state-changing
// requests from other sites (sameOrigin).
func (s *Server) admin(h handlerFunc) http.Handler {
	return AdminPage(s.sameOrigin(s.RequireAdmin(s.limitAdmin(s.public(h)))))
}

// recipientUnconfined is a recipient endpoint for what belongs to the
// recipient across every tenant (what, for the refusal: "mutes are"): mutes, quiet
// hours, topic subscriptions and the webhook secret are one per recipient,
// not one per tenant, so a token with a tenant claim may neither read nor
// change them (403).
func (s *Server) recipientUnconfined(h recipientFunc, what string) http.Handler {
	return s.recipient(func(w http.ResponseWriter, r *http.Request, recipient string) error {
		if tenant, _ := confinedTenant(r); tenant != "" {
			return forbidden("%s the recipient's own across every tenant: a token confined to tenant %q "+
				"cannot reach them (use a token without a tenant claim)", what, tenant)
		}
		return h(w, r, recipient)
	})
}

func (s *Server) recipient(h recipientFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only the header: tokens in URLs end up in proxies' logs. The stream,
		// which EventSource cannot give headers, uses s.Recipient instead.
		c, err := s.recipientFromHeader(r)
		id := c.Recipient
		if err == nil {
			err = s.checkRevoked(r, c)
		}
		if err == nil {
			err = s.limitRecipient(w, id)
		}
		if err == nil {
			// A tenant claim confines every read and mark to that tenant.
			err = h(w, withAccess(r, access{tenant: c.Tenant}), id)
		}
		if err != nil {
			wire.WriteError(w, r, err)
		}
	})
}
