package httpapi_test

import (
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/internal/wire"
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
	now := fixedNow // the test server's clock
	valid := jwt.RegisteredClaims{Subject: "u1", IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}
	crit := jwt.NewWithClaims(jwt.SigningMethodHS256, valid)
	crit.Header["crit"] = []string{"exp"}
	critTok, err := crit.SignedString([]byte(tokenSecret))
	if err != nil {
		t.Fatal(err)
	}

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
		{"no iat", signed(t, jwt.SigningMethodHS256, []byte(tokenSecret),
			jwt.RegisteredClaims{Subject: "u1", ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))})},
		{"crit header", critTok},
		{"lifetime over http.max_token_ttl", signed(t, jwt.SigningMethodHS256, []byte(tokenSecret),
			jwt.RegisteredClaims{Subject: "u1", IssuedAt: jwt.NewNumericDate(now.Add(-time.Hour)), ExpiresAt: jwt.NewNumericDate(now.Add(24 * time.Hour))})},
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
				expect(t, r, 401, wire.CodeUnauthorized)
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
		expect(t, b.do(t, "POST", "/v1/notifications", token, body), 401, wire.CodeUnauthorized)
		expect(t, b.do(t, "GET", "/v1/recipients/u1", token, nil), 401, wire.CodeUnauthorized)
		expect(t, b.do(t, "GET", "/v1/recipients/u1/inbox", token, nil), 401, wire.CodeUnauthorized)
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
		expect(t, b.do(t, "GET", "/v1/recipients/u1", token, nil), 401, wire.CodeUnauthorized)
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
	expect(t, b.do(t, "GET", "/v1/inbox/counts", recipientToken(t, "u1"), nil), 401, wire.CodeUnauthorized)
}

// A recipient token expires by the server's clock: the same token is
// accepted before its exp and refused after, with no waiting.
func TestRecipientTokenExpiresByTheServersClock(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("test.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(fixedNow.UnixNano())
	s := httpapi.New(httpapi.Options{Pool: pgtest.NewDB(t), Config: cfg, Registry: builtin.MustRegistry(),
		Clock: func() time.Time { return time.Unix(0, now.Load()).UTC() }})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	b := &bundle{cfg: cfg, srv: srv}

	tok, err := notifyd.RecipientTokenAt(tokenSecret, "u1", time.Minute, fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		at     time.Duration // after minting
		status int
	}{{0, 200}, {59 * time.Second, 200}, {61 * time.Second, 401}, {time.Hour, 401}} {
		now.Store(fixedNow.Add(step.at).UnixNano())
		r := b.do(t, "GET", "/v1/inbox/counts", tok, nil)
		want := ""
		if step.status == 401 {
			want = wire.CodeUnauthorized
		}
		expect(t, r, step.status, want)
		if step.status == 401 && !strings.Contains(r.errMessage(), "expired") {
			t.Fatalf("%v after minting: %v, want an expired token", step.at, r.body)
		}
	}
}
