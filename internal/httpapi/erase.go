package httpapi

import (
	"errors"
	"net/http"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// erasureResponse is the answer of DELETE /v1/recipients/{id}.
type erasureResponse struct {
	Erased bool `json:"erased"`
	// Profile reports whether a profile was deleted.
	Profile bool `json:"profile"`
	// Inbox counts deleted inbox items; Changes their change-log rows.
	Inbox   int `json:"inbox"`
	Changes int `json:"changes"`
	// Deliveries counts the ledger rows kept under the pseudonym; Cancelled
	// how many of them were unsent and will now never be sent.
	Deliveries int `json:"deliveries"`
	Cancelled  int `json:"cancelled"`
	// Preferences, Subscriptions and Mutes count deleted settings rows.
	Preferences   int `json:"preferences"`
	Subscriptions int `json:"subscriptions"`
	Mutes         int `json:"mutes"`
	// Devices counts the deleted mobile devices.
	Devices int `json:"devices"`
	// Notifications counts notifications whose inline recipients or actor
	// named the recipient (removed from unfinished ones, pseudonymised in the
	// rest).
	Notifications int `json:"notifications"`
	// Pseudonym is what the recipient's id was replaced with in the rows kept.
	Pseudonym string `json:"pseudonym"`
	// Suppressions counts the suppressions of the recipient's addresses that
	// were lifted: only with ?suppressions=true (see eraseRecipient).
	Suppressions int `json:"suppressions"`
}

// eraseRecipient is DELETE /v1/recipients/{id}: erase everything notifyd
// holds about the recipient in one transaction (see stores.EraseRecipient):
// 200 with counts, 404 when nothing of the recipient existed.
func (s *Server) eraseRecipient(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkPathText("id", id); err != nil {
		return err
	}
	// Suppressions of the recipient's addresses are kept unless the
	// operator asks: an address is not the person, and keeping it on the
	// list is what stops notifyd mailing a dead or complaining mailbox again
	// when the application re-creates the recipient. They are lifted first,
	// while the profile still names the addresses.
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	var lifted int
	switch v := q.Get("suppressions"); v {
	case "", "false":
	case "true":
		if lifted, err = stores.DeleteRecipientSuppressions(r.Context(), s.pool, id, s.suppressFields()); err != nil {
			return err
		}
	default:
		return fieldError("suppressions", "want true or false")
	}
	// The audit row names the recipient by the pseudonym the ledger keeps.
	e, err := s.client.EraseRecipient(s.audit(r, AuditRecipientErase, stores.ErasedID(id),
		map[string]any{"suppressions_lifted": lifted}), id)
	if errors.Is(err, notifyd.ErrRecipientNotFound) {
		return notFoundError("nothing of recipient %q exists", id)
	}
	if err != nil {
		return err
	}
	s.logger.InfoContext(r.Context(), "recipient erased", "recipient", stores.ErasedID(id), "inbox", e.Inbox,
		"deliveries", e.Deliveries, "cancelled", e.Cancelled)
	wire.WriteJSON(w, http.StatusOK, erasureResponse{Erased: true, Profile: e.Profile, Inbox: e.Inbox, Changes: e.Changes,
		Deliveries: e.Deliveries, Cancelled: e.Cancelled, Preferences: e.Preferences, Subscriptions: e.Subscriptions,
		Mutes: e.Mutes, Devices: e.Devices, Notifications: e.Notifications, Pseudonym: stores.ErasedID(id), Suppressions: lifted})
	return nil
}
