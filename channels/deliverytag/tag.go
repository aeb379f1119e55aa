// Package deliverytag mints and checks the delivery tags a sent message
// carries in the fields its provider echoes back with its events (SES
// message tags, SendGrid custom args, Postmark metadata, Mailgun
// variables), so POST /v1/providers/{kind}/events can name the delivery an
// event is about even when the provider's message id is not known.
//
// A tag is the delivery id, "_", and base64url of the first 96 bits of
// HMAC-SHA256 over the id, keyed with HMAC(http.token_secret, Domain): a tag
// cannot be forged or moved to another delivery without the secret, and it
// uses only characters every provider allows in a tag value (letters,
// digits, "-", "_": Resend allows no more). Rotating http.token_secret makes the tags of
// messages already sent match nothing; their events are still matched by
// the provider's message id.
package deliverytag

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// Domain separates the tag key from every other use of http.token_secret.
const Domain = "notifyd/v1/delivery-tag"

// Field is the name of the tag, metadata key or variable the tag goes in.
const Field = "notifyd_delivery"

const macLen = 12

// Signer mints and checks tags with one key. Use New.
type Signer struct {
	key []byte
}

// New returns a Signer keyed by secret (http.token_secret); an empty secret
// is an error.
func New(secret string) (*Signer, error) {
	if secret == "" {
		return nil, errors.New("delivery tags need http.token_secret")
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(Domain))
	return &Signer{key: m.Sum(nil)}, nil
}

func (s *Signer) mac(id string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:macLen])
}

// Tag is delivery id's tag.
func (s *Signer) Tag(id string) string { return id + "_" + s.mac(id) }

// Delivery returns the delivery id tag names, and false when tag is not one
// this Signer made (malformed, forged, another secret's, or a bare id).
func (s *Signer) Delivery(tag string) (string, bool) {
	// A delivery id has no "_"; the mac may.
	id, mac, ok := strings.Cut(tag, "_")
	if !ok || id == "" || len(tag) > 100 {
		return "", false
	}
	if !hmac.Equal([]byte(mac), []byte(s.mac(id))) {
		return "", false
	}
	return id, true
}
