package httpapi_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/channels/unsubscribe"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/httpapi"
	sse "github.com/notifyd/notifyd/internal/stream"
	"github.com/notifyd/notifyd/internal/wire"
)

// hostileConfig has a notifier with a params schema, and one whose
// max_recipients is the default 10,000, for the over-the-limit request.
const hostileConfig = `
http: {admin_token: ` + adminToken + `, token_secret: ` + tokenSecret + `}
notifiers:
  comment.created:
    category: comments
    max_recipients: 3
    params:
      type: object
      required: [post_title]
      properties:
        post_title: {type: string, maxLength: 100}
        author_name: {type: string}
    channels:
      in_app: {title: "{{.author_name}} commented on {{.post_title}}"}
      email: {subject: "New comment on {{.post_title}}", text: "{{.author_name}} wrote"}
  bulk.notice:
    channels:
      in_app: {title: "notice"}
`

// tableState is a table's row count and a digest of its whole content, so
// an UPDATE is caught as well as an INSERT or a DELETE.
type tableState struct {
	rows   int
	digest string
}

// dbState reads every notify_* table and river_job.
func dbState(t *testing.T, pool *pgxpool.Pool) map[string]tableState {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
		  AND (table_name LIKE 'notify\_%' OR table_name = 'river_job')
		ORDER BY table_name`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tables, "notify_inbox") || !slices.Contains(tables, "river_job") {
		t.Fatalf("tables found: %v", tables)
	}
	out := make(map[string]tableState, len(tables))
	for _, name := range tables {
		var s tableState
		q := fmt.Sprintf(`SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM %s t`,
			pgx.Identifier{name}.Sanitize())
		if err := pool.QueryRow(t.Context(), q).Scan(&s.rows, &s.digest); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		out[name] = s
	}
	return out
}

// changedTables names the tables whose content differs between two states.
func changedTables(before, after map[string]tableState) []string {
	var out []string
	for name, b := range before {
		if a, ok := after[name]; !ok || a != b {
			out = append(out, fmt.Sprintf("%s (%d rows -> %d)", name, b.rows, after[name].rows))
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			out = append(out, name+" (new)")
		}
	}
	slices.Sort(out)
	return out
}

// hostileTokens builds every kind of bad recipient token for subject u1.
func hostileTokens(t *testing.T) map[string]string {
	t.Helper()
	now := fixedNow // the test server's clock
	valid := jwt.RegisteredClaims{Subject: "u1", IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}
	crit := jwt.NewWithClaims(jwt.SigningMethodHS256, valid)
	crit.Header["crit"] = []string{"exp"}
	critTok, err := crit.SignedString([]byte(tokenSecret))
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	// An "HS256" token signed with the RSA public key's bytes: the classic
	// algorithm-confusion forgery against verifiers that trust the header.
	pub, err := json.Marshal(rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	// A token whose header says alg none and carries no signature at all.
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString(mustJSON(t, valid)) + "."
	good := recipientToken(t, "u1")
	return map[string]string{
		"absent":                      "",
		"garbage":                     "not.a.jwt",
		"expired":                     signed(t, jwt.SigningMethodHS256, []byte(tokenSecret), jwt.RegisteredClaims{Subject: "u1", ExpiresAt: jwt.NewNumericDate(now.Add(-time.Minute))}),
		"no exp":                      signed(t, jwt.SigningMethodHS256, []byte(tokenSecret), jwt.RegisteredClaims{Subject: "u1"}),
		"not yet valid":               signed(t, jwt.SigningMethodHS256, []byte(tokenSecret), jwt.RegisteredClaims{Subject: "u1", ExpiresAt: valid.ExpiresAt, NotBefore: jwt.NewNumericDate(now.Add(time.Hour))}),
		"wrong secret":                signed(t, jwt.SigningMethodHS256, []byte("not-the-secret"), valid),
		"admin token as secret":       signed(t, jwt.SigningMethodHS256, []byte(adminToken), valid),
		"alg none":                    none,
		"alg none (library)":          signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, valid),
		"wrong alg HS512":             signed(t, jwt.SigningMethodHS512, []byte(tokenSecret), valid),
		"wrong alg HS384":             signed(t, jwt.SigningMethodHS384, []byte(tokenSecret), valid),
		"wrong alg RS256":             signed(t, jwt.SigningMethodRS256, rsaKey, valid),
		"HS256 keyed with RSA pub":    signed(t, jwt.SigningMethodHS256, pub, valid),
		"empty subject":               signed(t, jwt.SigningMethodHS256, []byte(tokenSecret), jwt.RegisteredClaims{ExpiresAt: valid.ExpiresAt}),
		"subject over 255 bytes":      signed(t, jwt.SigningMethodHS256, []byte(tokenSecret), jwt.RegisteredClaims{Subject: strings.Repeat("u", 256), ExpiresAt: valid.ExpiresAt}),
		"admin token":                 adminToken,
		"truncated signature":         good[:len(good)-3],
		"no iat":                      signed(t, jwt.SigningMethodHS256, []byte(tokenSecret), jwt.RegisteredClaims{Subject: "u1", ExpiresAt: valid.ExpiresAt}),
		"crit header":                 critTok,
		"lifetime over max_token_ttl": signed(t, jwt.SigningMethodHS256, []byte(tokenSecret), jwt.RegisteredClaims{Subject: "u1", IssuedAt: jwt.NewNumericDate(now.Add(-time.Hour)), ExpiresAt: jwt.NewNumericDate(now.Add(24 * time.Hour))}),
		"iat ten years ahead":         signed(t, jwt.SigningMethodHS256, []byte(tokenSecret), jwt.RegisteredClaims{Subject: "u1", IssuedAt: jwt.NewNumericDate(now.AddDate(10, 0, 0)), ExpiresAt: jwt.NewNumericDate(now.AddDate(10, 0, 0).Add(time.Hour))}),
		"payload swapped":             strings.Join([]string{strings.Split(good, ".")[0], base64.RawURLEncoding.EncodeToString(mustJSON(t, jwt.RegisteredClaims{Subject: "u2", ExpiresAt: valid.ExpiresAt})), strings.Split(good, ".")[2]}, "."),
	}
}

// firstFormatUnsubscribe is an unsubscribe token of the first format
// (version 1: channel, recipient and scopes, no dates), correctly signed.
func firstFormatUnsubscribe(t *testing.T, recipient string, scopes ...string) string {
	t.Helper()
	k := hmac.New(sha256.New, []byte(tokenSecret))
	k.Write([]byte(unsubscribe.Domain))
	payload := []byte(strings.Join(append([]string{"1", "email", recipient}, scopes...), "\x00"))
	m := hmac.New(sha256.New, k.Sum(nil))
	m.Write(payload)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(m.Sum(nil)[:16])
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// forgedCursor is an inbox cursor with a correct check sum (anyone can
// compute it: it is not a secret) around an absurd timestamp.
func forgedCursor(micros int64) string {
	var b [29]byte
	b[0] = 1
	binary.BigEndian.PutUint64(b[1:9], uint64(micros))
	copy(b[9:25], []byte("0123456789abcdef"))
	sum := sha256.Sum256(b[:25])
	copy(b[25:], sum[:4])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// TestHostileRequests sends bad requests to every endpoint: each
// is answered with its 4xx and error code, and none writes anything: every
// notify_* table and river_job has the same content before and after,
// compared row by row through a digest.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: hostileConfig})
	u1, u2 := recipientToken(t, "u1"), recipientToken(t, "u2")
	unsubSigner, err := unsubscribe.NewSigner(tokenSecret)
	if err != nil {
		t.Fatal(err)
	}
	expiredUnsubscribe, err := unsubSigner.Sign(unsubscribe.Token{Channel: "email", Recipient: "u1", Scopes: []string{"category:comments"},
		IssuedAt: fixedNow.Add(-unsubscribe.DefaultTTL - time.Hour), Expires: fixedNow.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}

	// Something to attack: two recipients with profiles, inbox items,
	// preferences, a mute, subscriptions and a notification (with its job).
	for _, id := range []string{"u1", "u2"} {
		expect(t, b.do(t, "PUT", "/v1/recipients/"+id, adminToken, map[string]any{"email": id + "@example.com", "timezone": "Europe/Paris"}), 200, "")
		expect(t, b.do(t, "PUT", "/v1/topics/post-9/subscribers/"+id, adminToken, nil), 200, "")
	}
	expect(t, b.do(t, "PUT", "/v1/preferences", u1, `{"rules":[{"scope":"*","channel":"email","mode":"digest"}]}`), 200, "")
	expect(t, b.do(t, "PUT", "/v1/mutes", u2, `{"target":"notifier:comment.created"}`), 200, "")
	expect(t, b.do(t, "POST", "/v1/notifications", adminToken,
		`{"notifier":"comment.created","key":"c1","recipients":["u1","u2"],"params":{"post_title":"Hi"}}`), 202, "")
	u1Items := insertItems(t, b.pool, "u1", "mine", 2, fixedNow.Add(-time.Hour))
	u2Items := insertItems(t, b.pool, "u2", "theirs", 3, fixedNow.Add(-time.Hour))
	expect(t, b.do(t, "POST", "/v1/inbox/read", u2, map[string]any{"ids": u2Items[:1]}), 200, "")
	// A device of u2's, whose id u1 must not reach.
	u2Device := b.do(t, "POST", "/v1/devices", u2, map[string]any{"platform": "ios", "token": strings.Repeat("ab", 32), "app": "com.acme.app"})
	expect(t, u2Device, 201, "")
	u2DeviceID, _ := u2Device.body["id"].(string)

	// A cursor of the subscriptions list (u1 follows two topics; a page of
	// one has a next cursor), to hand to lists that must refuse it.
	expect(t, b.do(t, "PUT", "/v1/topics/post-10/subscribers/u1", adminToken, nil), 200, "")
	subsPage := b.do(t, "GET", "/v1/subscriptions?limit=1", u1, nil)
	expect(t, subsPage, 200, "")
	topicCursor, _ := subsPage.body["next_cursor"].(string)
	if topicCursor == "" {
		t.Fatalf("no subscriptions cursor: %s", subsPage.raw)
	}

	notification := `{"notifier":"comment.created","key":"k2","recipients":["u1"],"params":{"post_title":"x"}}`
	tenThousandAndOne := make([]string, 10001)
	for i := range tenThousandAndOne {
		tenThousandAndOne[i] = fmt.Sprintf("r%d", i)
	}
	overLimit := mustJSON(t, map[string]any{"notifier": "bulk.notice", "key": "k", "recipients": tenThousandAndOne})
	topics := make([]string, 101)
	for i := range topics {
		topics[i] = fmt.Sprintf("topic-%d", i)
	}
	manyTopics := mustJSON(t, map[string]any{"notifier": "comment.created", "key": "k", "topics": topics, "params": map[string]any{"post_title": "x"}})
	copies := make([]string, 31)
	for i := range copies {
		copies[i] = "u1"
	}
	sameRecipient := mustJSON(t, map[string]any{"notifier": "comment.created", "key": "k", "recipients": copies, "params": map[string]any{"post_title": "x"}})
	twoMiB := `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"` + strings.Repeat("x", 2<<20) + `"}}`
	deep := `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x","n":` +
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}}`
	manyIDs := make([]string, 1001)
	for i := range manyIDs {
		manyIDs[i] = u1Items[0]
	}
	tooManyRules := make([]map[string]string, 201)
	for i := range tooManyRules {
		tooManyRules[i] = map[string]string{"scope": fmt.Sprintf("notifier:n%d", i), "channel": "*", "mode": "off"}
	}
	rule := func(scope, channel, mode string) string {
		return fmt.Sprintf(`{"rules":[{"scope":%q,"channel":%q,"mode":%q}]}`, scope, channel, mode)
	}

	tests := []struct {
		name         string
		method, path string
		token        string
		body         any
		status       int
		code         string
	}{
		// POST /v1/notifications.
		{"send: malformed JSON", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created",`, 400, wire.CodeBadRequest},
		{"send: wrong type", "POST", "/v1/notifications", adminToken, `{"notifier":["comment.created"],"key":"k","recipients":["u1"]}`, 400, wire.CodeBadRequest},
		{"send: recipient of the wrong type", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","key":"k","recipients":[true],"params":{"post_title":"x"}}`, 400, wire.CodeBadRequest},
		{"send: unknown field", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x"},"admin":true}`, 400, wire.CodeBadRequest},
		{"send: missing key", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","recipients":["u1"],"params":{"post_title":"x"}}`, 422, wire.CodeInvalidRequest},
		{"send: missing recipients and topics", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","key":"k","params":{"post_title":"x"}}`, 422, wire.CodeInvalidRequest},
		{"send: unknown notifier", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.deleted","key":"k","recipients":["u1"]}`, 404, wire.CodeUnknownNotifier},
		{"send: schema violation (type)", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":7}}`, 422, wire.CodeInvalidParams},
		{"send: schema violation (maxLength)", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"` + strings.Repeat("x", 101) + `"}}`, 422, wire.CodeInvalidParams},
		{"send: schema violation (required)", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"author_name":"x"}}`, 422, wire.CodeInvalidParams},
		{"send: params not an object", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":"x"}`, 400, wire.CodeBadRequest},
		{"send: params nested 20000 deep", "POST", "/v1/notifications", adminToken, deep, 400, wire.CodeBadRequest},
		{"send: 10,001 recipients over max_recipients 10,000", "POST", "/v1/notifications", adminToken, overLimit, 422, wire.CodeTooManyRecipients},
		{"send: 101 topics over http.max_topics 100", "POST", "/v1/notifications", adminToken, manyTopics, 422, httpapi.CodeTooManyTopics},
		{"send: 31 copies of one recipient, over 10x max_recipients before duplicates collapse", "POST", "/v1/notifications", adminToken, sameRecipient, 422, wire.CodeTooManyRecipients},
		{"send: 2 MiB body", "POST", "/v1/notifications", adminToken, twoMiB, 413, wire.CodeBodyTooLarge},
		{"send: invalid UTF-8", "POST", "/v1/notifications", adminToken, "{\"notifier\":\"comment.created\",\"key\":\"\xc3\x28\",\"recipients\":[\"u1\"],\"params\":{\"post_title\":\"x\"}}", 400, wire.CodeBadRequest},
		{"send: NUL in key", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","key":"a\u0000b","recipients":["u1"],"params":{"post_title":"x"}}`, 400, wire.CodeBadRequest},
		{"send: key over 255 bytes", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","key":"` + strings.Repeat("k", 256) + `","recipients":["u1"],"params":{"post_title":"x"}}`, 422, wire.CodeInvalidRequest},
		{"send: send_at garbage", "POST", "/v1/notifications", adminToken, `{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x"},"send_at":"2030-02-30T25:00:00Z"}`, 400, wire.CodeBadRequest},
		{"send: trailing data", "POST", "/v1/notifications", adminToken, notification + `{"x":1}`, 400, wire.CodeBadRequest},
		{"send: empty body", "POST", "/v1/notifications", adminToken, ``, 400, wire.CodeBadRequest},
		{"send: no token", "POST", "/v1/notifications", "", notification, 401, wire.CodeUnauthorized},
		{"send: wrong admin token", "POST", "/v1/notifications", adminToken + "x", notification, 401, wire.CodeUnauthorized},
		{"send: recipient token on an admin endpoint", "POST", "/v1/notifications", u1, notification, 401, wire.CodeUnauthorized},

		// GET /v1/notifications/{id}, DELETE /v1/notifications/{notifier}/{key}.
		{"get notification: not a UUID", "GET", "/v1/notifications/' OR 1=1 --", adminToken, nil, 404, wire.CodeNotFound},
		{"get notification: unknown id", "GET", "/v1/notifications/01900000-0000-7000-8000-000000000000", adminToken, nil, 404, wire.CodeNotFound},
		{"get notification: recipient token", "GET", "/v1/notifications/01900000-0000-7000-8000-000000000000", u1, nil, 401, wire.CodeUnauthorized},
		{"cancel: unknown notification", "DELETE", "/v1/notifications/comment.created/nope", adminToken, nil, 404, wire.CodeNotFound},
		{"cancel: invalid UTF-8 key", "DELETE", "/v1/notifications/comment.created/%ff%fe", adminToken, nil, 400, wire.CodeBadRequest},
		{"cancel: recipient token", "DELETE", "/v1/notifications/comment.created/c1", u1, nil, 401, wire.CodeUnauthorized},
		{"cancel by id: no confirmation", "DELETE", "/v1/notifications/01900000-0000-7000-8000-000000000000", adminToken, nil, 400, wire.CodeBadRequest},
		{"cancel by id: path that climbs", "DELETE", "/v1/notifications/c/../../../recipients/u3", adminToken, nil, 404, wire.CodeNotFound},
		{"cancel by id: dot segment", "DELETE", "/v1/notifications/..?notifier=comment.created&key=c1", adminToken, nil, 404, wire.CodeNotFound},

		// The admin list routes parse their queries strictly: an unknown
		// parameter, a bad percent-encoding, a bad value or a NUL byte is a
		// 400 that names the parameter, never PostgreSQL's error text.
		{"list notifications: NUL in key", "GET", "/v1/notifications?key=%00", adminToken, nil, 400, wire.CodeBadRequest},
		{"list notifications: bad percent-encoding", "GET", "/v1/notifications?status=%zz", adminToken, nil, 400, wire.CodeBadRequest},
		{"list notifications: unknown status", "GET", "/v1/notifications?status=lost", adminToken, nil, 400, wire.CodeBadRequest},
		{"list notifications: unknown parameter", "GET", "/v1/notifications?recipients=u1", adminToken, nil, 400, wire.CodeBadRequest},
		{"list notifications: parameter twice", "GET", "/v1/notifications?key=a&key=b", adminToken, nil, 400, wire.CodeBadRequest},
		{"list notifications: invalid UTF-8", "GET", "/v1/notifications?recipient=%ff", adminToken, nil, 400, wire.CodeBadRequest},
		{"list notifications: key over 255 bytes", "GET", "/v1/notifications?key=" + strings.Repeat("k", 256), adminToken, nil, 400, wire.CodeBadRequest},
		{"notification: progress garbage", "GET", "/v1/notifications/01900000-0000-7000-8000-000000000000?progress=%zz", adminToken, nil, 400, wire.CodeBadRequest},
		{"notification: unknown parameter", "GET", "/v1/notifications/01900000-0000-7000-8000-000000000000?deliveries=all", adminToken, nil, 400, wire.CodeBadRequest},
		{"recipient deliveries: NUL in limit", "GET", "/v1/recipients/u1/deliveries?limit=%00", adminToken, nil, 400, wire.CodeBadRequest},
		{"recipient deliveries: unknown parameter", "GET", "/v1/recipients/u1/deliveries?status=failed", adminToken, nil, 400, wire.CodeBadRequest},
		{"template preview: bad percent-encoding", "GET", "/v1/notifiers/comment.created/preview/in_app?params=%zz", adminToken, nil, 400, wire.CodeBadRequest},
		{"template preview: unknown parameter", "GET", "/v1/notifiers/comment.created/preview/in_app?recipient=u1", adminToken, nil, 400, wire.CodeBadRequest},
		{"template preview: NUL in locale", "GET", "/v1/notifiers/comment.created/preview/in_app?locale=%00", adminToken, nil, 400, wire.CodeBadRequest},
		{"deliveries: NUL in recipient", "GET", "/v1/deliveries?recipient=%00", adminToken, nil, 400, wire.CodeBadRequest},
		{"deliveries: bad percent-encoding", "GET", "/v1/deliveries?status=%zz", adminToken, nil, 400, wire.CodeBadRequest},
		{"deliveries: unknown status", "GET", "/v1/deliveries?status=failed,lost", adminToken, nil, 400, wire.CodeBadRequest},
		{"deliveries: unknown parameter", "GET", "/v1/deliveries?order=asc", adminToken, nil, 400, wire.CodeBadRequest},
		{"deliveries: forged cursor", "GET", "/v1/deliveries?cursor=" + base64.RawURLEncoding.EncodeToString([]byte("1.x")), adminToken, nil, 400, wire.CodeBadCursor},
		{"deliveries: tenant before tenants exist", "GET", "/v1/deliveries?tenant=acme", adminToken, nil, 400, wire.CodeBadRequest},
		{"bulk retry: no time range", "POST", "/v1/deliveries/retry?status=failed", adminToken, nil, 400, wire.CodeBadRequest},
		{"bulk retry: a status that cannot be retried", "POST", "/v1/deliveries/retry?status=sent&since=2030-01-01T00:00:00Z", adminToken, nil, 400, wire.CodeBadRequest},
		{"bulk retry: a body", "POST", "/v1/deliveries/retry?since=2030-01-01T00:00:00Z", adminToken, `{"status":"failed"}`, 400, wire.CodeBadRequest},
		{"bulk retry: recipient token", "POST", "/v1/deliveries/retry?since=2030-01-01T00:00:00Z", u1, nil, 401, wire.CodeUnauthorized},
		{"delivery preview: unknown id", "GET", "/v1/deliveries/01900000-0000-7000-8000-000000000000/preview", adminToken, nil, 404, wire.CodeNotFound},
		{"overview: a parameter", "GET", "/v1/overview?hours=%00", adminToken, nil, 400, wire.CodeBadRequest},
		{"retry: unknown body field", "POST", "/v1/deliveries/01900000-0000-7000-8000-000000000000/retry", adminToken, `{"force":true}`, 400, wire.CodeBadRequest},

		// Recipient profiles: bad values, timezone garbage (the zone decides
		// when a digest is due), ids that are not ids.
		{"profile: unknown time zone", "PUT", "/v1/recipients/u1", adminToken, `{"timezone":"Mars/Olympus_Mons"}`, 422, wire.CodeInvalidRequest},
		{"profile: time zone Local", "PUT", "/v1/recipients/u1", adminToken, `{"timezone":"Local"}`, 422, wire.CodeInvalidRequest},
		{"profile: time zone path traversal", "PUT", "/v1/recipients/u1", adminToken, `{"timezone":"../../../../etc/passwd"}`, 422, wire.CodeInvalidRequest},
		{"profile: time zone absolute path", "PUT", "/v1/recipients/u1", adminToken, `{"timezone":"/etc/localtime"}`, 422, wire.CodeInvalidRequest},
		{"profile: cron spec as time zone", "PUT", "/v1/recipients/u1", adminToken, `{"timezone":"CRON_TZ=UTC */5 * * * *"}`, 422, wire.CodeInvalidRequest},
		{"profile: time zone of the wrong type", "PUT", "/v1/recipients/u1", adminToken, `{"timezone":3600}`, 400, wire.CodeBadRequest},
		{"profile: bad email", "PUT", "/v1/recipients/u1", adminToken, `{"email":"Ada <ada@example.com>"}`, 422, wire.CodeInvalidRequest},
		{"profile: email header injection", "PUT", "/v1/recipients/u1", adminToken, `{"email":"ada@example.com\r\nBcc: all@example.com"}`, 422, wire.CodeInvalidRequest},
		{"profile: bad locale", "PUT", "/v1/recipients/u1", adminToken, `{"locale":"en_US.UTF-8; rm -rf"}`, 422, wire.CodeInvalidRequest},
		{"profile: webhook_url not http", "PUT", "/v1/recipients/u1", adminToken, `{"webhook_url":"file:///etc/passwd"}`, 422, wire.CodeInvalidRequest},
		{"profile: data not an object", "PUT", "/v1/recipients/u1", adminToken, `{"data":[1,2]}`, 400, wire.CodeBadRequest},
		{"profile: id differs from the path", "PUT", "/v1/recipients/u1", adminToken, `{"id":"u2","email":"x@example.com"}`, 422, wire.CodeInvalidRequest},
		{"profile: id over 255 bytes", "PUT", "/v1/recipients/" + strings.Repeat("u", 256), adminToken, `{}`, 400, wire.CodeBadRequest},
		{"profile: invalid UTF-8 id", "PUT", "/v1/recipients/%c3%28", adminToken, `{}`, 400, wire.CodeBadRequest},
		{"profile: recipient token", "PUT", "/v1/recipients/u1", u1, `{"email":"evil@example.com"}`, 401, wire.CodeUnauthorized},
		{"profile: tokens_valid_after not a time", "PUT", "/v1/recipients/u1", adminToken, `{"tokens_valid_after":"yesterday"}`, 422, wire.CodeInvalidRequest},
		{"profile: tokens_valid_after of the wrong type", "PUT", "/v1/recipients/u1", adminToken, `{"tokens_valid_after":1700000000}`, 400, wire.CodeBadRequest},
		{"profile: get unknown", "GET", "/v1/recipients/nobody", adminToken, nil, 404, wire.CodeNotFound},
		{"erase: unknown recipient", "DELETE", "/v1/recipients/nobody", adminToken, nil, 404, wire.CodeNotFound},
		{"erase: recipient token erasing another recipient", "DELETE", "/v1/recipients/u2", u1, nil, 401, wire.CodeUnauthorized},
		{"erase: recipient token erasing itself", "DELETE", "/v1/recipients/u1", u1, nil, 401, wire.CodeUnauthorized},
		{"admin inbox: negative limit", "GET", "/v1/recipients/u1/inbox?limit=-5", adminToken, nil, 400, wire.CodeBadRequest},
		{"admin inbox: recipient token reading another's inbox", "GET", "/v1/recipients/u2/inbox", u1, nil, 401, wire.CodeUnauthorized},

		// Preferences.
		{"preferences: unknown mode", "PUT", "/v1/preferences", u1, rule("*", "*", "sometimes"), 422, httpapi.CodeInvalidPreferences},
		{"preferences: digest on in_app", "PUT", "/v1/preferences", u1, rule("*", "in_app", "digest"), 422, httpapi.CodeInvalidPreferences},
		{"preferences: unknown channel", "PUT", "/v1/preferences", u1, rule("*", "fax", "off"), 422, httpapi.CodeInvalidPreferences},
		{"preferences: unknown scope kind", "PUT", "/v1/preferences", u1, rule("recipient:u2", "*", "off"), 422, httpapi.CodeInvalidPreferences},
		{"preferences: 201 rules", "PUT", "/v1/preferences", u1, map[string]any{"rules": tooManyRules}, 422, httpapi.CodeInvalidPreferences},
		{"preferences: rules missing", "PUT", "/v1/preferences", u1, `{}`, 400, wire.CodeBadRequest},
		{"preferences: rules of the wrong type", "PUT", "/v1/preferences", u1, `{"rules":{"scope":"*"}}`, 400, wire.CodeBadRequest},
		{"preferences: 2 MiB body", "PUT", "/v1/preferences", u1, `{"rules":[],"effective":"` + strings.Repeat("x", 2<<20) + `"}`, 413, wire.CodeBodyTooLarge},
		{"preferences: recipient token on the admin twin", "PUT", "/v1/recipients/u2/preferences", u1, rule("*", "*", "off"), 401, wire.CodeUnauthorized},
		{"preferences: no token", "GET", "/v1/preferences", "", nil, 401, wire.CodeUnauthorized},
		{"preferences: recipient token reading another's", "GET", "/v1/recipients/u2/preferences", u1, nil, 401, wire.CodeUnauthorized},
		{"preferences: admin twin, unknown mode", "PUT", "/v1/recipients/u2/preferences", adminToken, rule("*", "email", "hourly"), 422, httpapi.CodeInvalidPreferences},

		// Mutes.
		{"mutes: unknown notifier", "PUT", "/v1/mutes", u1, `{"target":"notifier:comment.deleted"}`, 422, wire.CodeInvalidRequest},
		{"mutes: target of another kind", "PUT", "/v1/mutes", u1, `{"target":"recipient:u2"}`, 422, wire.CodeInvalidRequest},
		{"mutes: until in the past", "PUT", "/v1/mutes", u1, `{"target":"topic:post-9","until":"2000-01-01T00:00:00Z"}`, 422, wire.CodeInvalidRequest},
		{"mutes: until garbage", "PUT", "/v1/mutes", u1, `{"target":"topic:post-9","until":"next tuesday"}`, 400, wire.CodeBadRequest},
		{"mutes: delete without target", "DELETE", "/v1/mutes", u1, nil, 422, wire.CodeInvalidRequest},
		{"mutes: delete invalid UTF-8 target", "DELETE", "/v1/mutes?target=topic:%ff", u1, nil, 400, wire.CodeBadRequest},
		{"mutes: recipient token on the admin twin", "PUT", "/v1/recipients/u2/mutes", u1, `{"target":"topic:post-9"}`, 401, wire.CodeUnauthorized},
		{"mutes: recipient token listing another's mutes", "GET", "/v1/recipients/u2/mutes", u1, nil, 401, wire.CodeUnauthorized},
		{"mutes: recipient token deleting another's mute", "DELETE", "/v1/recipients/u2/mutes?target=notifier:comment.created", u1, nil, 401, wire.CodeUnauthorized},
		{"mutes: admin twin, bad target", "DELETE", "/v1/recipients/u2/mutes?target=everything", adminToken, nil, 422, wire.CodeInvalidRequest},
		{"mutes: no token", "GET", "/v1/mutes", "", nil, 401, wire.CodeUnauthorized},
		{"mutes: 2 MiB body", "PUT", "/v1/mutes", u1, `{"target":"topic:` + strings.Repeat("t", 2<<20) + `"}`, 413, wire.CodeBodyTooLarge},

		// Topics and subscriptions.
		{"subscribe: reason with spaces", "PUT", "/v1/topics/post-9/subscribers/u1", adminToken, `{"reason":"two words"}`, 422, wire.CodeInvalidRequest},
		{"subscribe: recipient token", "PUT", "/v1/topics/post-9/subscribers/u1", u1, nil, 401, wire.CodeUnauthorized},
		{"unsubscribe: recipient token", "DELETE", "/v1/topics/post-9/subscribers/u2", u1, nil, 401, wire.CodeUnauthorized},

		// One-click unsubscribe links and bounce reports.
		{"one-click unsubscribe: expired link", "POST", "/v1/unsubscribe/" + expiredUnsubscribe, "", nil, 404, wire.CodeNotFound},
		{"one-click unsubscribe: link of the first format, which never expired", "POST", "/v1/unsubscribe/" + firstFormatUnsubscribe(t, "u1", "category:comments"), "", nil, 404, wire.CodeNotFound},
		{"bounces: recipient token", "POST", "/v1/bounces", u1, `{"channel":"email","address":"u1@example.com","kind":"hard"}`, 401, wire.CodeUnauthorized},
		{"subscribers: bad cursor", "GET", "/v1/topics/post-9/subscribers?cursor=garbage", adminToken, nil, 400, wire.CodeBadCursor},
		{"subscribers: cursor of the other list", "GET", "/v1/topics/post-9/subscribers?cursor=" + url.QueryEscape(topicCursor), adminToken, nil, 400, wire.CodeBadCursor},
		{"subscribers: zero limit", "GET", "/v1/topics/post-9/subscribers?limit=0", adminToken, nil, 400, wire.CodeBadRequest},
		{"subscribers: huge limit", "GET", "/v1/topics/post-9/subscribers?limit=9223372036854775808", adminToken, nil, 400, wire.CodeBadRequest},
		{"subscriptions: negative limit", "GET", "/v1/subscriptions?limit=-1", u1, nil, 400, wire.CodeBadRequest},
		{"subscriptions: bad cursor", "GET", "/v1/subscriptions?cursor=AAAAAAAAAAAA", u1, nil, 400, wire.CodeBadCursor},
		{"subscriptions: recipient token on the admin twin", "GET", "/v1/recipients/u2/subscriptions", u1, nil, 401, wire.CodeUnauthorized},
		{"subscriptions: admin twin, id over 255 bytes", "GET", "/v1/recipients/" + strings.Repeat("x", 256) + "/subscriptions", adminToken, nil, 400, wire.CodeBadRequest},

		// Inbox.
		{"inbox: negative limit", "GET", "/v1/inbox?limit=-1", u1, nil, 400, wire.CodeBadRequest},
		{"inbox: huge limit", "GET", "/v1/inbox?limit=" + fmt.Sprint(uint64(math.MaxUint64)), u1, nil, 400, wire.CodeBadRequest},
		{"inbox: limit over the maximum", "GET", "/v1/inbox?limit=201", u1, nil, 400, wire.CodeBadRequest},
		{"inbox: unknown filter", "GET", "/v1/inbox?filter=everything", u1, nil, 400, wire.CodeBadRequest},
		{"inbox: garbage cursor", "GET", "/v1/inbox?cursor=%27%20OR%201%3D1", u1, nil, 400, wire.CodeBadCursor},
		{"inbox: cursor of another list", "GET", "/v1/inbox?cursor=" + url.QueryEscape(topicCursor), u1, nil, 400, wire.CodeBadCursor},
		{"mark read: not a UUID", "POST", "/v1/inbox/read", u1, `{"ids":["1 OR 1=1"]}`, 400, wire.CodeBadRequest},
		{"mark read: ids of the wrong type", "POST", "/v1/inbox/read", u1, `{"ids":"all"}`, 400, wire.CodeBadRequest},
		{"mark read: neither ids nor all", "POST", "/v1/inbox/read", u1, `{}`, 400, wire.CodeBadRequest},
		{"mark read: 1001 ids", "POST", "/v1/inbox/read", u1, map[string]any{"ids": manyIDs}, 400, wire.CodeBadRequest},
		{"archive: all is not allowed", "POST", "/v1/inbox/archive", u1, `{"all":true}`, 400, wire.CodeBadRequest},
		{"unread: malformed JSON", "POST", "/v1/inbox/unread", u1, `{"ids":[`, 400, wire.CodeBadRequest},
		{"seen: invalid UTF-8", "POST", "/v1/inbox/seen", u1, "{\"ids\":[\"\xff\"]}", 400, wire.CodeBadRequest},
		{"counts: admin token", "GET", "/v1/inbox/counts", adminToken, nil, 401, wire.CodeUnauthorized},
		{"inbox: token in the query string", "GET", "/v1/inbox?access_token=" + u1, "", nil, 401, wire.CodeUnauthorized},

		// Query strings that do not parse: r.URL.Query() would drop the bad
		// pair and answer as if it were absent (the first page, or the
		// body's target).
		{"inbox: malformed query", "GET", "/v1/inbox?cursor=%%%garbage", u1, nil, 400, wire.CodeBadRequest},
		{"inbox: malformed pair after a good one", "GET", "/v1/inbox?limit=1&filter=%zz", u1, nil, 400, wire.CodeBadRequest},
		{"admin inbox: malformed query", "GET", "/v1/recipients/u1/inbox?cursor=%%%garbage", adminToken, nil, 400, wire.CodeBadRequest},
		{"subscribers: malformed query", "GET", "/v1/topics/post-9/subscribers?cursor=%%%garbage", adminToken, nil, 400, wire.CodeBadRequest},
		{"subscriptions: malformed query", "GET", "/v1/subscriptions?limit=%G1", u1, nil, 400, wire.CodeBadRequest},
		{"subscriptions: admin twin, malformed query", "GET", "/v1/recipients/u1/subscriptions?cursor=%", adminToken, nil, 400, wire.CodeBadRequest},
		{"mutes: delete with a malformed query", "DELETE", "/v1/mutes?%zz", u2, `{"target":"notifier:comment.created"}`, 400, wire.CodeBadRequest},
		{"mutes: admin twin, delete with a malformed query", "DELETE", "/v1/recipients/u2/mutes?target=%%", adminToken, `{"target":"notifier:comment.created"}`, 400, wire.CodeBadRequest},

		// The webhook secret is the recipient's own, read with its token only.
		{"webhook secret: admin token", "GET", "/v1/webhook-secret", adminToken, nil, 401, wire.CodeUnauthorized},
		{"webhook secret: no token", "GET", "/v1/webhook-secret", "", nil, 401, wire.CodeUnauthorized},
		{"webhook secret: token in the query string", "GET", "/v1/webhook-secret?access_token=" + u1, "", nil, 401, wire.CodeUnauthorized},
		{"webhook secret: webhooks not configured", "GET", "/v1/webhook-secret", u1, nil, 404, wire.CodeNotFound},
		{"profile: webhook_secret of the wrong shape is still only ignored, other fields checked", "PUT", "/v1/recipients/u1", adminToken, `{"webhook_secret":"x","email":"bad"}`, 422, wire.CodeInvalidRequest},

		// Devices: each field checked by its platform's channel, ids of
		// other recipients absent, tokens of the wrong kind refused.
		{"device: malformed JSON", "POST", "/v1/devices", u1, `{"platform":"ios",`, 400, wire.CodeBadRequest},
		{"device: token of the wrong type", "POST", "/v1/devices", u1, `{"platform":"ios","token":123,"app":"com.acme.app"}`, 400, wire.CodeBadRequest},
		{"device: unknown field", "POST", "/v1/devices", u1, `{"platform":"ios","token":"` + strings.Repeat("ab", 32) + `","app":"com.acme.app","recipient":"u2"}`, 400, wire.CodeBadRequest},
		{"device: unknown platform", "POST", "/v1/devices", u1, `{"platform":"symbian","token":"` + strings.Repeat("ab", 32) + `","app":"com.acme.app"}`, 422, wire.CodeInvalidRequest},
		{"device: iOS token not hex", "POST", "/v1/devices", u1, `{"platform":"ios","token":"' OR 1=1 --","app":"com.acme.app"}`, 422, wire.CodeInvalidRequest},
		{"device: token with a newline", "POST", "/v1/devices", u1, `{"platform":"android","token":"abc:APA91b\nxxxxxxxxxxxxxxxxxxx","app":"com.acme.app"}`, 422, wire.CodeInvalidRequest},
		{"device: token over 4 KiB", "POST", "/v1/devices", u1, `{"platform":"android","token":"` + strings.Repeat("a", 5000) + `","app":"com.acme.app"}`, 422, wire.CodeInvalidRequest},
		{"device: app with a path", "POST", "/v1/devices", u1, `{"platform":"ios","token":"` + strings.Repeat("ab", 32) + `","app":"../../etc/passwd"}`, 422, wire.CodeInvalidRequest},
		{"device: empty body", "POST", "/v1/devices", u1, ``, 400, wire.CodeBadRequest},
		{"device: 2 MiB body", "POST", "/v1/devices", u1, `{"platform":"ios","token":"` + strings.Repeat("a", 2<<20) + `","app":"x"}`, 413, wire.CodeBodyTooLarge},
		{"device: no token", "POST", "/v1/devices", "", `{"platform":"ios","token":"` + strings.Repeat("ab", 32) + `","app":"com.acme.app"}`, 401, wire.CodeUnauthorized},
		{"device: admin token", "POST", "/v1/devices", adminToken, `{"platform":"ios","token":"` + strings.Repeat("ab", 32) + `","app":"com.acme.app"}`, 401, wire.CodeUnauthorized},
		{"device: delete another recipient's", "DELETE", "/v1/devices/" + u2DeviceID, u1, nil, 404, wire.CodeNotFound},
		{"device: delete not a UUID", "DELETE", "/v1/devices/' OR 1=1 --", u1, nil, 404, wire.CodeNotFound},
		{"device: list with the admin token", "GET", "/v1/devices", adminToken, nil, 401, wire.CodeUnauthorized},
		{"device: recipient token on the admin twin", "GET", "/v1/recipients/u2/devices", u1, nil, 401, wire.CodeUnauthorized},
		{"device: admin twin, id over 255 bytes", "GET", "/v1/recipients/" + strings.Repeat("x", 256) + "/devices", adminToken, nil, 400, wire.CodeBadRequest},

		// Routing.
		{"unknown route", "GET", "/v1/admin", adminToken, nil, 404, wire.CodeNotFound},
		{"wrong method", "PATCH", "/v1/inbox", u1, `{}`, 405, wire.CodeMethodNotAllowed},
	}
	for name, tok := range hostileTokens(t) {
		tests = append(tests,
			struct {
				name         string
				method, path string
				token        string
				body         any
				status       int
				code         string
			}{"token " + name + ": inbox", "GET", "/v1/inbox", tok, nil, 401, wire.CodeUnauthorized},
			struct {
				name         string
				method, path string
				token        string
				body         any
				status       int
				code         string
			}{"token " + name + ": mark all read", "POST", "/v1/inbox/read", tok, `{"all":true}`, 401, wire.CodeUnauthorized},
		)
	}
	if len(tests) < 40 {
		t.Fatalf("only %d hostile requests", len(tests))
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := dbState(t, b.pool)
			r := b.do(t, tt.method, tt.path, tt.token, tt.body)
			expect(t, r, tt.status, tt.code)
			for _, leak := range []string{"SQLSTATE", "invalid byte sequence", "syntax for type", "violates"} {
				if strings.Contains(string(r.raw), leak) {
					t.Fatalf("the answer carries the database's error text (%q): %s", leak, r.raw)
				}
			}
			if changed := changedTables(before, dbState(t, b.pool)); len(changed) > 0 {
				t.Fatalf("%d %s wrote to %v", r.status, r.errCode(), changed)
			}
		})
	}

	// Ids that belong to somebody else are simply absent: a mark that names
	// them changes nothing (200, marked 0), and no list shows them.
	for _, op := range []string{"read", "unread", "seen", "archive"} {
		t.Run("other recipient's ids: "+op, func(t *testing.T) {
			before := dbState(t, b.pool)
			r := b.do(t, "POST", "/v1/inbox/"+op, u1, map[string]any{"ids": u2Items})
			expect(t, r, 200, "")
			if m, _ := r.body["marked"].(float64); m != 0 {
				t.Fatalf("marked %v of another recipient's items: %s", m, r.raw)
			}
			if changed := changedTables(before, dbState(t, b.pool)); len(changed) > 0 {
				t.Fatalf("wrote to %v", changed)
			}
		})
	}
	// A cursor is only check-summed, not signed: anyone can forge one. A
	// forged cursor only moves the caller within their own inbox; one whose
	// time is outside years 1..9999 is refused.
	for _, micros := range []int64{math.MaxInt64, math.MinInt64} {
		expect(t, b.do(t, "GET", "/v1/inbox?cursor="+forgedCursor(micros), u1, nil), 400, "bad_cursor")
	}
	forged := []string{"/v1/inbox?cursor=" + forgedCursor(0)}
	for _, path := range append(forged, "/v1/inbox", "/v1/inbox?filter=unread", "/v1/inbox?filter=archived") {
		for _, it := range b.inbox(t, path, u1).Items {
			if slices.Contains(u2Items, it.ID) || !slices.Contains(u1Items, it.ID) {
				t.Fatalf("%s as u1 lists item %s (u1 has %v)", path, it.ID, u1Items)
			}
		}
	}
	for _, path := range []string{"/v1/preferences", "/v1/mutes", "/v1/subscriptions"} {
		r := b.do(t, "GET", path, u1, nil)
		expect(t, r, 200, "")
		if strings.Contains(string(r.raw), "u2") {
			t.Fatalf("%s as u1 mentions u2: %s", path, r.raw)
		}
	}
	if c := b.do(t, "GET", "/v1/inbox/counts", u1, nil); c.body["unread"] != float64(len(u1Items)) {
		t.Fatalf("u1's counts include somebody else's items: %s", c.raw)
	}

	// Floods: with buckets of one request that never refill during the
	// test, the second request of a recipient or of the admin token is a
	// 429 that writes nothing.
	limited := setup(t, setupOpts{yaml: hostileConfig, options: func(o *httpapi.Options) {
		o.Config.HTTP.Rate = config.Rate{Recipient: 0.001, RecipientBurst: 1, Admin: 0.001, AdminBurst: 1}
	}})
	expect(t, limited.do(t, "GET", "/v1/inbox/counts", u1, nil), 200, "")
	expect(t, limited.do(t, "PUT", "/v1/recipients/u1", adminToken, `{}`), 200, "")
	floods := []struct {
		name         string
		method, path string
		token        string
		body         any
	}{
		{"flood: recipient over http.rate.recipient", "POST", "/v1/inbox/read", u1, `{"all":true}`},
		{"flood: the same recipient with a new token", "PUT", "/v1/mutes", recipientToken(t, "u1"), `{"target":"topic:post-9"}`},
		{"flood: admin over http.rate.admin", "POST", "/v1/notifications", adminToken, notification},
		{"flood: admin twin over http.rate.admin", "PUT", "/v1/recipients/u1/preferences", adminToken, rule("*", "*", "off")},
	}
	for _, tt := range floods {
		t.Run(tt.name, func(t *testing.T) {
			before := dbState(t, limited.pool)
			r := limited.do(t, tt.method, tt.path, tt.token, tt.body)
			expect(t, r, 429, wire.CodeRateLimited)
			if r.header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
			if changed := changedTables(before, dbState(t, limited.pool)); len(changed) > 0 {
				t.Fatalf("429 wrote to %v", changed)
			}
		})
	}

	// The stream, mounted as the daemon mounts it, with a cap of one stream
	// per recipient: a malformed query string is a 400 (the access_token's
	// included), the second stream of a recipient a 429; neither writes.
	streamed := setup(t, setupOpts{yaml: hostileConfig, options: func(o *httpapi.Options) {
		auth := httpapi.New(*o) // the same settings: the daemon's token checks
		hub := sse.NewHub(o.Pool, slog.New(slog.NewTextHandler(t.Output(), nil)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- hub.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		o.Extra = map[string]http.Handler{"GET /v1/inbox/stream": sse.Handler(hub, auth.RecipientClaims,
			sse.HandlerOptions{MaxPerRecipient: 1, Clock: o.Clock})}
	}})
	req, err := http.NewRequestWithContext(t.Context(), "GET", streamed.srv.URL+"/v1/inbox/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+u1)
	open, err := streamed.srv.Client().Do(req)
	if err != nil || open.StatusCode != 200 {
		t.Fatalf("u1's first stream: %v %v", open, err)
	}
	defer open.Body.Close()
	for _, tt := range []struct {
		name, path, token string
		status            int
		code              string
	}{
		{"stream: malformed query", "/v1/inbox/stream?last_event_id=%zz", u2, 400, wire.CodeBadRequest},
		{"stream: access_token beside a malformed pair", "/v1/inbox/stream?access_token=" + u2 + "&%zz", "", 400, wire.CodeBadRequest},
		{"stream: token without iat", "/v1/inbox/stream", hostileTokens(t)["no iat"], 401, wire.CodeUnauthorized},
		{"stream: one over http.max_streams_per_recipient", "/v1/inbox/stream", u1, 429, wire.CodeRateLimited},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := dbState(t, streamed.pool)
			r := streamed.do(t, "GET", tt.path, tt.token, nil)
			expect(t, r, tt.status, tt.code)
			if tt.status == 429 && r.header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
			if changed := changedTables(before, dbState(t, streamed.pool)); len(changed) > 0 {
				t.Fatalf("%d wrote to %v", r.status, changed)
			}
		})
	}
}
