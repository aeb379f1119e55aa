package httpapi

import (
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// Suppression list limits.
const (
	defaultSuppressionLimit = 100
	maxSuppressionLimit     = 1000
	maxSuppressionReason    = 200
	// cursorSuppression is the key cursor kind of GET /v1/suppressions.
	cursorSuppression byte = 's'
)

// suppressionJSON is one suppression on the wire.
type suppressionJSON struct {
	Channel   string    `json:"channel"`
	Address   string    `json:"address"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func suppressionWire(s *stores.Suppression) suppressionJSON {
	return suppressionJSON{Channel: s.Channel, Address: s.Address, Reason: s.Reason, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

type suppressionsResponse struct {
	Suppressions []suppressionJSON `json:"suppressions"`
	NextCursor   *string           `json:"next_cursor"`
}

type putSuppressionRequest struct {
	Reason string `json:"reason"`
}

// suppressionChannel returns the Address field of the named channel, the
// profile field its suppressions hold, or a 404 when the registry has no
// per-recipient channel of that name that sends to an address.
func (s *Server) suppressionChannel(field, name string) (string, error) {
	if err := checkPathText(field, name); err != nil {
		return "", err
	}
	p, ok := s.reg.Lookup(name)
	if !ok || !p.PerRecipient || !channels.SuppressibleAddress(p.Address) {
		return "", &wire.Error{Status: http.StatusNotFound, Code: wire.CodeNotFound,
			Message: field + ": no channel " + quote(name) + " that sends to an address",
			Details: []any{wire.FieldDetail{Field: field, Message: "not a registered channel that sends to an address"}}}
	}
	return p.Address, nil
}

// suppressionAddress checks and normalises an address for a channel whose
// profile field is addrField.
func suppressionAddress(field, addrField, address string) (string, error) {
	if err := checkPathText(field, address); err != nil {
		return "", err
	}
	if err := channels.CheckSuppressionAddress(addrField, address); err != nil {
		return "", invalidField(field, err.Error())
	}
	return stores.NormalizeAddress(address), nil
}

// checkReason refuses a reason that is too long or has control characters
// (it is shown in the ledger's last_error).
func checkReason(field, reason string) error {
	if len(reason) > maxSuppressionReason {
		return invalidField(field, "longer than 200 bytes")
	}
	if strings.ContainsFunc(reason, unicode.IsControl) {
		return invalidField(field, "contains control characters")
	}
	return nil
}

// listSuppressions is GET /v1/suppressions?channel=&address=&limit=&cursor=:
// the suppression list in (channel, address) order, one keyset page (limit
// 1..1000, default 100), optionally only one channel's, or only one address
// (exact, compared lower-cased).
func (s *Server) listSuppressions(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	channel, address := q.Get("channel"), q.Get("address")
	if channel != "" {
		addrField, err := s.suppressionChannel("channel", channel)
		if err != nil {
			return err
		}
		if address != "" {
			if address, err = suppressionAddress("address", addrField, address); err != nil {
				return err
			}
		}
	} else if address != "" {
		if err := checkPathText("address", address); err != nil {
			return err
		}
	}
	limit := defaultSuppressionLimit
	if v := q.Get("limit"); v != "" {
		n, ok := parseLimit(v, maxSuppressionLimit)
		if !ok {
			return fieldError("limit", "want an integer from 1 to %d", maxSuppressionLimit)
		}
		limit = n
	}
	var afterChannel, afterAddress string
	if v := q.Get("cursor"); v != "" {
		key, err := decodeKeyCursor(cursorSuppression, v)
		if err != nil {
			return &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeBadCursor,
				Message: "cursor: not a cursor this API issued for this list; start again without one",
				Details: []any{wire.FieldDetail{Field: "cursor", Message: err.Error()}}}
		}
		afterChannel, afterAddress, _ = strings.Cut(key, "\x00")
	}
	page, err := stores.ListSuppressions(r.Context(), s.pool, channel, address, afterChannel, afterAddress, limit+1)
	if err != nil {
		return err
	}
	resp := suppressionsResponse{Suppressions: []suppressionJSON{}}
	for i := range page {
		if i == limit {
			last := page[i-1]
			c := encodeKeyCursor(cursorSuppression, last.Channel+"\x00"+last.Address)
			resp.NextCursor = &c
			break
		}
		resp.Suppressions = append(resp.Suppressions, suppressionWire(&page[i]))
	}
	wire.WriteJSON(w, http.StatusOK, resp)
	return nil
}

func parseLimit(v string, max int) (int, bool) {
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' || n > max {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, v != "" && n >= 1 && n <= max
}

// putSuppression is PUT /v1/suppressions/{channel}/{address}: suppress the
// address (or change the reason of its suppression; created_at is kept).
// The body {"reason"} is optional; the reason defaults to "manual". 200 with
// the suppression.
func (s *Server) putSuppression(w http.ResponseWriter, r *http.Request) error {
	addrField, err := s.suppressionChannel("channel", r.PathValue("channel"))
	if err != nil {
		return err
	}
	address, err := suppressionAddress("address", addrField, r.PathValue("address"))
	if err != nil {
		return err
	}
	var req putSuppressionRequest
	if err := s.DecodeJSON(w, r, &req, true); err != nil {
		return err
	}
	reason := strings.TrimSpace(req.Reason)
	if reason == "" {
		reason = "manual"
	}
	if err := checkReason("reason", reason); err != nil {
		return err
	}
	channel := r.PathValue("channel")
	ctx := s.audit(r, AuditSuppressionAdd, channel+"/"+address, map[string]string{"reason": reason})
	if err := s.auditTx(ctx, func(tx pgx.Tx) error {
		return stores.PutSuppressions(ctx, tx, []stores.Suppression{{Channel: channel, Address: address, Reason: reason}}, s.clock())
	}); err != nil {
		return err
	}
	sup, err := stores.GetSuppression(r.Context(), s.pool, channel, address)
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, suppressionWire(sup))
	return nil
}

// deleteSuppression is DELETE /v1/suppressions/{channel}/{address}: lift the
// suppression, so the address is sent to again. 200 {"deleted": true|false}.
func (s *Server) deleteSuppression(w http.ResponseWriter, r *http.Request) error {
	addrField, err := s.suppressionChannel("channel", r.PathValue("channel"))
	if err != nil {
		return err
	}
	address, err := suppressionAddress("address", addrField, r.PathValue("address"))
	if err != nil {
		return err
	}
	var deleted bool
	ctx := s.audit(r, AuditSuppressionRemove, r.PathValue("channel")+"/"+address, nil)
	err = s.auditTx(ctx, func(tx pgx.Tx) error {
		var err error
		deleted, err = stores.DeleteSuppression(ctx, tx, r.PathValue("channel"), address)
		stores.AddAuditField(ctx, "deleted", deleted)
		return err
	})
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, map[string]bool{"deleted": deleted})
	return nil
}

// suppressFields pairs each registered per-recipient channel that sends to
// an address with its profile field (as the send job's claim does).
func (s *Server) suppressFields() stores.AddressFields {
	var f stores.AddressFields
	for _, p := range s.reg.Plugins() {
		if p.PerRecipient && channels.SuppressibleAddress(p.Address) {
			f.Channels = append(f.Channels, p.Name)
			f.Fields = append(f.Fields, p.Address)
		}
	}
	return f
}
