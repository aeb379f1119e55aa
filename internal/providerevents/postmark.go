package providerevents

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/notifyd/notifyd/channels/deliverytag"
	"github.com/notifyd/notifyd/stores"
)

// postmarkHard are the Postmark bounce types that mean the address is dead.
var postmarkHard = map[string]bool{"HardBounce": true, "BadEmailAddress": true}

type postmarkEvent struct {
	RecordType        string            `json:"RecordType"`
	ID                json.Number       `json:"ID"`
	Type              string            `json:"Type"`
	MessageID         string            `json:"MessageID"`
	Recipient         string            `json:"Recipient"`
	Email             string            `json:"Email"`
	Description       string            `json:"Description"`
	Details           string            `json:"Details"`
	DeliveredAt       string            `json:"DeliveredAt"`
	BouncedAt         string            `json:"BouncedAt"`
	ReceivedAt        string            `json:"ReceivedAt"`
	ChangedAt         string            `json:"ChangedAt"`
	OriginalLink      string            `json:"OriginalLink"`
	SuppressSending   bool              `json:"SuppressSending"`
	SuppressionReason string            `json:"SuppressionReason"`
	Metadata          map[string]string `json:"Metadata"`
}

func (v *Verifier) readPostmark(r *http.Request, body []byte) (*Result, error) {
	u, p, ok := r.BasicAuth()
	want := v.p.Postmark
	// Both compared whole, in constant time.
	userOK := subtle.ConstantTimeCompare([]byte(u), []byte(want.Username)) == 1
	passOK := subtle.ConstantTimeCompare([]byte(p), []byte(want.Password)) == 1
	if !ok || !userOK || !passOK {
		return nil, refuse(http.StatusUnauthorized, "bad Postmark webhook credentials")
	}
	var e postmarkEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, refuse(http.StatusBadRequest, "not a Postmark webhook: %v", err)
	}
	ev := stores.ProviderEvent{Source: "postmark", MessageID: e.MessageID, Address: e.Recipient,
		DeliveryID: v.delivery(e.Metadata[deliverytag.Field])}
	when := ""
	switch e.RecordType {
	case "Delivery":
		ev.Type, ev.Detail, when = "delivered", oneLine(e.Details), e.DeliveredAt
	case "Bounce":
		ev.Type, ev.Address, ev.Hard, when = "bounced", e.Email, postmarkHard[e.Type], e.BouncedAt
		kind := "soft"
		if ev.Hard {
			kind = "hard"
		}
		ev.Detail = joinDetail(kind, e.Type+" "+e.Description)
	case "SpamComplaint":
		ev.Type, ev.Address, when = "complained", e.Email, e.BouncedAt
	case "Open":
		ev.Type, when = "opened", e.ReceivedAt
	case "Click":
		ev.Type, ev.Detail, when = "clicked", e.OriginalLink, e.ReceivedAt
	case "SubscriptionChange":
		if !e.SuppressSending {
			return &Result{Ignored: 1}, nil // a reactivation: notifyd's list is lifted by an operator
		}
		ev.Type, ev.Detail, when = "unsubscribed", e.SuppressionReason, e.ChangedAt
	default:
		return &Result{Ignored: 1}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, when); err == nil {
		ev.At = t
	}
	// Postmark gives bounces an ID; other events are named by what they
	// are, so the same event posted again has the same key.
	ev.Key = e.RecordType + "/" + e.ID.String() + "/" + when + "/" + ev.Detail
	if len(ev.Key) > 300 {
		ev.Key = ev.Key[:280] + strconv.Itoa(len(ev.Key))
	}
	return &Result{Events: []stores.ProviderEvent{ev}}, nil
}
