package providerevents

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels/deliverytag"
	"github.com/notifyd/notifyd/stores"
)

// SendGrid's Event Webhook signature headers.
const (
	SendGridSignatureHeader = "X-Twilio-Email-Event-Webhook-Signature"
	SendGridTimestampHeader = "X-Twilio-Email-Event-Webhook-Timestamp"
)

// sendgridKey parses the verification key as SendGrid shows it: base64 of
// the DER public key (a PEM block is taken too).
func sendgridKey(s string) (*ecdsa.PublicKey, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "-----BEGIN PUBLIC KEY-----")
	s = strings.TrimSuffix(s, "-----END PUBLIC KEY-----")
	der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, err
	}
	ec, ok := k.(*ecdsa.PublicKey)
	if !ok {
		return nil, errNotECDSA
	}
	return ec, nil
}

type constError string

func (e constError) Error() string { return string(e) }

const errNotECDSA = constError("not an ECDSA public key")

func (v *Verifier) readSendGrid(r *http.Request, body []byte) (*Result, error) {
	key, err := sendgridKey(v.p.SendGrid.PublicKey)
	if err != nil {
		return nil, refuse(http.StatusInternalServerError, "providers.sendgrid.public_key: %v", err)
	}
	ts := r.Header.Get(SendGridTimestampHeader)
	sig, err := base64.StdEncoding.DecodeString(r.Header.Get(SendGridSignatureHeader))
	if err != nil || len(sig) == 0 || ts == "" {
		return nil, refuse(http.StatusForbidden, "missing or malformed SendGrid signature")
	}
	sum := sha256.Sum256(append([]byte(ts), body...))
	if !ecdsa.VerifyASN1(key, sum[:], sig) {
		return nil, refuse(http.StatusForbidden, "bad SendGrid signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || !v.within(time.Unix(sec, 0), v.p.SendGrid.MaxAge) {
		return nil, refuse(http.StatusForbidden, "SendGrid timestamp %q is outside providers.sendgrid.max_age", ts)
	}
	var raw []map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, refuse(http.StatusBadRequest, "not a SendGrid event array: %v", err)
	}
	res := &Result{}
	for _, e := range raw {
		str := func(k string) string { s, _ := e[k].(string); return s }
		ev := stores.ProviderEvent{Source: "sendgrid", Key: str("sg_event_id"), Address: str("email"),
			MessageID: sendgridMessageID(str("sg_message_id")), DeliveryID: v.delivery(str(deliverytag.Field))}
		if n, ok := e["timestamp"].(float64); ok {
			ev.At = time.Unix(int64(n), 0)
		}
		switch str("event") {
		case "delivered":
			ev.Type, ev.Detail = "delivered", oneLine(str("response"))
		case "deferred":
			ev.Type, ev.Detail = "deferred", oneLine(str("response"))
		case "bounce":
			// type "bounce" is a hard bounce; "blocked" a refusal that may pass.
			ev.Type, ev.Hard = "bounced", str("type") != "blocked"
			kind := "soft"
			if ev.Hard {
				kind = "hard"
			}
			ev.Detail = joinDetail(kind, str("reason"))
		case "dropped":
			ev.Type, ev.Detail = "dropped", oneLine(str("reason"))
		case "spamreport":
			ev.Type = "complained"
		case "open":
			ev.Type = "opened"
			ev.Machine, _ = e["sg_machine_open"].(bool)
		case "click":
			ev.Type, ev.Detail = "clicked", str("url")
		case "unsubscribe", "group_unsubscribe":
			ev.Type = "unsubscribed"
		default: // processed, group_resubscribe...
			res.Ignored++
			continue
		}
		if ev.Key == "" {
			res.Ignored++
			continue
		}
		res.Events = append(res.Events, ev)
	}
	return res, nil
}

// sendgridMessageID is the X-Message-Id the send stored, from an event's
// sg_message_id (that id, then ".filter…" or ".recvd-…" and more).
func sendgridMessageID(s string) string {
	for _, sep := range []string{".filter", ".recvd-"} {
		if i := strings.Index(s, sep); i >= 0 {
			return s[:i]
		}
	}
	return s
}
