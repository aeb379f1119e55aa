package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
)

// profileRequest is the body of PUT /v1/recipients/{id}. PUT replaces the
// whole profile: an absent, null or "" field is cleared. The read-only fields
// of a GET response (id, webhook_secret, webhook_gone_at, created_at,
// updated_at) are accepted and ignored, so a profile read can be written back;
// an id in the body must match the path. tokens_valid_after is the
// exception to the full replace: absent keeps the stored value (a profile
// write that does not know of it cannot undo a revocation), null clears it.
type profileRequest struct {
	ID         *string         `json:"id"`
	Email      *string         `json:"email"`
	Name       *string         `json:"name"`
	Locale     *string         `json:"locale"`
	Timezone   *string         `json:"timezone"`
	WebhookURL *string         `json:"webhook_url"`
	Phone      *string         `json:"phone"` // E.164
	Data       json.RawMessage `json:"data"`
	// TokensValidAfter is RFC 3339 or null: the recipient's tokens issued
	// (iat) before it are refused.
	TokensValidAfter json.RawMessage `json:"tokens_valid_after"`
	// QuietHours is {"start":"HH:MM","end":"HH:MM"} or null; like
	// tokens_valid_after, absent keeps the stored value (the recipient sets
	// it in the preference center).
	QuietHours json.RawMessage `json:"quiet_hours"`

	WebhookSecret json.RawMessage `json:"webhook_secret"`
	WebhookGoneAt json.RawMessage `json:"webhook_gone_at"`
	CreatedAt     json.RawMessage `json:"created_at"`
	UpdatedAt     json.RawMessage `json:"updated_at"`
}

func (s *Server) putRecipient(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkPathText("id", id); err != nil {
		return err
	}
	var req profileRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	profile, err := req.profile(id)
	if err != nil {
		return err
	}
	out, err := stores.PutRecipientJSON(r.Context(), s.pool, id, profile)
	if in, ok := stores.InputErrorOf(err); ok {
		return invalidField(in.Field, in.Message)
	}
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, s.profileResponse(out))
	return nil
}

// profileResponse is a profile as the admin API shows it: with the secret
// the recipient's webhooks are signed with (null when the webhook channel is
// not configured). It is derived, not stored: it cannot be written.
type profileResponse struct {
	ID            string          `json:"id"`
	Email         *string         `json:"email"`
	Name          *string         `json:"name"`
	Locale        *string         `json:"locale"`
	Timezone      *string         `json:"timezone"`
	WebhookURL    *string         `json:"webhook_url"`
	Phone         *string         `json:"phone"`
	Data          json.RawMessage `json:"data"`
	WebhookGoneAt *time.Time      `json:"webhook_gone_at"`
	// TokensValidAfter: tokens issued before it are refused; null: none.
	TokensValidAfter *time.Time `json:"tokens_valid_after"`
	// QuietHours: null for none.
	QuietHours    *notifytype.QuietHours `json:"quiet_hours"`
	CreatedAt     time.Time              `json:"created_at"`
	UpdatedAt     time.Time              `json:"updated_at"`
	WebhookSecret *string                `json:"webhook_secret"`
}

func (s *Server) profileResponse(p *stores.RecipientProfile) profileResponse {
	out := profileResponse{ID: p.ID, Email: p.Email, Name: p.Name, Locale: p.Locale, Timezone: p.Timezone,
		WebhookURL: p.WebhookURL, Phone: p.Phone, Data: p.Data, WebhookGoneAt: p.WebhookGoneAt, TokensValidAfter: p.TokensValidAfter,
		CreatedAt: p.CreatedAt,
		UpdatedAt: p.UpdatedAt}
	out.QuietHours, _ = notifytype.ParseQuietHours(p.QuietHours) // checked when written
	if s.secret != nil {
		secret := s.secret(p.ID)
		out.WebhookSecret = &secret
	}
	return out
}

// webhookSecret is GET /v1/webhook-secret: {"secret": "whsec_…"}, what the
// recipient's webhooks are signed with, to verify them. It is the recipient's
// alone: it verifies no other destination's webhooks. A 404 when the webhook
// channel is not configured.
func (s *Server) webhookSecret(w http.ResponseWriter, r *http.Request, recipient string) error {
	if s.secret == nil {
		return notFoundError("webhooks are not configured (no channels.webhook)")
	}
	wire.WriteJSON(w, http.StatusOK, map[string]string{"secret": s.secret(recipient)})
	return nil
}

// profile is the request as notify_put_recipient's profile object, which
// holds every rule of the fields (a value that breaks one is a 422
// invalid_request naming the field, as from SQL and the Go API). PUT replaces
// the whole profile, so every text field and data are given, null when
// absent; tokens_valid_after and quiet_hours only when present. What is left
// here is the HTTP request's own shape: the id in the body must match the
// path, and data must be a JSON object (a 400, like every wrong JSON type).
func (req *profileRequest) profile(id string) (json.RawMessage, error) {
	if req.ID != nil && *req.ID != id {
		return nil, invalidField("id", "does not match the id in the path")
	}
	data, err := decodeObject("data", req.Data)
	if err != nil {
		return nil, err
	}
	m := map[string]any{"email": req.Email, "name": req.Name, "locale": req.Locale, "timezone": req.Timezone,
		"webhook_url": req.WebhookURL, "phone": req.Phone, "data": data}
	if req.TokensValidAfter != nil {
		// A JSON type other than string or null is malformed JSON for this
		// field (a 400, like a number for email); a string that is not an
		// RFC 3339 time breaks notify_put_recipient's rule (a 422).
		if v := bytes.TrimSpace(req.TokensValidAfter); len(v) == 0 || (v[0] != '"' && string(v) != "null") {
			return nil, fieldError("tokens_valid_after", "want an RFC 3339 time or null")
		}
		m["tokens_valid_after"] = req.TokensValidAfter
	}
	if req.QuietHours != nil {
		m["quiet_hours"] = req.QuietHours
	}
	// Re-encoded, not passed as sent: the decoder has replaced what jsonb
	// cannot hold (lone surrogate escapes).
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fieldError("data", "%v", err)
	}
	return out, nil
}

// text is an optional field's value: "" when absent or null.
func text(v *string) string {
	if v == nil {
		return ""
	}
	return *v
}

// checkPathText validates a text id taken from the path: 1 to 255 bytes of
// UTF-8 without NUL (what the database stores).
func checkPathText(field, s string) error {
	switch {
	case s == "":
		return fieldError(field, "is required")
	case len(s) > 255:
		return fieldError(field, "longer than 255 bytes")
	case !utf8.ValidString(s):
		return fieldError(field, "not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return fieldError(field, "contains a NUL byte")
	}
	return nil
}

func (s *Server) getRecipient(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkPathText("id", id); err != nil {
		return err
	}
	p, err := readByID(r.Context(), s, id, stores.GetRecipient)
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no recipient %q", id)
	}
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, s.profileResponse(p))
	return nil
}

// recipientInbox is GET /v1/recipients/{id}/inbox: the recipient's inbox as
// /v1/inbox shows it, for backends that proxy. A recipient without a profile
// or items has an empty inbox, not a 404.
func (s *Server) recipientInbox(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkPathText("id", id); err != nil {
		return err
	}
	return s.listInbox(w, r, id)
}
