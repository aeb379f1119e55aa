package providerevents

import (
	"crypto/hmac"
	"crypto/sha1" // #nosec G505 -- X-Twilio-Signature is HMAC-SHA1
	"encoding/base64"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/notifyd/notifyd/stores"
)

// TwilioSignatureHeader carries Twilio's request signature.
const TwilioSignatureHeader = "X-Twilio-Signature"

// TwilioSignature is Twilio's signature of a form POST to fullURL: base64
// of HMAC-SHA1 with the auth token over the URL followed by each parameter's
// name and value, sorted by name.
func TwilioSignature(authToken, fullURL string, form url.Values) string {
	keys := make([]string, 0, len(form))
	for k := range form {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(fullURL)
	for _, k := range keys {
		vs := append([]string(nil), form[k]...)
		sort.Strings(vs)
		for _, v := range vs {
			b.WriteString(k + v)
		}
	}
	m := hmac.New(sha1.New, []byte(authToken))
	m.Write([]byte(b.String()))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// twilioHard are the error codes of an undelivered message that say the
// number cannot get messages: 30005 unknown destination, 30006 landline or
// unreachable carrier.
var twilioHard = map[string]bool{"30005": true, "30006": true}

func (v *Verifier) readTwilio(r *http.Request, body []byte) (*Result, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "not a form: %v", err)
	}
	full := v.p.Twilio.URL
	if full == "" {
		full = "https://" + r.Host + r.URL.RequestURI()
	} else if r.URL.RawQuery != "" && !strings.Contains(full, "?") {
		full += "?" + r.URL.RawQuery
	}
	want := TwilioSignature(v.p.Twilio.AuthToken, full, form)
	if !hmac.Equal([]byte(r.Header.Get(TwilioSignatureHeader)), []byte(want)) {
		return nil, refuse(http.StatusForbidden, "bad Twilio signature")
	}
	sid, status := form.Get("MessageSid"), form.Get("MessageStatus")
	if sid == "" || status == "" {
		return nil, refuse(http.StatusBadRequest, "a status callback without MessageSid and MessageStatus")
	}
	ev := stores.ProviderEvent{Source: "twilio", Key: sid + "/" + status, MessageID: sid, Address: form.Get("To")}
	code := form.Get("ErrorCode")
	switch status {
	case "delivered":
		ev.Type = "delivered"
	case "undelivered":
		ev.Type, ev.Hard = "bounced", twilioHard[code]
		kind := "soft"
		if ev.Hard {
			kind = "hard"
		}
		ev.Detail = joinDetail(kind, "error "+code)
	case "failed":
		ev.Type, ev.Detail = "dropped", "error "+code
	case "read":
		ev.Type = "opened"
	default: // queued, sending, sent, accepted, scheduled, canceled
		return &Result{Ignored: 1}, nil
	}
	return &Result{Events: []stores.ProviderEvent{ev}}, nil
}
