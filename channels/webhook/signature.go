package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of the Standard Webhooks signature scheme.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// DefaultTolerance is how far a webhook-timestamp may be from the receiver's
// clock, either way, for Verify given a zero tolerance (the Standard Webhooks
// recommendation).
const DefaultTolerance = 5 * time.Minute

// secretPrefix marks a secret whose key bytes are the base64 text after it.
const secretPrefix = "whsec_"

// ErrInvalidSignature is matched (errors.Is) by every error Verify returns; the
// message says what was wrong.
var ErrInvalidSignature = errors.New("invalid webhook signature")

// Sign returns the Standard Webhooks signature of body: "v1," followed by the
// base64 HMAC-SHA256 of id + "." + unix seconds of ts + "." + body.
//
// secret is either "whsec_" followed by base64 (the key is the decoded bytes;
// padding is optional) or any other non-empty text (the key is its bytes as
// they are). The error reports an empty secret or bad base64.
func Sign(secret string, id string, ts time.Time, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	return sign(key, id, ts.Unix(), body), nil
}

// Verify checks a received webhook against secret, the way a receiver does:
// webhook-id, webhook-timestamp and webhook-signature must be present, the
// timestamp must be within tolerance of the current time (zero means
// DefaultTolerance; a negative tolerance skips the check, for replaying stored
// messages), and one of the space-separated "v1,<base64>" signatures must
// match. Signatures of other versions are ignored. Every error matches
// ErrInvalidSignature.
func Verify(secret string, headers http.Header, body []byte, tolerance time.Duration) error {
	key, err := secretKey(secret)
	if err != nil {
		return err
	}
	id := headers.Get(HeaderID)
	tsText := headers.Get(HeaderTimestamp)
	sigs := headers.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return fmt.Errorf("%w: missing %s, %s or %s header", ErrInvalidSignature, HeaderID, HeaderTimestamp, HeaderSignature)
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not unix seconds", ErrInvalidSignature, HeaderTimestamp, tsText)
	}
	if tolerance == 0 {
		tolerance = DefaultTolerance
	}
	if tolerance > 0 {
		skew := time.Since(time.Unix(ts, 0))
		if skew > tolerance {
			return fmt.Errorf("%w: timestamp is %s old, more than %s", ErrInvalidSignature, skew.Round(time.Second), tolerance)
		}
		if -skew > tolerance {
			return fmt.Errorf("%w: timestamp is %s in the future, more than %s", ErrInvalidSignature, (-skew).Round(time.Second), tolerance)
		}
	}
	want := []byte(sign(key, id, ts, body))
	for _, s := range strings.Fields(sigs) {
		// Constant time, so a forger learns nothing from how long a guess took.
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no matching signature", ErrInvalidSignature)
}

// RecipientSecret returns the signing secret of the per-recipient webhooks
// of recipient id, derived from the channel's secret (channels.webhook.secret):
// "whsec_" followed by base64 of HMAC-SHA256(key, "recipient:" + id), where
// key is the channel secret's key (see Sign). The recipient verifies its
// webhooks with it (GET /v1/webhook-secret shows it); it verifies nothing sent
// to anyone else, and the channel secret cannot be computed back from it.
func RecipientSecret(secret, id string) (string, error) {
	return deriveSecret(secret, recipientPurpose(id))
}

// NotifierSecret returns the signing secret of notifier name's
// notifier-level (bulk) webhook: as RecipientSecret, over "notifier:" + name.
func NotifierSecret(secret, name string) (string, error) {
	return deriveSecret(secret, notifierPurpose(name))
}

func recipientPurpose(id string) string  { return "recipient:" + id }
func notifierPurpose(name string) string { return "notifier:" + name }

func deriveSecret(secret, purpose string) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(deriveKey(key, purpose)), nil
}

// deriveKey is a destination's HMAC key: HMAC-SHA256(key, purpose). The
// purposes "recipient:<id>" and "notifier:<name>" cannot collide, and an id
// cannot contain the other prefix's meaning, because the kind comes first.
func deriveKey(key []byte, purpose string) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(purpose))
	return mac.Sum(nil)
}

// sign computes "v1,<base64 HMAC-SHA256(key, id.ts.body)>".
func sign(key []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, ts, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// secretKey returns the HMAC key a secret stands for.
func secretKey(secret string) ([]byte, error) {
	if secret == "" {
		return nil, errors.New("webhook secret is empty")
	}
	rest, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(rest)
	}
	if err != nil {
		// Do not quote the secret in the error: it ends up in logs.
		return nil, errors.New("webhook secret starts with whsec_ but the rest is not valid base64")
	}
	if len(key) == 0 {
		return nil, errors.New("webhook secret whsec_ has an empty key")
	}
	return key, nil
}
