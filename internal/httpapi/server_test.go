package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/internal/version"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/stores"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	adminToken  = "admin-secret-0123456789abcdef0123456789"
	tokenSecret = "token-secret-0123456789abcdef0123456789"
)

// testConfig has one notifier with a params schema and a small
// max_recipients, enough to exercise every refusal of POST /v1/notifications.
const testConfig = `
http: {admin_token: ` + adminToken + `, token_secret: ` + tokenSecret + `}
notifiers:
  comment.created:
    category: comments
    max_recipients: 3
    params:
      type: object
      required: [post_title]
      properties:
        post_title: {type: string}
        author_name: {type: string}
    channels:
      in_app: {title: "{{.author_name}} commented on {{.post_title}}"}
`

// fixedNow is the server's clock: read_at, seen_at and archived_at get it.
var fixedNow = time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)

type bundle struct {
	pool *pgxpool.Pool
	cfg  *config.Config
	srv  *httptest.Server
}

type setupOpts struct {
	yaml    string // testConfig when empty
	maxBody int64
	options func(*httpapi.Options) // changes the server's options, when set
}

func setup(t *testing.T, opts ...setupOpts) *bundle {
	t.Helper()
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.yaml == "" {
		o.yaml = testConfig
	}
	cfg, err := config.Parse("test.yaml", []byte(o.yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if o.maxBody != 0 {
		cfg.HTTP.MaxBody = o.maxBody
	}
	// Tests send hundreds of requests a second; the ones about rate limits
	// set them in options.
	cfg.HTTP.Rate.Recipient, cfg.HTTP.Rate.Admin = 0, 0
	pool := pgtest.NewDB(t)
	// As the daemon does at start: sends go through notify_send, which
	// checks the notifier catalog.
	if err := server.PublishCatalog(t.Context(), pool, cfg, nil); err != nil {
		t.Fatal(err)
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	options := httpapi.Options{Pool: pool, Config: cfg, Registry: builtin.MustRegistry(),
		Operations: operations{pool: pool, river: rc}, Queues: []string{"fanout", "send"}, Clock: func() time.Time { return fixedNow }}
	if o.options != nil {
		o.options(&options)
	}
	s := httpapi.New(options)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &bundle{pool: pool, cfg: cfg, srv: srv}
}

// operations is what the daemon gives the API (server.Server's
// RetryDelivery), on an insert-only River client.
type operations struct {
	pool  *pgxpool.Pool
	river *river.Client[pgx.Tx]
}

func (o operations) RetryDelivery(ctx context.Context, id string) (string, error) {
	return jobs.RetryDelivery(ctx, o.pool, o.river, id, fixedNow)
}

// CloseCircuitAndRetry retries: this API runs no send workers, so no
// breaker is ever open (server's tests cover the breakers).
func (o operations) CloseCircuitAndRetry(ctx context.Context, id string) (string, error) {
	return jobs.RetryDelivery(ctx, o.pool, o.river, id, fixedNow)
}

func (o operations) DeliveryCircuit(context.Context, string) (*httpapi.Circuit, error) {
	return nil, nil
}

func (o operations) RetryDeliveries(ctx context.Context, f stores.DeliveryFilter, limit int) (int, int, error) {
	return jobs.Redrive(ctx, o.pool, o.river, f, fixedNow, limit, 50)
}

// response is a decoded API answer.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// errCode returns error.code of an error response ("" if none).
func (r response) errCode() string {
	e, _ := r.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func (r response) errMessage() string {
	e, _ := r.body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

func (r response) errDetails() []any {
	e, _ := r.body["error"].(map[string]any)
	d, _ := e["details"].([]any)
	return d
}

// do sends a request. body is sent as is when it is a string or []byte, and
// JSON-encoded otherwise (nil: no body). token "" sends no Authorization.
func (b *bundle) do(t *testing.T, method, path, token string, body any) response {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	case []byte:
		rd = bytes.NewReader(v)
	default:
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			t.Fatalf("%s %s: %d, body is not a JSON object: %v: %q", method, path, resp.StatusCode, err, raw)
		}
	}
	return out
}

// expect fails the test unless r has the status (and, for errors, the code),
// and checks that every error has the documented shape.
func expect(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.raw)
	}
	if status >= 400 {
		if got := r.errCode(); got != code {
			t.Fatalf("error code %q, want %q; body %s", got, code, r.raw)
		}
		if r.errMessage() == "" {
			t.Fatalf("error without a message: %s", r.raw)
		}
		e := r.body["error"].(map[string]any)
		if d, ok := e["details"]; ok {
			if _, isArray := d.([]any); !isArray {
				t.Fatalf("details is not an array: %s", r.raw)
			}
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("error Content-Type %q", ct)
		}
	}
}

func recipientToken(t *testing.T, id string) string {
	t.Helper()
	tok, err := notifyd.RecipientTokenAt(tokenSecret, id, time.Hour, fixedNow) // the server's clock
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, "GET", "/healthz", "", nil)
	expect(t, r, 200, "")
	if r.body["status"] != "ok" {
		t.Fatalf("healthz body %s", r.raw)
	}
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ready := b.do(t, "GET", "/readyz", "", nil)
	expect(t, ready, 200, "")
	if ready.body["version"] != version.Version {
		t.Fatalf("readyz body %s: want version %q", ready.raw, version.Version)
	}

	// Un-apply notifyd's migrations in the bookkeeping: the database is now
	// behind the binary and the daemon must not take traffic.
	if _, err := b.pool.Exec(t.Context(), `DELETE FROM notify_schema_migrations WHERE version_id > 0`); err != nil {
		t.Fatal(err)
	}
	r := b.do(t, "GET", "/readyz", "", nil)
	expect(t, r, 503, wire.CodeNotReady)
	if !strings.Contains(r.errMessage(), "pending migrations") {
		t.Fatalf("readyz message %q does not say why", r.errMessage())
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expect(t, b.do(t, "GET", "/nope", "", nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "GET", "/v1/inbox/nope/deeper", recipientToken(t, "u1"), nil), 404, wire.CodeNotFound)

	r := b.do(t, "DELETE", "/v1/inbox", recipientToken(t, "u1"), nil)
	expect(t, r, 405, wire.CodeMethodNotAllowed)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") {
		t.Fatalf("Allow %q, want GET listed", allow)
	}
	expect(t, b.do(t, "PUT", "/v1/notifications", adminToken, nil), 405, wire.CodeMethodNotAllowed)

	// A cancel without a key is no route, not the mux's redirect to the
	// {key...} route's empty remainder.
	req, err := http.NewRequestWithContext(t.Context(), "DELETE", b.srv.URL+"/v1/notifications/comment.created", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	r = rawRequest(t, b, req)
	expect(t, r, 404, wire.CodeNotFound)
	if loc := r.header.Get("Location"); loc != "" {
		t.Fatalf("answered with Location %q", loc)
	}
}

func TestExtraRoutes(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("test.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.NewDB(t)
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	s := httpapi.New(httpapi.Options{Pool: pool, Config: cfg, Registry: builtin.MustRegistry(), Clock: func() time.Time { return fixedNow },
		Extra:      map[string]http.Handler{"GET /metrics": hello},
		AdminExtra: map[string]http.Handler{"/riverui/": hello}})
	// A route mounted after New that authenticates like the stream does.
	s.Handle("GET /v1/inbox/stream", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := s.Recipient(r)
		if err != nil {
			wire.WriteError(w, r, err)
			return
		}
		_, _ = io.WriteString(w, id)
	}))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	get := func(path, token string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if st, body := get("/metrics", ""); st != 200 || body != "hello" {
		t.Fatalf("/metrics: %d %q", st, body)
	}
	if st, _ := get("/riverui/", ""); st != 401 {
		t.Fatalf("/riverui/ without the admin token: %d", st)
	}
	if st, body := get("/riverui/x", adminToken); st != 200 || body != "hello" {
		t.Fatalf("/riverui/x with the admin token: %d %q", st, body)
	}
	tok := recipientToken(t, "u-stream")
	if st, body := get("/v1/inbox/stream?access_token="+tok, ""); st != 200 || body != "u-stream" {
		t.Fatalf("stream with access_token: %d %q", st, body)
	}
	if st, body := get("/v1/inbox/stream", tok); st != 200 || body != "u-stream" {
		t.Fatalf("stream with header: %d %q", st, body)
	}
	if st, _ := get("/v1/inbox/stream?access_token=forged", ""); st != 401 {
		t.Fatalf("stream with a forged token: %d", st)
	}
	// Regular recipient endpoints do not take tokens from the URL.
	if st, _ := get("/v1/inbox/counts?access_token="+tok, ""); st != 401 {
		t.Fatalf("counts with access_token: %d, want 401", st)
	}
}

// syncBuffer is a log sink the server's goroutines can write concurrently.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRequestLogAndPanics(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("test.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	s := httpapi.New(httpapi.Options{Pool: pgtest.NewDB(t), Config: cfg, Registry: builtin.MustRegistry(), Clock: func() time.Time { return fixedNow },
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Extra: map[string]http.Handler{"GET /boom": http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			panic("kaboom")
		})}})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	b := &bundle{srv: srv}

	tok := recipientToken(t, "logged")
	expect(t, b.do(t, "GET", "/v1/inbox/counts", tok, nil), 200, "")
	expect(t, b.do(t, "GET", "/v1/inbox?access_token="+tok, "", nil), 401, wire.CodeUnauthorized)
	expect(t, b.do(t, "GET", "/v1/recipients/x", adminToken, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "GET", "/boom", "", nil), 500, wire.CodeInternal)

	out := logs.String()
	for _, want := range []string{
		"method=GET path=/v1/inbox/counts status=200",
		"path=/v1/inbox status=401",
		"path=/v1/recipients/x status=404",
		`path=/boom status=500`, "kaboom", "duration=",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{tok, adminToken, tokenSecret} {
		if strings.Contains(out, secret) {
			t.Fatalf("a token reached the log:\n%s", out)
		}
	}
}
