package httpapi

import (
	"net/http"

	"github.com/notifyd/notifyd/channels/tracking"
	"github.com/notifyd/notifyd/stores"
)

// pixel is a transparent 1×1 GIF.
var pixel = []byte("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")

// trackOpen is GET /t/o/{token}, the open pixel of a tracked email: it
// records an `opened` event on the token's delivery and answers the GIF.
// A token that does not verify is a 404 and records nothing.
func (s *Server) trackOpen(w http.ResponseWriter, r *http.Request) error {
	l, err := s.trackingLink(r, tracking.Open)
	if err != nil {
		return err
	}
	s.recordTracked(r, l, "")
	h := w.Header()
	h.Set("Content-Type", "image/gif")
	h.Set("Cache-Control", "no-store, private")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(pixel)
	}
	return nil
}

// trackClick is GET /t/c/{token}, a tracked link: it records a `clicked`
// event with the URL on the token's delivery and redirects (302) to the
// URL the token signed, and to no other: a token that does not verify is a
// 404 and redirects nowhere.
func (s *Server) trackClick(w http.ResponseWriter, r *http.Request) error {
	l, err := s.trackingLink(r, tracking.Click)
	if err != nil {
		return err
	}
	s.recordTracked(r, l, l.URL)
	h := w.Header()
	h.Set("Cache-Control", "no-store, private")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Location", l.URL)
	w.WriteHeader(http.StatusFound)
	return nil
}

func (s *Server) trackingLink(r *http.Request, kind string) (tracking.Link, error) {
	notFound := notFoundError("this link is not valid")
	if s.track == nil {
		return tracking.Link{}, notFound
	}
	l, ok := s.track.Verify(r.PathValue("token"), kind)
	if !ok {
		return tracking.Link{}, notFound
	}
	return l, nil
}

// recordTracked writes the open or click of l as an event of its delivery
// (source notifyd), flagged machine when it looks like a privacy proxy's or
// a link scanner's. It stores neither the address nor the User-Agent of
// the request. A failure is logged: the person still gets the image or the
// page they asked for.
func (s *Server) recordTracked(r *http.Request, l tracking.Link, detail string) {
	now := s.clock()
	machine := tracking.Machine(l, now, r.Method, r.UserAgent())
	typ := "opened"
	if l.Kind == tracking.Click {
		typ = "clicked"
	}
	_, err := stores.RecordProviderEvents(r.Context(), s.pool, []stores.ProviderEvent{{
		Source: "notifyd", Key: tracking.EventKey(l, machine), Type: typ, At: now,
		DeliveryID: l.Delivery, Detail: detail, Machine: machine,
	}}, now)
	if err != nil {
		s.logger.ErrorContext(r.Context(), "record tracked "+typ, "delivery", l.Delivery, "error", err)
	}
}
