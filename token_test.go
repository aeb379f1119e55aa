package notifyd_test

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/notifyd/notifyd"
)

// TestVerifyRecipientTokenLifetime: a token must carry iat, may not carry a
// crit header, and lives at most the cap; RecipientToken's tokens pass.
func TestVerifyRecipientTokenLifetime(t *testing.T) {
	t.Parallel()
	const secret = "s3cret"
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sign := func(t *testing.T, claims jwt.MapClaims, header map[string]any) string {
		t.Helper()
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
		for k, v := range header {
			tok.Header[k] = v
		}
		s, err := tok.SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	minted, err := notifyd.RecipientTokenAt(secret, "u2", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	long, err := notifyd.RecipientTokenAt(secret, "u2", 25*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	exp := now.Add(time.Hour).Unix()
	for _, tt := range []struct {
		name, token, want string
	}{
		{"minted by RecipientToken", minted, ""},
		{"no iat", sign(t, jwt.MapClaims{"sub": "u2", "exp": exp}, nil), "no iat"},
		{"crit header", sign(t, jwt.MapClaims{"sub": "u2", "exp": exp, "iat": now.Unix()}, map[string]any{"crit": []string{"exp"}}), "crit"},
		{"over the cap", long, "http.max_token_ttl"},
		{"iat ten years ahead", sign(t, jwt.MapClaims{"sub": "u2", "iat": now.AddDate(10, 0, 0).Unix(),
			"exp": now.AddDate(10, 0, 0).Add(time.Hour).Unix()}, nil), "in the future"},
		{"iat 62 s ahead", sign(t, jwt.MapClaims{"sub": "u2", "iat": now.Add(62 * time.Second).Unix(),
			"exp": now.Add(time.Hour).Unix()}, nil), "in the future"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := notifyd.VerifyRecipientToken(secret, tt.token, now.Add(time.Second), 24*time.Hour)
			if tt.want == "" {
				if err != nil || c.Recipient != "u2" || !c.IssuedAt.Equal(now) || !c.ExpiresAt.Equal(now.Add(24*time.Hour)) {
					t.Fatalf("= %+v, %v", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
	// An iat within the clock skew is accepted.
	ahead := sign(t, jwt.MapClaims{"sub": "u2", "iat": now.Add(50 * time.Second).Unix(), "exp": now.Add(time.Hour).Unix()}, nil)
	if _, err := notifyd.VerifyRecipientToken(secret, ahead, now, 24*time.Hour); err != nil {
		t.Fatalf("a token issued 50 s ahead: %v", err)
	}
	// ParseRecipientToken requires iat and refuses crit too, but has no cap.
	if _, err := notifyd.ParseRecipientTokenAt(secret, sign(t, jwt.MapClaims{"sub": "u2", "exp": exp}, nil), now); err == nil {
		t.Fatal("ParseRecipientToken accepted a token without iat")
	}
	if id, err := notifyd.ParseRecipientTokenAt(secret, long, now); err != nil || id != "u2" {
		t.Fatalf("ParseRecipientToken of a long token = %q, %v", id, err)
	}
}
