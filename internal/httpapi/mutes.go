package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// maxMutes bounds a recipient's active mutes: the fan-out reads all of them
// for every recipient of a chunk.
const maxMutes = 1000

// maxTopic is the longest topic, as SendTx accepts topics.
const maxTopic = 255

// muteRequest is the body of PUT /v1/mutes: {"target", "until"}. until is an
// RFC 3339 time in the future, or null/absent for a mute that lasts until it
// is removed.
type muteRequest struct {
	Target string  `json:"target"`
	Until  *string `json:"until"`
}

// unmuteRequest is the optional body of DELETE /v1/mutes.
type unmuteRequest struct {
	Target string `json:"target"`
}

type mutesResponse struct {
	Mutes []muteJSON `json:"mutes"`
}

// listMutes is GET /v1/mutes (and /v1/recipients/{id}/mutes): the active
// mutes, in target order. Expired mutes are not listed.
func (s *Server) listMutes(w http.ResponseWriter, r *http.Request, recipient string) error {
	mutes, err := stores.ListMutes(r.Context(), s.pool, recipient)
	if err != nil {
		return err
	}
	resp := mutesResponse{Mutes: make([]muteJSON, len(mutes))}
	for i, m := range mutes {
		resp.Mutes[i] = muteWire(m)
	}
	wire.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// putMute is PUT /v1/mutes (and /v1/recipients/{id}/mutes): mute a notifier
// or a topic, replacing an existing mute of the same target; 200 with the
// mute as stored.
func (s *Server) putMute(w http.ResponseWriter, r *http.Request, recipient string) error {
	var req muteRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := s.checkMuteTarget(req.Target, true); err != nil {
		return err
	}
	var until *time.Time
	if req.Until != nil && *req.Until != "" {
		t, err := time.Parse(time.RFC3339Nano, *req.Until)
		if err != nil {
			return fieldError("until", "want an RFC 3339 time such as 2030-01-02T15:04:05Z, or null")
		}
		until = &t
	}
	var m *stores.Mute
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		var err error
		m, err = stores.PutMute(r.Context(), tx, recipient, req.Target, until, maxMutes)
		return err
	})
	switch {
	case errors.Is(err, stores.ErrMuteExpired):
		return invalidField("until", "must be in the future (null mutes until the mute is removed)")
	case errors.Is(err, stores.ErrTooManyMutes):
		return invalidField("target", fmt.Sprintf("at most %d active mutes; remove one first", maxMutes))
	case err != nil:
		return err
	}
	wire.WriteJSON(w, http.StatusOK, muteWire(*m))
	return nil
}

// deleteMute is DELETE /v1/mutes?target=… (or with a body {"target"}), and its
// admin twin: 200 {"deleted": true} when an active mute was removed, false
// when there was none (or it had expired).
func (s *Server) deleteMute(w http.ResponseWriter, r *http.Request, recipient string) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	var req unmuteRequest
	if err := s.DecodeJSON(w, r, &req, true); err != nil {
		return err
	}
	target := q.Get("target")
	switch {
	case target == "":
		target = req.Target
	case req.Target != "" && req.Target != target:
		return fieldError("target", "the query and the body name different targets")
	}
	if err := checkQueryText("target", target); err != nil {
		return err
	}
	// Any well-formed target may be removed, even a notifier no longer in
	// the config.
	if err := s.checkMuteTarget(target, false); err != nil {
		return err
	}
	deleted, err := stores.Unmute(r.Context(), s.pool, recipient, target)
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, map[string]bool{"deleted": deleted})
	return nil
}

// checkMuteTarget validates "notifier:<name>" or "topic:<topic>" (1 to 255
// bytes). known also requires the notifier to be configured: muting a
// notifier that does not exist is a typo, not a preference.
func (s *Server) checkMuteTarget(target string, known bool) error {
	kind, name, _ := strings.Cut(target, ":")
	switch {
	case target == "":
		return invalidField("target", `is required: "notifier:<name>" or "topic:<topic>"`)
	case kind == "notifier" && name != "":
		if _, ok := s.cfg.Notifier(name); known && !ok {
			return invalidField("target", "unknown notifier "+quote(name))
		}
	case kind == "topic" && name != "":
		if len(name) > maxTopic {
			return invalidField("target", "topic longer than 255 bytes")
		}
	default:
		return invalidField("target", `want "notifier:<name>" or "topic:<topic>"`)
	}
	return nil
}

// invalidField is a 422 invalid_request about one field: well-formed input
// that breaks a rule.
func invalidField(field, msg string) *wire.Error {
	return &wire.Error{Status: http.StatusUnprocessableEntity, Code: wire.CodeInvalidRequest, Message: field + ": " + msg,
		Details: []any{wire.FieldDetail{Field: field, Message: msg}}}
}

// checkQueryText refuses query values the database cannot store: invalid
// UTF-8 and NUL. (Body strings are checked by DecodeJSON, path values by
// checkPathText.)
func checkQueryText(field, s string) error {
	switch {
	case !utf8.ValidString(s):
		return fieldError(field, "not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return fieldError(field, "contains a NUL byte")
	}
	return nil
}

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return `"` + strings.ToValidUTF8(s, "?") + `"`
}
