package httpapi

import (
	"errors"
	"io"
	"net/http"

	"github.com/notifyd/notifyd/internal/providerevents"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// providerEventsJSON is the answer of POST /v1/providers/{kind}/events.
type providerEventsJSON struct {
	// Received counts the provider's events the request carried that
	// notifyd has a word for; Ignored the others (SendGrid's processed...).
	Received int `json:"received"`
	Ignored  int `json:"ignored"`
	// Matched counts those that named a known delivery, Recorded those
	// that were new (not seen before).
	Matched  int `json:"matched"`
	Recorded int `json:"recorded"`
	// Confirmed is true when the request was an SNS subscription
	// confirmation that notifyd confirmed.
	Confirmed bool `json:"confirmed,omitempty"`
}

// postProviderEvents is POST /v1/providers/{kind}/events: a provider's own
// event webhook, verified by that provider's scheme (providers.<kind>), its
// events recorded on their deliveries in one statement. A request that does
// not verify is refused with the status its provider expects and changes
// nothing; events of unknown messages, or seen before, are answered 200 and
// change nothing (the provider would only retry them). No authentication
// but the provider's own: the route faces the internet.
func (s *Server) postProviderEvents(w http.ResponseWriter, r *http.Request) error {
	kind := r.PathValue("kind")
	if s.events == nil {
		if s.eventsErr != nil {
			s.logger.ErrorContext(r.Context(), "provider events refused: providers config", "error", s.eventsErr)
			return errorf(http.StatusInternalServerError, wire.CodeInternal, "provider events are misconfigured; the log says why")
		}
		return notFoundError("no provider %q is configured for events (providers.<kind>)", kind)
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "body over %d bytes", s.maxBody)
		}
		return badRequest("unreadable body: %v", err)
	}
	res, err := s.events.Read(r.Context(), kind, r, body)
	if errors.Is(err, providerevents.ErrNotConfigured) {
		return notFoundError("no provider %q is configured for events (providers.<kind>)", kind)
	}
	var ref *providerevents.Refusal
	if errors.As(err, &ref) {
		s.logger.WarnContext(r.Context(), "provider event refused", "provider", kind, "status", ref.Status, "reason", ref.Reason)
		code := wire.CodeForbidden
		switch {
		case ref.Status == http.StatusBadRequest:
			code = wire.CodeBadRequest
		case ref.Status == http.StatusUnauthorized:
			code = wire.CodeUnauthorized
			w.Header().Set("WWW-Authenticate", `Basic realm="notifyd provider events"`)
		case ref.Status >= 500:
			code = wire.CodeInternal
		}
		return errorf(ref.Status, code, "%s", ref.Reason)
	}
	if err != nil {
		return err
	}
	out := providerEventsJSON{Received: len(res.Events), Ignored: res.Ignored, Confirmed: res.Confirmed}
	if len(res.Events) > 0 {
		rec, err := stores.RecordProviderEvents(r.Context(), s.pool, res.Events, s.clock())
		if err != nil {
			return err
		}
		out.Matched, out.Recorded = rec.Matched, rec.Recorded
		s.logger.InfoContext(r.Context(), "provider events", "provider", kind, "received", out.Received,
			"matched", rec.Matched, "recorded", rec.Recorded, "moved", rec.Moved, "suppressed", rec.Suppressed)
	}
	wire.WriteJSON(w, http.StatusOK, out)
	return nil
}
