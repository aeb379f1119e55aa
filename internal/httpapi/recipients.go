package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/notifyd/notifyd/stores"
)

// profileRequest is the body of PUT /v1/recipients/{id}. PUT replaces the
// whole profile: an absent, null or "" field is cleared. The read-only fields
// of a GET response (id, webhook_gone_at, created_at, updated_at) are accepted
// and ignored, so a profile read can be written back; an id in the body must
// match the path.
type profileRequest struct {
	ID         *string         `json:"id"`
	Email      *string         `json:"email"`
	Name       *string         `json:"name"`
	Locale     *string         `json:"locale"`
	Timezone   *string         `json:"timezone"`
	WebhookURL *string         `json:"webhook_url"`
	Data       json.RawMessage `json:"data"`

	WebhookGoneAt json.RawMessage `json:"webhook_gone_at"`
	CreatedAt     json.RawMessage `json:"created_at"`
	UpdatedAt     json.RawMessage `json:"updated_at"`
}

// Profile field limits.
const (
	maxEmail      = 254
	maxName       = 255
	maxLocale     = 35
	maxTimezone   = 64
	maxWebhookURL = 2048
)

var localeRE = regexp.MustCompile(`^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$`)

func (s *Server) putRecipient(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkPathText("id", id); err != nil {
		return err
	}
	var req profileRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	p, err := req.profile(id)
	if err != nil {
		return err
	}
	out, err := stores.PutRecipient(r.Context(), s.pool, p)
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, out)
	return nil
}

func (req *profileRequest) profile(id string) (stores.RecipientProfile, error) {
	p := stores.RecipientProfile{ID: id}
	if req.ID != nil && *req.ID != id {
		return p, invalidField("id", "does not match the id in the path")
	}
	var err error
	if p.Email, err = optional("email", req.Email, maxEmail, checkEmail); err != nil {
		return p, err
	}
	if p.Name, err = optional("name", req.Name, maxName, nil); err != nil {
		return p, err
	}
	if p.Locale, err = optional("locale", req.Locale, maxLocale, checkLocale); err != nil {
		return p, err
	}
	if p.Timezone, err = optional("timezone", req.Timezone, maxTimezone, checkTimezone); err != nil {
		return p, err
	}
	if p.WebhookURL, err = optional("webhook_url", req.WebhookURL, maxWebhookURL, checkWebhookURL); err != nil {
		return p, err
	}
	data, err := decodeObject("data", req.Data)
	if err != nil {
		return p, err
	}
	// Re-encoded, not stored as sent: the decoder has replaced what jsonb
	// cannot hold (lone surrogate escapes) and checked it is an object.
	if p.Data, err = json.Marshal(data); err != nil {
		return p, fieldError("data", "%v", err)
	}
	return p, nil
}

// optional validates an optional text field: nil or "" is absent (nil). A
// well-formed value that breaks a rule (too long, not an address, an unknown
// time zone) is a 422 invalid_request, like every other rule of the API;
// malformed JSON stays a 400.
func optional(field string, v *string, limit int, check func(string) string) (*string, error) {
	if v == nil || *v == "" {
		return nil, nil
	}
	if len(*v) > limit {
		return nil, invalidField(field, fmt.Sprintf("longer than %d bytes", limit))
	}
	if check != nil {
		if msg := check(*v); msg != "" {
			return nil, invalidField(field, msg)
		}
	}
	return v, nil
}

func checkEmail(s string) string {
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s {
		return "want a bare email address such as ada@example.com"
	}
	return ""
}

func checkLocale(s string) string {
	if !localeRE.MatchString(s) {
		return "want a BCP 47 language tag such as en or pt-BR"
	}
	return ""
}

func checkTimezone(s string) string {
	// "Local" would mean the daemon's own zone, which differs per replica.
	if s == "Local" {
		return "want an IANA time zone such as Europe/Paris"
	}
	if _, err := time.LoadLocation(s); err != nil {
		return "unknown time zone; want an IANA name such as Europe/Paris"
	}
	return ""
}

func checkWebhookURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return "want an absolute http or https URL"
	}
	return ""
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
	p, err := stores.GetRecipient(r.Context(), s.pool, id)
	if errors.Is(err, stores.ErrNotFound) {
		return notFoundError("no recipient %q", id)
	}
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, p)
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
