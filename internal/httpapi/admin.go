package httpapi

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// The operator's endpoints: what the console at /admin/ reads and does, each
// usable by a script with the admin token as well.

// Error codes of the operator's endpoints.
const (
	// CodeNotRetryable (409): the delivery is in a status an operator cannot
	// re-drive (sent, in flight, cancelled, skipped, a digest row).
	CodeNotRetryable = "not_retryable"
	// CodeForbidden (403): a state-changing admin request a browser sent from
	// another site (see sameOrigin).
	CodeForbidden = "forbidden"
)

// adminState is what the operator's endpoints open lazily: the channels a
// preview renders with.
type adminState struct {
	previewOnce sync.Once
	preview     *channels.Set
	previewErr  error
}

func (s *Server) adminState() *adminState { return &s.adminLazy }

// sameOrigin refuses a state-changing request (POST, PUT, DELETE) that a
// browser sent from another site, with 403 forbidden. The admin endpoints
// take the admin token in the Authorization header only, which a browser
// never attaches by itself, so a forged cross-site request cannot carry it:
// this check is defence in depth for the console, which keeps the token in
// the page. Requests without browser headers (Sec-Fetch-Site, Origin: curl,
// SDKs, scripts) pass, and so do the origins in http.allowed_origins (a
// browser app the operator allowed to call the API).
func (s *Server) sameOrigin(h http.Handler) http.Handler {
	allowed := s.cfg.HTTP.AllowedOrigins
	if slices.Contains(allowed, "*") {
		return h
	}
	p := http.NewCrossOriginProtection()
	for _, o := range allowed {
		_ = p.AddTrustedOrigin(o) // validated by config
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := p.Check(r); err != nil {
			wire.WriteError(w, r, errorf(http.StatusForbidden, CodeForbidden,
				"%s %s from another site refused: the admin API takes state-changing requests from scripts or from its own console only", r.Method, r.URL.Path))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// listNotifications is GET /v1/notifications: newest first, filtered, in
// keyset pages.
func (s *Server) listNotifications(w http.ResponseWriter, r *http.Request) error {
	q, err := strictQuery(r, []string{"notifier", "key", "recipient", "status", "tenant", "before", "after", "cursor", "limit"}, nil)
	if err != nil {
		return err
	}
	f := stores.NotificationFilter{Notifier: q.Get("notifier"), Key: q.Get("key"), Recipient: q.Get("recipient"),
		Status: q.Get("status"), Cursor: q.Get("cursor")}
	// A tenant key lists its own tenant's notifications only.
	if f.Tenant, err = requestTenant(r, q); err != nil {
		return err
	}
	if f.Status != "" && !slices.Contains(notificationStatuses, notifytype.NotificationStatus(f.Status)) {
		return fieldError("status", "unknown notification status %s (want scheduled, pending, fanned_out, cancelled or rejected)", quote(f.Status))
	}
	if f.Before, err = queryTime(q, "before"); err != nil {
		return err
	}
	if f.After, err = queryTime(q, "after"); err != nil {
		return err
	}
	if f.Cursor != "" && !uuidv7.Valid(f.Cursor) {
		return badCursor()
	}
	if f.Limit, err = queryLimit(q, 50, 200); err != nil {
		return err
	}
	page, err := stores.ListNotifications(r.Context(), s.read(), f)
	if err != nil {
		return err
	}
	ids := make([]string, len(page.Items))
	for i, n := range page.Items {
		ids[i] = n.ID
	}
	// One grouped statement for the page, not one per row.
	counts, err := stores.NotificationCounts(r.Context(), s.read(), ids, s.reg.Inbox())
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, notificationPageWire(page, counts))
	return nil
}

// notificationStatuses are the statuses the notifications list filters by.
var notificationStatuses = []notifytype.NotificationStatus{notifytype.NotificationScheduled, notifytype.NotificationPending,
	notifytype.NotificationFannedOut, notifytype.NotificationCancelled, notifytype.NotificationRejected}

// getDelivery is GET /v1/deliveries/{id}: one ledger row with its failed
// attempts.
func (s *Server) getDelivery(w http.ResponseWriter, r *http.Request) error {
	if _, err := strictQuery(r, nil, nil); err != nil {
		return err
	}
	id := r.PathValue("id")
	d, err := readByID(r.Context(), s, id, stores.GetDelivery)
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no delivery %q (an in-app delivery is its inbox item and has no ledger row)", id)
	}
	if err != nil {
		return err
	}
	if err := inTenant(r, d.Tenant, "delivery "+id); err != nil {
		return err
	}
	out := deliveryDetailWire(d)
	if s.ops != nil {
		c, err := s.ops.DeliveryCircuit(r.Context(), id)
		if err != nil && !errors.Is(err, stores.ErrNotFound) {
			return err
		}
		out.Circuit = circuitWire(c)
	}
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}

// retryDelivery is POST /v1/deliveries/{id}/retry: the delivery is due now,
// with a send job, in one transaction; 202 with the delivery as it now is.
// A delivery whose target's circuit breaker is open is refused with 409
// circuit_open (sent now, it would only be parked again) unless the body
// says {"close_circuit": true}: the breaker is closed first.
func (s *Server) retryDelivery(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if s.ops == nil {
		return errorf(http.StatusServiceUnavailable, wire.CodeNotReady, "retries are run by the daemon, and this API has none")
	}
	if _, err := strictQuery(r, nil, nil); err != nil {
		return err
	}
	var req retryRequest
	if err := s.DecodeJSON(w, r, &req, true); err != nil {
		return err
	}
	if err := s.deliveryInTenant(r, id); err != nil {
		return err
	}
	retry := s.ops.RetryDelivery
	if req.CloseCircuit {
		retry = s.ops.CloseCircuitAndRetry
	}
	status, err := retry(s.audit(r, AuditDeliveryRetry, id, map[string]bool{"close_circuit": req.CloseCircuit}), id)
	var open *Circuit
	switch {
	case errors.Is(err, stores.ErrNotFound):
		return notFoundError("no delivery %q", id)
	case errors.Is(err, stores.ErrNotRetryable):
		return errorf(http.StatusConflict, CodeNotRetryable,
			"delivery %s is %s: only %v deliveries can be retried", id, status, stores.RedrivableStatuses)
	case errors.As(err, &open):
		return circuitError(open)
	case err != nil:
		return err
	}
	d, err := stores.GetDelivery(r.Context(), s.pool, id)
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusAccepted, deliveryDetailWire(d))
	return nil
}

// recipientDeliveries is GET /v1/recipients/{id}/deliveries: the recipient's
// latest ledger rows.
func (s *Server) recipientDeliveries(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkPathText("id", id); err != nil {
		return err
	}
	q, err := strictQuery(r, []string{"limit"}, nil)
	if err != nil {
		return err
	}
	limit, err := queryLimit(q, 20, 200)
	if err != nil {
		return err
	}
	ds, err := stores.RecipientDeliveries(r.Context(), s.read(), id, limit)
	if err != nil {
		return err
	}
	out := recipientDeliveriesJSON{Deliveries: make([]deliveryDetailJSON, len(ds))}
	for i := range ds {
		out.Deliveries[i] = deliveryDetailWire(&ds[i])
	}
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}

// listNotifiers is GET /v1/notifiers: the configured notifiers and their
// channels (what the console's filters and template preview offer), and the
// registered channels with the profile field each one sends to (where the
// console looks for a recipient's suppressed addresses).
func (s *Server) listNotifiers(w http.ResponseWriter, r *http.Request) error {
	if _, err := strictQuery(r, nil, nil); err != nil {
		return err
	}
	out := notifiersJSON{Notifiers: []notifierJSON{}, Channels: []channelJSON{}}
	for _, p := range s.reg.Plugins() {
		out.Channels = append(out.Channels, channelJSON{Name: p.Name, Address: p.Address, Inbox: p.Inbox, Bulk: p.Bulk})
	}
	for _, name := range s.cfg.NotifierNames() {
		nf, _ := s.cfg.Notifier(name)
		n := notifierJSON{Name: name, Category: nf.Category, Required: nf.Required, Channels: []string{}}
		for _, c := range slices.Sorted(maps.Keys(nf.Channels)) {
			if _, ok := s.reg.Lookup(c); ok {
				n.Channels = append(n.Channels, c)
			}
		}
		n.ParamsSchema = nf.Params
		n.Example = nf.ExampleParams()
		if n.Example == nil {
			n.Example = map[string]any{}
		}
		out.Notifiers = append(out.Notifiers, n)
	}
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}

// previewTemplate is GET /v1/notifiers/{notifier}/preview/{channel}: the
// message the channel would send for the notifier, rendered with its example
// params (or ?params=, a JSON object) for a sample recipient, as `notifyd
// preview` prints it. Nothing is sent or written.
func (s *Server) previewTemplate(w http.ResponseWriter, r *http.Request) error {
	notifier, channel := r.PathValue("notifier"), r.PathValue("channel")
	nf, ok := s.cfg.Notifier(notifier)
	if !ok {
		return errorf(http.StatusNotFound, wire.CodeUnknownNotifier, "unknown notifier %q", notifier)
	}
	if !channels.Uses(nf, channel) {
		return notFoundError("notifier %q has no %q channel", notifier, channel)
	}
	q, err := strictQuery(r, []string{"params", "locale", "tenant"}, map[string]int{"params": int(s.maxBody)})
	if err != nil {
		return err
	}
	// ?tenant= renders in that tenant's brand (.Tenant); without it, for a
	// notification without a tenant.
	var tenant *notifytype.Tenant
	if id := q.Get("tenant"); id != "" {
		t, err := stores.GetTenant(r.Context(), s.read(), id)
		if errors.Is(err, stores.ErrNotFound) {
			return fieldError("tenant", "no tenant %q", id)
		}
		if err != nil {
			return err
		}
		if tenant, err = t.Template(); err != nil {
			return err
		}
	}
	params := nf.ExampleParams()
	if raw := q.Get("params"); raw != "" {
		params = map[string]any{}
		if err := json.Unmarshal([]byte(raw), &params); err != nil {
			return fieldError("params", "want a JSON object: %v", err)
		}
	}
	if params == nil {
		params = map[string]any{}
	}
	if err := nf.ValidateParams(params); err != nil {
		return sendError(err)
	}
	pv, err := s.previewer(channel)
	if err != nil {
		return err
	}
	parts, err := pv.Preview(notifier, s.cfg.Localize(notifytype.TemplateParams(params, tenant), q.Get("locale"), ""), channels.Recipient{ID: "preview", Name: "Ada Lovelace",
		Email: "ada@example.test", Locale: q.Get("locale")})
	if err != nil {
		return errorf(http.StatusUnprocessableEntity, wire.CodeInvalidParams, "render %s on %s: %v", notifier, channel, err)
	}
	out := previewJSON{Notifier: notifier, Channel: channel, Params: params, Parts: make([]partJSON, len(parts))}
	for i, p := range parts {
		out.Parts[i] = partJSON{Name: p.Name, Value: p.Value}
	}
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}
