package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// maxPushEndpoint is the longest endpoint URL a subscription may have.
const maxPushEndpoint = 2048

// pushSubscriptionRequest is the body of POST /v1/push-subscriptions: the
// browser's PushSubscription as its toJSON() gives it. expirationTime is
// accepted and ignored (push services say when a subscription ends by
// answering 404 or 410).
type pushSubscriptionRequest struct {
	Endpoint       *string         `json:"endpoint"`
	ExpirationTime json.RawMessage `json:"expirationTime"`
	Keys           *struct {
		P256dh *string `json:"p256dh"`
		Auth   *string `json:"auth"`
	} `json:"keys"`
}

// pushSubscriptionJSON is a subscription as GET /v1/push-subscriptions
// lists it: without its keys, which only the push channel needs.
type pushSubscriptionJSON struct {
	ID       string `json:"id"`
	Endpoint string `json:"endpoint"`
	// Tenant is the tenant the subscription was registered under (the
	// token's tenant claim): it gets only that tenant's notifications. Null:
	// registered without a claim, it gets every notification.
	Tenant        *string    `json:"tenant"`
	CreatedAt     time.Time  `json:"created_at"`
	LastSuccessAt *time.Time `json:"last_success_at"`
	Failures      int        `json:"failures"`
}

// pushConfigured is the 404 of every push subscription route when web push
// is not configured.
func (s *Server) pushConfigured() error {
	if s.push == nil {
		return notFoundError("web push is not configured (no channels.web_push)")
	}
	return nil
}

// createPushSubscription is POST /v1/push-subscriptions: 201 {"id"} for a new
// subscription, 200 {"id"} when the recipient had registered the endpoint
// under the same tenant already (its keys are replaced). Nothing is written
// unless the endpoint and both keys are valid. A token with a tenant claim
// registers the subscription under its tenant: it is then pushed only that
// tenant's notifications (the wall between tenants is at send time too).
func (s *Server) createPushSubscription(w http.ResponseWriter, r *http.Request, recipient string) error {
	if err := s.pushConfigured(); err != nil {
		return err
	}
	var req pushSubscriptionRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	switch {
	case req.Endpoint == nil || *req.Endpoint == "":
		return invalidField("endpoint", "is required")
	case len(*req.Endpoint) > maxPushEndpoint:
		return invalidField("endpoint", "longer than 2048 bytes")
	case req.Keys == nil:
		return invalidField("keys", "is required ({\"p256dh\", \"auth\"})")
	}
	if err := s.push.CheckEndpoint(*req.Endpoint); err != nil {
		return invalidField("endpoint", err.Error())
	}
	p256dh, auth := text(req.Keys.P256dh), text(req.Keys.Auth)
	if field, err := s.push.CheckKeys(p256dh, auth); err != nil {
		return invalidField("keys."+field, err.Error())
	}
	tenant, _ := confinedTenant(r)
	id, created, err := stores.PutPushSubscription(r.Context(), s.pool, recipient, tenant, *req.Endpoint, p256dh, auth)
	if errors.Is(err, stores.ErrTooManyPushSubscriptions) {
		return invalidField("endpoint", err.Error()+"; delete one first")
	}
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	wire.WriteJSON(w, status, map[string]string{"id": id})
	return nil
}

// listPushSubscriptions is GET /v1/push-subscriptions: the recipient's
// subscriptions, oldest first; a token with a tenant claim lists only those
// registered under its tenant.
func (s *Server) listPushSubscriptions(w http.ResponseWriter, r *http.Request, recipient string) error {
	if err := s.pushConfigured(); err != nil {
		return err
	}
	tenant, _ := confinedTenant(r)
	subs, err := stores.ListPushSubscriptions(r.Context(), s.pool, recipient, tenant)
	if err != nil {
		return err
	}
	out := make([]pushSubscriptionJSON, len(subs))
	for i, sub := range subs {
		out[i] = pushSubscriptionJSON{ID: sub.ID, Endpoint: sub.Endpoint, Tenant: nonEmpty(sub.Tenant), CreatedAt: sub.CreatedAt,
			LastSuccessAt: sub.LastSuccessAt, Failures: sub.Failures}
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"subscriptions": out})
	return nil
}

// deletePushSubscription is DELETE /v1/push-subscriptions/{id}: 204, or 404
// when the recipient has no subscription with that id (for a token with a
// tenant claim: none registered under its tenant).
func (s *Server) deletePushSubscription(w http.ResponseWriter, r *http.Request, recipient string) error {
	if err := s.pushConfigured(); err != nil {
		return err
	}
	id := r.PathValue("id")
	tenant, _ := confinedTenant(r)
	err := stores.DeletePushSubscription(r.Context(), s.pool, recipient, tenant, id)
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no push subscription %q", id)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// vapidKey is GET /v1/push-subscriptions/vapid-key: {"public_key"}, the
// applicationServerKey a browser subscribes with.
func (s *Server) vapidKey(w http.ResponseWriter, _ *http.Request, _ string) error {
	if err := s.pushConfigured(); err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, map[string]string{"public_key": s.push.VAPIDPublicKey()})
	return nil
}

// notVAPIDKey answers DELETE /v1/push-subscriptions/vapid-key as the mux
// answers a method a route does not have, rather than reading vapid-key as
// a subscription id.
func notVAPIDKey(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "vapid-key" {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Allow", "GET, HEAD")
		wire.WriteError(w, r, errorf(http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed,
			"%s is not allowed on %s; allowed: GET, HEAD", r.Method, r.URL.Path))
	})
}
