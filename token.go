package notifyd

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// RecipientToken mints the JWT a recipient's browser or app presents to the
// recipient endpoints (/v1/inbox, /v1/preferences, the stream). It is HS256
// signed with the daemon's http.token_secret, its subject is the recipient id,
// and it expires after ttl (which must be positive: tokens without expiry are
// refused by the daemon).
func RecipientToken(secret, recipient string, ttl time.Duration) (string, error) {
	return RecipientTokenAt(secret, recipient, ttl, time.Now())
}

// RecipientTokenAt is RecipientToken for a token issued at now instead of
// the current time: it expires at now+ttl. Tests and programs with a clock
// of their own mint with it.
func RecipientTokenAt(secret, recipient string, ttl time.Duration, now time.Time) (string, error) {
	return TenantRecipientTokenAt(secret, recipient, "", ttl, now)
}

// TenantRecipientToken is RecipientToken with a tenant claim: the token
// reads, marks and streams only that tenant's inbox items and preferences.
// An empty tenant mints a token without the claim.
func TenantRecipientToken(secret, recipient, tenant string, ttl time.Duration) (string, error) {
	return TenantRecipientTokenAt(secret, recipient, tenant, ttl, time.Now())
}

// TenantRecipientTokenAt is TenantRecipientToken for a token issued at now.
func TenantRecipientTokenAt(secret, recipient, tenant string, ttl time.Duration, now time.Time) (string, error) {
	if secret == "" {
		return "", errors.New("recipient token: empty secret")
	}
	if recipient == "" || len(recipient) > 255 {
		return "", errors.New("recipient token: recipient id must be 1 to 255 bytes")
	}
	if ttl <= 0 {
		return "", errors.New("recipient token: ttl must be positive")
	}
	if tenant != "" {
		if err := CheckTenantID("tenant", tenant); err != nil {
			return "", fmt.Errorf("recipient token: %w", err)
		}
	}
	claims := tokenClaims{RegisteredClaims: jwt.RegisteredClaims{
		Subject:   recipient,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}, Tenant: tenant}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		return "", fmt.Errorf("recipient token: %w", err)
	}
	return tok, nil
}

// ParseRecipientToken verifies token against secret and returns its recipient
// id. It accepts only HS256, requires exp (and rejects an expired token), iat
// and a non-empty subject, and refuses a token with a crit header. It does not
// cap the lifetime: the daemon does, at http.max_token_ttl (VerifyRecipientToken).
func ParseRecipientToken(secret, token string) (string, error) {
	return ParseRecipientTokenAt(secret, token, time.Now())
}

// ParseRecipientTokenAt is ParseRecipientToken with now as the current time:
// a token whose exp is not after now is expired. A zero now means time.Now.
func ParseRecipientTokenAt(secret, token string, now time.Time) (string, error) {
	c, err := VerifyRecipientToken(secret, token, now, 0)
	return c.Recipient, err
}

// RecipientClaims are what a verified recipient token says.
type RecipientClaims struct {
	Recipient string    // the subject
	IssuedAt  time.Time // iat, second precision
	ExpiresAt time.Time // exp, second precision
	// Tenant is the token's tenant claim: the token reaches only that
	// tenant's items and preferences. Empty: no claim.
	Tenant string
}

// tokenClaims are a recipient token's claims: the registered ones and the
// optional tenant.
type tokenClaims struct {
	jwt.RegisteredClaims
	Tenant string `json:"tenant,omitempty"`
}

// TokenClockSkew is how far ahead of the verifier's clock a recipient token's
// iat may be: the minting program's clock may run a little ahead.
const TokenClockSkew = 60 * time.Second

// VerifyRecipientToken is ParseRecipientTokenAt that returns the token's
// claims and, when maxTTL is positive, refuses a token whose lifetime
// (exp − iat) is longer than maxTTL. A token whose iat is more than
// TokenClockSkew after now is refused: issued "in ten years" with exp an hour
// later, it would be valid for ten years, and a recipient's
// tokens_valid_after (which revokes tokens issued before it) could not
// revoke it. A zero now means time.Now.
func VerifyRecipientToken(secret, token string, now time.Time, maxTTL time.Duration) (RecipientClaims, error) {
	if now.IsZero() {
		now = time.Now()
	}
	if secret == "" {
		return RecipientClaims{}, errors.New("recipient tokens are disabled (no http.token_secret)")
	}
	var claims tokenClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		// RFC 7515 §4.1.11: a recipient must refuse a token whose crit
		// header names an extension it does not understand, and notifyd
		// understands none.
		if _, ok := t.Header["crit"]; ok {
			return nil, errors.New("token has a crit header (no extensions are supported)")
		}
		return []byte(secret), nil
	},
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }))
	if err != nil {
		return RecipientClaims{}, err
	}
	if s := claims.Subject; s == "" || len(s) > 255 || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return RecipientClaims{}, errors.New("token has no valid subject (a recipient id of 1 to 255 bytes of UTF-8 text)")
	}
	if claims.IssuedAt == nil {
		return RecipientClaims{}, errors.New("token has no iat (issued-at) claim")
	}
	if claims.Tenant != "" {
		if err := CheckTenantID("tenant", claims.Tenant); err != nil {
			return RecipientClaims{}, fmt.Errorf("token has an invalid tenant claim: %w", err)
		}
	}
	c := RecipientClaims{Recipient: claims.Subject, IssuedAt: claims.IssuedAt.Time, ExpiresAt: claims.ExpiresAt.Time,
		Tenant: claims.Tenant}
	if c.IssuedAt.After(now.Add(TokenClockSkew)) {
		return RecipientClaims{}, fmt.Errorf("token iat %s is in the future (more than %s after now)",
			c.IssuedAt.UTC().Format(time.RFC3339), TokenClockSkew)
	}
	if life := c.ExpiresAt.Sub(c.IssuedAt); maxTTL > 0 && life > maxTTL {
		return RecipientClaims{}, fmt.Errorf("token lifetime (exp - iat) %s is longer than http.max_token_ttl %s", life, maxTTL)
	}
	return c, nil
}
