package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
)

// quietHoursBody is GET and PUT /v1/quiet-hours (and
// /v1/recipients/{id}/quiet-hours): the recipient's quiet hours, null for
// none, and the timezone they are read in (the profile's; "" means
// digest.timezone). PUT takes {"quiet_hours": {...} | null}; timezone is
// read-only here (it is the profile's, written with PUT /v1/recipients/{id}).
type quietHoursBody struct {
	QuietHours *notifytype.QuietHours `json:"quiet_hours"`
	Timezone   string                 `json:"timezone"`
}

type quietHoursRequest struct {
	QuietHours json.RawMessage `json:"quiet_hours"`
	Timezone   json.RawMessage `json:"timezone"` // accepted and ignored, so a GET can be written back
}

func (s *Server) getQuietHours(w http.ResponseWriter, r *http.Request, recipient string) error {
	raw, tz, err := stores.QuietHours(r.Context(), s.pool, recipient)
	if err != nil {
		return err
	}
	q, _ := notifytype.ParseQuietHours(raw) // checked when written
	wire.WriteJSON(w, http.StatusOK, quietHoursBody{QuietHours: q, Timezone: tz})
	return nil
}

func (s *Server) putQuietHours(w http.ResponseWriter, r *http.Request, recipient string) error {
	var req quietHoursRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if req.QuietHours == nil {
		return invalidField("quiet_hours", `is required ({"start":"HH:MM","end":"HH:MM"}, or null for none)`)
	}
	raw, err := parseQuietHours(req.QuietHours)
	if err != nil {
		return err
	}
	stored, tz, err := stores.SetQuietHours(r.Context(), s.pool, recipient, raw)
	if err != nil {
		return err
	}
	q, _ := notifytype.ParseQuietHours(stored)
	wire.WriteJSON(w, http.StatusOK, quietHoursBody{QuietHours: q, Timezone: tz})
	return nil
}

// parseQuietHours checks a quiet_hours value of a request body and returns
// it as stored (re-encoded; nil for null). A malformed one is a 422 naming
// the field.
func parseQuietHours(raw json.RawMessage) (json.RawMessage, error) {
	q, err := notifytype.ParseQuietHours(raw)
	if err != nil {
		return nil, invalidField("quiet_hours", err.Error())
	}
	if q == nil {
		return nil, nil
	}
	out, err := json.Marshal(q)
	if err != nil {
		return nil, invalidField("quiet_hours", err.Error())
	}
	return out, nil
}
