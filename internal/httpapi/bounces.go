package httpapi

import (
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// Bounce kinds of POST /v1/bounces.
const (
	bounceHard      = "hard"      // the address does not exist: suppressed
	bounceSoft      = "soft"      // a passing failure (mailbox full): counted, not suppressed
	bounceComplaint = "complaint" // the person marked the mail as spam: suppressed
)

// bounceRequest is the generic shape a provider's bounce or complaint
// webhook is mapped to (docs/deliverability.md shows the mappings).
type bounceRequest struct {
	Channel string `json:"channel"`
	Address string `json:"address"`
	Kind    string `json:"kind"`
	// Reason, optional, is stored with the suppression after the kind
	// ("hard: 5.1.1 user unknown"), on one line, cut to 200 bytes.
	Reason string `json:"reason"`
}

type bounceResponse struct {
	Kind        string           `json:"kind"`
	Suppressed  bool             `json:"suppressed"`
	Suppression *suppressionJSON `json:"suppression,omitempty"`
	// SoftBounces is how many soft bounces the address has had, for a soft one.
	SoftBounces int64      `json:"soft_bounces,omitempty"`
	LastSoftAt  *time.Time `json:"last_soft_at,omitempty"`
}

// postBounce is POST /v1/bounces (admin): {"channel","address","kind"} with
// kind hard or complaint suppresses the address (200 with the suppression;
// reporting it again updates the reason), soft counts it in the soft-bounce
// table and suppresses nothing. Every field is checked before anything is
// written: a missing field or an unknown kind is a 422, an unknown channel a
// 404.
func (s *Server) postBounce(w http.ResponseWriter, r *http.Request) error {
	var req bounceRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if req.Channel == "" {
		return invalidField("channel", "is required")
	}
	addrField, err := s.suppressionChannel("channel", req.Channel)
	if err != nil {
		return err
	}
	if req.Address == "" {
		return invalidField("address", "is required")
	}
	address, err := suppressionAddress("address", addrField, req.Address)
	if err != nil {
		return err
	}
	switch req.Kind {
	case bounceHard, bounceSoft, bounceComplaint:
	case "":
		return invalidField("kind", "is required (hard, soft or complaint)")
	default:
		return invalidField("kind", "want hard, soft or complaint")
	}
	// A provider's diagnostic is whatever it is: folded onto one line and
	// cut to fit rather than refused, so a relay never loses a bounce to it.
	detail := clip(strings.Join(strings.FieldsFunc(req.Reason, isSpaceOrControl), " "), maxSuppressionReason)
	if req.Kind == bounceSoft {
		b, err := stores.RecordSoftBounce(r.Context(), s.pool, req.Channel, address, s.clock())
		if err != nil {
			return err
		}
		wire.WriteJSON(w, http.StatusOK, bounceResponse{Kind: req.Kind, SoftBounces: b.Count, LastSoftAt: &b.LastAt})
		return nil
	}
	reason := req.Kind
	if detail != "" {
		reason += ": " + detail
	}
	if err := stores.PutSuppressions(r.Context(), s.pool,
		[]stores.Suppression{{Channel: req.Channel, Address: address, Reason: reason}}, s.clock()); err != nil {
		return err
	}
	sup, err := stores.GetSuppression(r.Context(), s.pool, req.Channel, address)
	if err != nil {
		return err
	}
	out := suppressionWire(sup)
	s.logger.InfoContext(r.Context(), "address suppressed by a bounce report", "channel", req.Channel, "kind", req.Kind)
	wire.WriteJSON(w, http.StatusOK, bounceResponse{Kind: req.Kind, Suppressed: true, Suppression: &out})
	return nil
}

func isSpaceOrControl(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

// clip cuts s to at most n bytes without splitting a UTF-8 sequence.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
