package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/stores"
)

// The operator's actions: what the console, the HTTP API's admin routes and
// the CLI (`notifyd retry`, `notifyd deliveries`) share. They live here, on
// the daemon's one River client, the way river.Client owns its job
// operations; a CLI that does not run the daemon opens a Server for them
// with Open.

// ErrNotFound is returned by the operations when the notification or
// delivery they name does not exist.
var ErrNotFound = errors.New("not found")

// ErrNotRetryable is returned by RetryDelivery for a delivery in a status an
// operator cannot re-drive (sent, in flight, cancelled, skipped, a digest
// row): only RedrivableStatuses can be.
var ErrNotRetryable = errors.New("not retryable")

// RedrivableStatuses are the delivery statuses RetryDelivery and Redrive
// re-drive.
var RedrivableStatuses = stores.RedrivableStatuses

// Open connects to cfg's database for the operator's commands: the pool, the
// registered channels and a River client that enqueues but runs no workers.
// It refuses a database with pending migrations, and writes nothing (the
// catalog is not published). It serves nothing: Run is not for it. Close
// releases it. A nil logger discards.
func Open(ctx context.Context, cfg *config.Config, logger *slog.Logger) (_ *Server, err error) {
	if cfg == nil {
		return nil, errors.New("server: a config is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, logger: logger, opts: Options{Config: cfg, Logger: logger}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.registry, err = builtin.Registry(); err != nil {
		return nil, err
	}
	if err := s.openPool(ctx); err != nil {
		return nil, err
	}
	if err := s.checkMigrations(ctx); err != nil {
		return nil, err
	}
	// Insert-only: the daemon's workers run what it enqueues.
	if s.river, err = river.NewClient(riverpgxv5.New(s.pool), &river.Config{Schema: cfg.Database.SearchSchema()}); err != nil {
		return nil, err
	}
	s.client, _ = notifyd.NewClient(s.pool, notifyd.ClientConfig{Config: cfg, Logger: logger})
	return s, nil
}

// RetryDelivery makes one failed or expired delivery due now and enqueues
// its send job, in one transaction, and returns the status it had. A
// delivery that does not exist is ErrNotFound; one in a status that cannot
// be re-driven is ErrNotRetryable (with that status returned). A delivery
// whose target's circuit breaker is open in this process (the target did not
// answer several times in a row, and its deliveries are parked) is a
// *CircuitOpenError and is left as it is: sent now, it would only be parked
// again. CloseCircuitAndRetry closes the breaker first.
func (s *Server) RetryDelivery(ctx context.Context, id string) (status string, err error) {
	c, err := s.DeliveryCircuit(ctx, id)
	if err != nil {
		return "", err
	}
	if c != nil {
		return "", c
	}
	status, err = jobs.RetryDelivery(ctx, s.pool, s.river, id, s.now())
	return status, operationError(fmt.Sprintf("delivery %s", id), err)
}

// CloseCircuitAndRetry closes the circuit breaker of the delivery's target
// in this process, as an answer from the target would (other replicas keep
// theirs until their own next probe), then retries the delivery as
// RetryDelivery does.
func (s *Server) CloseCircuitAndRetry(ctx context.Context, id string) (status string, err error) {
	if s.deps != nil {
		target, _, err := s.deps.DeliveryTarget(ctx, id)
		if err != nil {
			return "", operationError(fmt.Sprintf("delivery %s", id), err)
		}
		if s.deps.CloseCircuit(target) {
			s.logger.InfoContext(ctx, "circuit closed by an operator", "target", target, "delivery_id", id)
		}
	}
	status, err = jobs.RetryDelivery(ctx, s.pool, s.river, id, s.now())
	return status, operationError(fmt.Sprintf("delivery %s", id), err)
}

// CircuitOpenError says a delivery's target is paused: it did not answer
// Failures times in a row, and this process parks its deliveries until
// Until.
type CircuitOpenError struct {
	// Target names the destination: the channel, with the host or notifier
	// when the channel has several ("webhook billing.acme.test").
	Target    string
	Failures  int
	Until     time.Time
	LastError string
}

// Error says what the breaker does.
func (e *CircuitOpenError) Error() string {
	return fmt.Sprintf("the target %s is paused until %s after %d failures in a row (last error: %s)",
		e.Target, e.Until.UTC().Format(time.RFC3339), e.Failures, e.LastError)
}

// DeliveryCircuit returns the open circuit breaker of the target of a
// delivery that could be retried (see RetryDelivery), or nil when the
// breaker is closed in this process, the delivery is in a status that cannot
// be retried, or the Server runs no send workers (Open). An unknown delivery
// is ErrNotFound.
func (s *Server) DeliveryCircuit(ctx context.Context, id string) (*CircuitOpenError, error) {
	if s.deps == nil {
		return nil, nil
	}
	target, status, err := s.deps.DeliveryTarget(ctx, id)
	if err != nil {
		return nil, operationError(fmt.Sprintf("delivery %s", id), err)
	}
	if !slices.Contains(RedrivableStatuses, status) {
		return nil, nil
	}
	c := s.deps.OpenCircuit(target)
	if c == nil {
		return nil, nil
	}
	return &CircuitOpenError{Target: c.Target, Failures: c.Failures, Until: c.OpenUntil, LastError: c.LastError}, nil
}

// Redrive re-drives up to limit deliveries in the given statuses (each one
// of RedrivableStatuses) updated since then: each becomes due now with a send
// job, in one transaction. It returns how many it re-drove. It is
// RetryDeliveries with a filter of statuses and a start time.
func (s *Server) Redrive(ctx context.Context, statuses []string, since time.Time, limit int) (int, error) {
	_, n, err := s.RetryDeliveries(ctx, DeliveryFilter{Statuses: statuses, Since: since}, limit)
	return n, err
}

// DeliveryFilter selects deliveries across notifications (GET /v1/deliveries,
// the console's deliveries view). Zero fields do not filter.
type DeliveryFilter struct {
	// Statuses are the statuses wanted; empty means every status (for
	// RetryDeliveries: every one of RedrivableStatuses).
	Statuses []string
	Channel  string
	Notifier string
	// Recipient is a recipient id; bulk deliveries never match it.
	Recipient string
	// Since and Until bound the time of a delivery's last change:
	// Since <= updated_at < Until.
	Since, Until time.Time
}

func (f DeliveryFilter) store() stores.DeliveryFilter {
	return stores.DeliveryFilter{Statuses: f.Statuses, Channel: f.Channel, Notifier: f.Notifier, Recipient: f.Recipient,
		Since: f.Since, Until: f.Until}
}

// RetryDeliveries re-drives the deliveries matching f, at most limit of them
// (oldest first within each status and channel): each becomes failed and due
// now, with its send job, in one transaction, as RetryDelivery does for one.
// f.Statuses may name only RedrivableStatuses (another is ErrNotRetryable);
// empty means all of them. It returns how many matched (counted up to
// 100,000) and how many it re-drove: a match held by a send job at that
// moment, or over the limit, is not re-driven.
func (s *Server) RetryDeliveries(ctx context.Context, f DeliveryFilter, limit int) (matched, retried int, err error) {
	matched, retried, err = jobs.Redrive(ctx, s.pool, s.river, f.store(), s.now(), limit, s.cfg.Queues.SendBatch)
	return matched, retried, operationError("re-drive deliveries", err)
}

// Ledger is a notification and what became of it, as `notifyd deliveries`
// prints it and GET /v1/notifications/{id} answers it.
type Ledger struct {
	ID       string
	Notifier string
	Key      string
	Status   string
	// Error says why a rejected notification was rejected; "" otherwise.
	Error string
	// Deliveries are its ledger rows ordered by recipient (bulk ones first),
	// then channel; the inbox items among them as deliveries of the inbox
	// channel.
	Deliveries []LedgerEntry
}

// LedgerEntry is one delivery of a Ledger.
type LedgerEntry struct {
	ID string
	// Recipient is "" for a bulk delivery (one message for the audience).
	Recipient string
	Channel   string
	Reason    string
	Mode      string
	Status    string
	Attempts  int
	// LastError is why the last attempt failed; "" when none did.
	LastError string
	// Provider is who answered the last attempt (the channel's report); ""
	// when the channel did not say.
	Provider  string
	UpdatedAt time.Time
}

// Ledger reads the notification with id and up to limit of its deliveries.
// An unknown or malformed id is ErrNotFound.
func (s *Server) Ledger(ctx context.Context, id string, limit int) (*Ledger, error) {
	n, err := stores.GetNotification(ctx, s.pool, id, limit, s.registry.Inbox())
	if err != nil {
		return nil, operationError("notification "+id, err)
	}
	l := &Ledger{ID: n.ID, Notifier: n.Notifier, Key: n.Key, Status: n.Status, Error: deref(n.Error),
		Deliveries: make([]LedgerEntry, len(n.Deliveries))}
	for i, d := range n.Deliveries {
		l.Deliveries[i] = LedgerEntry{ID: d.ID, Recipient: deref(d.Recipient), Channel: d.Channel, Reason: d.Reason,
			Mode: d.Mode, Status: d.Status, Attempts: d.Attempts, LastError: deref(d.LastError),
			Provider: deref(d.Provider), UpdatedAt: d.UpdatedAt}
	}
	return l, nil
}

// NotificationID returns the id of the notification (notifier, key) sent
// for tenant ("" for none: keys are per tenant), or ErrNotFound.
func (s *Server) NotificationID(ctx context.Context, tenant, notifier, key string) (string, error) {
	id, err := stores.NotificationID(ctx, s.pool, tenant, notifier, key)
	return id, operationError(fmt.Sprintf("notification %s/%s", notifier, key), err)
}

// Cancel cancels the notification (notifier, key) sent for tenant ("" for
// none: keys are per tenant) as notify_cancel does and returns how many
// deliveries and inbox items it withdrew; a notification that was never sent
// is ErrNotFound.
func (s *Server) Cancel(ctx context.Context, tenant, notifier, key string) (int, error) {
	n, err := s.client.CancelTenant(ctx, tenant, notifier, key)
	if errors.Is(err, notifyd.ErrNotFound) {
		return 0, fmt.Errorf("notification %s/%s: %w", notifier, key, ErrNotFound)
	}
	return n, err
}

// operationError names what an operation was about and maps the stores'
// sentinels to this package's, keeping the cause in the chain.
func operationError(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, stores.ErrNotFound):
		return fmt.Errorf("%s: %w (%w)", what, ErrNotFound, err)
	case errors.Is(err, stores.ErrNotRetryable):
		return fmt.Errorf("%s: %w (%w)", what, ErrNotRetryable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (s *Server) now() time.Time {
	if s.opts.Clock != nil {
		return s.opts.Clock()
	}
	return time.Now()
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// apiOperations are the operations as the HTTP API takes them
// (httpapi.Operations), with its internal types.
type apiOperations struct{ s *Server }

func (o apiOperations) RetryDelivery(ctx context.Context, id string) (string, error) {
	status, err := o.s.RetryDelivery(ctx, id)
	return status, apiCircuitError(err)
}

func (o apiOperations) CloseCircuitAndRetry(ctx context.Context, id string) (string, error) {
	return o.s.CloseCircuitAndRetry(ctx, id)
}

func (o apiOperations) DeliveryCircuit(ctx context.Context, id string) (*httpapi.Circuit, error) {
	c, err := o.s.DeliveryCircuit(ctx, id)
	if c == nil || err != nil {
		return nil, err
	}
	return apiCircuit(c), nil
}

func (o apiOperations) RetryDeliveries(ctx context.Context, f stores.DeliveryFilter, limit int) (int, int, error) {
	return o.s.RetryDeliveries(ctx, DeliveryFilter{Statuses: f.Statuses, Channel: f.Channel, Notifier: f.Notifier,
		Recipient: f.Recipient, Since: f.Since, Until: f.Until}, limit)
}

func apiCircuit(c *CircuitOpenError) *httpapi.Circuit {
	return &httpapi.Circuit{Target: c.Target, Failures: c.Failures, Until: c.Until, LastError: c.LastError}
}

func apiCircuitError(err error) error {
	var c *CircuitOpenError
	if errors.As(err, &c) {
		return apiCircuit(c)
	}
	return err
}
