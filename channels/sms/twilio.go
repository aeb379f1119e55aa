package sms

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
)

// DefaultBaseURL is Twilio's REST API.
const DefaultBaseURL = "https://api.twilio.com"

// twilioAPI is Twilio's Messages API for one account.
type twilioAPI struct {
	name, key, endpoint, sid, token, from string
	client                                *http.Client
	clock                                 func() time.Time
}

// newTwilio returns the API of pc, an entry at the config key key.
func newTwilio(pc *Provider, key, base string, client *http.Client, clock func() time.Time) *twilioAPI {
	if base == "" {
		base = DefaultBaseURL
	}
	return &twilioAPI{name: pc.DisplayName(), key: key, sid: pc.AccountSID, token: pc.AuthToken, from: pc.From,
		endpoint: base + "/2010-04-01/Accounts/" + url.PathEscape(pc.AccountSID) + "/Messages.json",
		client:   client, clock: clock}
}

// twilioError is the JSON body of a Twilio error response.
type twilioError struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	MoreInfo string `json:"more_info"`
}

// twilioMessage is the part of a created Message resource we read.
type twilioMessage struct {
	SID         string `json:"sid"`
	NumSegments string `json:"num_segments"`
}

// twilioUnsubscribed is Twilio's error for a number that replied STOP.
const twilioUnsubscribed = 21610

// refusedCodes are the Twilio error codes that say the number cannot get
// the message, whatever the retry or the provider.
var refusedCodes = map[int]string{
	21211: "invalid To number",
	21614: "To is not a mobile number",
	21610: "the recipient unsubscribed (replied STOP)",
	21408: "the account may not send to this region",
	21612: "the To number cannot be reached from the From number",
}

// send posts the text and classifies Twilio's answer. On success it returns
// the Message's sid and Twilio's num_segments (0 when absent). Error 21610
// (the recipient replied STOP) also suppresses the number.
func (a *twilioAPI) send(ctx context.Context, to, text string) (string, int, error) {
	form := url.Values{"To": {to}, "From": {a.from}, "Body": {text}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, channels.Permanent(fmt.Errorf("sms: build request: %w", err))
	}
	req.SetBasicAuth(a.sid, a.token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	dest := a.name + " (twilio messages api)"
	code, header, body, err := post(ctx, a.client, req, dest)
	if err != nil {
		return "", 0, err
	}
	if code >= 200 && code < 300 {
		var m twilioMessage
		_ = json.Unmarshal(body, &m)
		n, _ := strconv.Atoi(m.NumSegments)
		return m.SID, max(n, 0), nil
	}
	var te twilioError
	_ = json.Unmarshal(body, &te)
	what := fmt.Sprintf("%s: HTTP %d", dest, code)
	if te.Code != 0 {
		what += fmt.Sprintf(", error %d", te.Code)
	}
	if te.Message != "" {
		what += ": " + te.Message
	}
	err = errors.New(what)
	retryAfter := safehttp.ParseRetryAfter(header.Get("Retry-After"), a.clock())
	switch {
	case te.Code == twilioUnsubscribed:
		return "", 0, channels.Suppress(fmt.Errorf("%w (%s)", err, refusedCodes[te.Code]), to, refusedCodes[te.Code])
	case refusedCodes[te.Code] != "":
		return "", 0, channels.Permanent(fmt.Errorf("%w (%s)", err, refusedCodes[te.Code]))
	case code == http.StatusTooManyRequests:
		return "", 0, channels.RateLimited(err, retryAfter)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return "", 0, channels.Temporary(fmt.Errorf("%w: Twilio refused the credentials: check %s.account_sid and auth_token", err, a.key), 0)
	case code >= 500:
		return "", 0, channels.Temporary(err, retryAfter)
	case code >= 400:
		return "", 0, channels.Permanent(err)
	default:
		return "", 0, channels.Temporary(err, retryAfter)
	}
}
