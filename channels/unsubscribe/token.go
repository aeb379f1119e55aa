// Package unsubscribe mints and checks the tokens of one-click unsubscribe
// links (RFC 8058): the email channel puts a token in each message's
// List-Unsubscribe header, and POST /v1/unsubscribe/{token} turns it back
// into the preference rules it names.
//
// A token is base64url(payload) "." base64url(mac). The payload names the
// channel, the recipient and the preference scopes ("category:comments", or
// "notifier:<n>" for a notifier without a category; a digest may name
// several); the mac is HMAC-SHA256 over the payload with a key derived from
// http.token_secret for this use only (HMAC(token_secret, Domain)), so a
// token can never be confused with a recipient JWT or a webhook signature
// made from the same secret, and vice versa. The token is URL-safe, so no
// recipient id can put a second URI or a line break into the header.
//
// Tokens do not expire: a mailbox provider may follow the link days after
// the message arrived, and the unsubscribe must still work. Rotating
// http.token_secret invalidates every link already sent.
package unsubscribe

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Domain separates the unsubscribe key from every other use of
// http.token_secret.
const Domain = "notifyd/v1/unsubscribe-token"

// version is the payload's first field.
const version = "1"

// MaxScopes bounds the scopes one token names (a digest of many categories).
const MaxScopes = 32

// macLen is the length of the mac kept in the token: 128 bits.
const macLen = 16

// Token is what a link unsubscribes: Recipient from Channel for each of
// Scopes.
type Token struct {
	Channel   string
	Recipient string
	Scopes    []string
}

// ErrInvalid is the error of a token that does not parse or whose mac does
// not match (tampered with, or made with another secret).
var ErrInvalid = errors.New("invalid unsubscribe token")

// Signer mints and checks tokens with one key. The zero value is not usable:
// use NewSigner.
type Signer struct {
	key []byte
}

// NewSigner derives the token key from secret (http.token_secret). An empty
// secret is an error: tokens anyone could forge are worse than none.
func NewSigner(secret string) (*Signer, error) {
	if secret == "" {
		return nil, errors.New("unsubscribe tokens need http.token_secret")
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(Domain))
	return &Signer{key: m.Sum(nil)}, nil
}

// Sign returns the token for t. Fields may not contain NUL (PostgreSQL text
// cannot either); t must name a channel, a recipient and 1..MaxScopes scopes.
func (s *Signer) Sign(t Token) (string, error) {
	if t.Channel == "" || t.Recipient == "" || len(t.Scopes) == 0 || len(t.Scopes) > MaxScopes {
		return "", fmt.Errorf("unsubscribe token needs a channel, a recipient and 1 to %d scopes", MaxScopes)
	}
	fields := append([]string{version, t.Channel, t.Recipient}, t.Scopes...)
	for _, f := range fields {
		if f == "" || strings.IndexByte(f, 0) >= 0 || !utf8.ValidString(f) {
			return "", fmt.Errorf("unsubscribe token field %q is empty or not valid text", f)
		}
	}
	payload := []byte(strings.Join(fields, "\x00"))
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(s.mac(payload)), nil
}

// Verify checks tok and returns what it names. Any token this Signer did not
// make is ErrInvalid; the mac is compared in constant time.
func (s *Signer) Verify(tok string) (Token, error) {
	p, m, ok := strings.Cut(tok, ".")
	if !ok || len(tok) > 8192 {
		return Token{}, ErrInvalid
	}
	enc := base64.RawURLEncoding.Strict() // one spelling per token
	payload, err1 := enc.DecodeString(p)
	mac, err2 := enc.DecodeString(m)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, s.mac(payload)) {
		return Token{}, ErrInvalid
	}
	fields := bytes.Split(payload, []byte{0})
	if len(fields) < 4 || string(fields[0]) != version || len(fields)-3 > MaxScopes {
		return Token{}, ErrInvalid
	}
	t := Token{Channel: string(fields[1]), Recipient: string(fields[2])}
	for _, f := range fields[3:] {
		t.Scopes = append(t.Scopes, string(f))
	}
	return t, nil
}

func (s *Signer) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(payload)
	return m.Sum(nil)[:macLen]
}
