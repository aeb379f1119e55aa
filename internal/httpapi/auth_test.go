package httpapi_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/notifyd/notifyd/internal/httpapi"
)

func signed(t *testing.T, method jwt.SigningMethod, key any, claims jwt.Claims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestRecipientTokens(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now()
	valid := jwt.RegisteredClaims{Subject: "u1", ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}

	tests := []struct {
		name  string
		token string
	}{
		{"missing", ""},
		{"garbage", "not-a-jwt"},
		{"expired", signed(t, jwt.SigningMethodHS256, []byte(tokenSecret),
			jwt.RegisteredClaims{Subject: "u1", ExpiresAt: jwt.NewNumericDate(now.Add(-time.Minute))})},
		{"forged (wrong secret)", signed(t, jwt.SigningMethodHS256, []byte("another-secret"), valid)},
		{"alg none", signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, valid)},
		{"wrong alg (HS512)", signed(t, jwt.SigningMethodHS512, []byte(tokenSecret), valid)},
		{"no exp", signed(t, jwt.SigningMethodHS256, []byte(tokenSecret), jwt.RegisteredClaims{Subject: "u1"})},
		{"no subject", signed(t, jwt.SigningMethodHS256, []byte(tokenSecret),
			jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))})},
		{"admin token", adminToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, ep := range []struct{ method, path string }{
				{"GET", "/v1/inbox"}, {"GET", "/v1/inbox/counts"}, {"POST", "/v1/inbox/read"},
			} {
				var body any
				if ep.method == "POST" {
					body = `{"all":true}`
				}
				r := b.do(t, ep.method, ep.path, tt.token, body)
				expect(t, r, 401, httpapi.CodeUnauthorized)
				if r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s %s: 401 without WWW-Authenticate", ep.method, ep.path)
				}
			}
		})
	}

	// The control: the same endpoints with a good token.
	expect(t, b.do(t, "GET", "/v1/inbox", signed(t, jwt.SigningMethodHS256, []byte(tokenSecret), valid), nil), 200, "")
}

func TestAdminToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"notifier":"comment.created","key":"k1","recipients":["u1"],"params":{"post_title":"Hi"}}`
	for name, token := range map[string]string{
		"missing":         "",
		"wrong":           "admin-secreT",
		"prefix":          "admin-secre",
		"recipient token": recipientToken(t, "u1"),
	} {
		expect(t, b.do(t, "POST", "/v1/notifications", token, body), 401, httpapi.CodeUnauthorized)
		expect(t, b.do(t, "GET", "/v1/recipients/u1", token, nil), 401, httpapi.CodeUnauthorized)
		expect(t, b.do(t, "GET", "/v1/recipients/u1/inbox", token, nil), 401, httpapi.CodeUnauthorized)
		_ = name
	}
	if n := count(t, b.pool, `SELECT count(*) FROM notify_notifications`); n != 0 {
		t.Fatalf("%d notifications written by unauthorised requests", n)
	}
	expect(t, b.do(t, "POST", "/v1/notifications", adminToken, body), 202, "")
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: `
http: {token_secret: ` + tokenSecret + `}
notifiers:
  comment.created:
    channels: {in_app: {title: "x"}}
`})
	for _, token := range []string{"", "anything", " "} {
		expect(t, b.do(t, "GET", "/v1/recipients/u1", token, nil), 401, httpapi.CodeUnauthorized)
	}
	// Recipient endpoints still work.
	expect(t, b.do(t, "GET", "/v1/inbox/counts", recipientToken(t, "u1"), nil), 200, "")
}

func TestRecipientDisabledWithoutSecret(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: `
http: {admin_token: ` + adminToken + `}
notifiers:
  comment.created:
    channels: {in_app: {title: "x"}}
`})
	expect(t, b.do(t, "GET", "/v1/inbox/counts", recipientToken(t, "u1"), nil), 401, httpapi.CodeUnauthorized)
}
