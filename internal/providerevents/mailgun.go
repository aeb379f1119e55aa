package providerevents

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/notifyd/notifyd/channels/deliverytag"
	"github.com/notifyd/notifyd/stores"
)

type mailgunWebhook struct {
	Signature struct {
		Timestamp string `json:"timestamp"`
		Token     string `json:"token"`
		Signature string `json:"signature"`
	} `json:"signature"`
	EventData *struct {
		ID        string  `json:"id"`
		Event     string  `json:"event"`
		Timestamp float64 `json:"timestamp"`
		Severity  string  `json:"severity"`
		Reason    string  `json:"reason"`
		Recipient string  `json:"recipient"`
		URL       string  `json:"url"`
		Message   struct {
			Headers struct {
				MessageID string `json:"message-id"`
			} `json:"headers"`
		} `json:"message"`
		UserVariables  map[string]any `json:"user-variables"`
		DeliveryStatus struct {
			Code        int    `json:"code"`
			Message     string `json:"message"`
			Description string `json:"description"`
		} `json:"delivery-status"`
		ClientInfo struct {
			Bot string `json:"bot"`
		} `json:"client-info"`
	} `json:"event-data"`
}

// mailgunDropped are the reasons of a permanent failure that Mailgun did not
// even try: the address was on its own suppression lists.
var mailgunDropped = map[string]bool{"suppress-bounce": true, "suppress-complaint": true, "suppress-unsubscribe": true, "old": true}

func (v *Verifier) readMailgun(body []byte) (*Result, error) {
	var w mailgunWebhook
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, refuse(http.StatusNotAcceptable, "not a Mailgun webhook: %v", err)
	}
	m := hmac.New(sha256.New, []byte(v.p.Mailgun.SigningKey))
	m.Write([]byte(w.Signature.Timestamp + w.Signature.Token))
	got, err := hex.DecodeString(w.Signature.Signature)
	// 406 Not Acceptable: Mailgun does not retry it.
	if err != nil || !hmac.Equal(got, m.Sum(nil)) {
		return nil, refuse(http.StatusNotAcceptable, "bad Mailgun signature")
	}
	sec, err := strconv.ParseInt(w.Signature.Timestamp, 10, 64)
	if err != nil || !v.within(time.Unix(sec, 0), v.p.Mailgun.MaxAge) {
		return nil, refuse(http.StatusNotAcceptable, "Mailgun timestamp %q is outside providers.mailgun.max_age", w.Signature.Timestamp)
	}
	e := w.EventData
	if e == nil || e.ID == "" {
		return nil, refuse(http.StatusNotAcceptable, "a Mailgun webhook without event-data")
	}
	tag, _ := e.UserVariables[deliverytag.Field].(string)
	ev := stores.ProviderEvent{Source: "mailgun", Key: e.ID, Address: e.Recipient, MessageID: e.Message.Headers.MessageID,
		DeliveryID: v.delivery(tag)}
	if e.Timestamp > 0 {
		s, f := math.Modf(e.Timestamp)
		ev.At = time.Unix(int64(s), int64(f*1e9))
	}
	status := e.DeliveryStatus.Description
	if status == "" {
		status = e.DeliveryStatus.Message
	}
	if e.DeliveryStatus.Code != 0 {
		status = strconv.Itoa(e.DeliveryStatus.Code) + " " + status
	}
	switch e.Event {
	case "delivered":
		ev.Type, ev.Detail = "delivered", oneLine(status)
	case "failed":
		switch {
		case e.Severity == "temporary":
			ev.Type, ev.Detail = "deferred", oneLine(status)
		case mailgunDropped[e.Reason]:
			ev.Type, ev.Detail = "dropped", e.Reason
		default:
			ev.Type, ev.Hard, ev.Detail = "bounced", true, joinDetail("hard", status)
		}
	case "rejected":
		ev.Type, ev.Detail = "dropped", e.Reason
	case "complained":
		ev.Type = "complained"
	case "opened":
		ev.Type, ev.Machine = "opened", e.ClientInfo.Bot != ""
	case "clicked":
		ev.Type, ev.Detail, ev.Machine = "clicked", e.URL, e.ClientInfo.Bot != ""
	case "unsubscribed":
		ev.Type = "unsubscribed"
	default: // accepted, stored...
		return &Result{Ignored: 1}, nil
	}
	return &Result{Events: []stores.ProviderEvent{ev}}, nil
}
