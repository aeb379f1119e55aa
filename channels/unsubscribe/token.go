// Package unsubscribe mints and checks the tokens of one-click unsubscribe
// links (RFC 8058): the email channel puts a token in each message's
// List-Unsubscribe header, and POST /v1/unsubscribe/{token} turns it back
// into the preference rules it names.
//
// A token is base64url(payload) "." base64url(mac). The payload names the
// channel, the recipient, when the token was issued and when it expires, and
// the preference scopes ("category:comments", or
// "notifier:<n>" for a notifier without a category; a digest may name
// several); the mac is HMAC-SHA256 over the payload with a key derived from
// http.token_secret for this use only (HMAC(token_secret, Domain)), so a
// token can never be confused with a recipient JWT or a webhook signature
// made from the same secret, and vice versa. The token is URL-safe, so no
// recipient id can put a second URI or a line break into the header.
//
// Tokens expire (channels.email.unsubscribe_ttl, DefaultTTL: 60 days, long
// enough for a mailbox provider to follow the link weeks after the message
// arrived, and for the laws that want a link to work 30 days): a link found
// in an old mailbox, a forwarded message or a log cannot change a
// recipient's preferences for ever. Tokens of the first format (version 1)
// carried no dates and are no longer accepted. Rotating http.token_secret
// invalidates every link already sent.
package unsubscribe

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Domain separates the unsubscribe key from every other use of
// http.token_secret.
const Domain = "notifyd/v1/unsubscribe-token"

// version is the payload's first field: 2 carries the issue and expiry
// instants (1, without them, is refused).
const version = "2"

// DefaultTTL is how long a token is valid when channels.email.unsubscribe_ttl
// is not set.
const DefaultTTL = 60 * 24 * time.Hour

// MaxScopes bounds the scopes one token names (a digest of many categories).
const MaxScopes = 32

// macLen is the length of the mac kept in the token: 128 bits.
const macLen = 16

// Token is what a link unsubscribes: Recipient from Channel for each of
// Scopes, from IssuedAt until Expires (second precision).
type Token struct {
	Channel   string
	Recipient string
	Scopes    []string
	// IssuedAt is when the token was minted; zero signs it as now.
	IssuedAt time.Time
	// Expires is when the link stops working; zero signs it as IssuedAt
	// plus DefaultTTL.
	Expires time.Time
}

// ErrInvalid is the error of a token that does not parse or whose mac does
// not match (tampered with, or made with another secret).
var ErrInvalid = errors.New("invalid unsubscribe token")

// ErrExpired is the error of a genuine token past its expiry.
var ErrExpired = errors.New("expired unsubscribe token")

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
	if t.IssuedAt.IsZero() {
		t.IssuedAt = time.Now()
	}
	if t.Expires.IsZero() {
		t.Expires = t.IssuedAt.Add(DefaultTTL)
	}
	if !t.Expires.After(t.IssuedAt) {
		return "", errors.New("unsubscribe token expires before it is issued")
	}
	fields := append([]string{version, t.Channel, t.Recipient,
		strconv.FormatInt(t.IssuedAt.Unix(), 10), strconv.FormatInt(t.Expires.Unix(), 10)}, t.Scopes...)
	for _, f := range fields {
		if f == "" || strings.IndexByte(f, 0) >= 0 || !utf8.ValidString(f) {
			return "", fmt.Errorf("unsubscribe token field %q is empty or not valid text", f)
		}
	}
	payload := []byte(strings.Join(fields, "\x00"))
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(s.mac(payload)), nil
}

// Verify is VerifyAt now.
func (s *Signer) Verify(tok string) (Token, error) { return s.VerifyAt(tok, time.Now()) }

// VerifyAt checks tok at instant now and returns what it names. Any token
// this Signer did not make (or of the first format, which had no expiry) is
// ErrInvalid, one it made that expired at or before now ErrExpired; the mac
// is compared in constant time.
func (s *Signer) VerifyAt(tok string, now time.Time) (Token, error) {
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
	if len(fields) < 6 || string(fields[0]) != version || len(fields)-5 > MaxScopes {
		return Token{}, ErrInvalid
	}
	iat, err1 := strconv.ParseInt(string(fields[3]), 10, 64)
	exp, err2 := strconv.ParseInt(string(fields[4]), 10, 64)
	if err1 != nil || err2 != nil {
		return Token{}, ErrInvalid
	}
	t := Token{Channel: string(fields[1]), Recipient: string(fields[2]), IssuedAt: time.Unix(iat, 0).UTC(),
		Expires: time.Unix(exp, 0).UTC()}
	for _, f := range fields[5:] {
		t.Scopes = append(t.Scopes, string(f))
	}
	if !now.Before(t.Expires) {
		return Token{}, ErrExpired
	}
	return t, nil
}

func (s *Signer) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(payload)
	return m.Sum(nil)[:macLen]
}
