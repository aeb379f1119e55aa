package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const testSecret = "example-token-secret"

// newTestApp returns the app on a fresh migrated database (notifyd's and
// River's tables, plus the example's own), with a client that validates
// against config.example.yaml like `-notifyd-config` does.
func newTestApp(t *testing.T) (*app, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.NewDB(t)
	if err := setup(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	client := servertest.Client(t, pool, exampleConfig(t))
	return &app{pool: pool, notify: client, tokenSecret: testSecret, publicURL: "https://blog.example.test",
		logger: slog.New(slog.DiscardHandler)}, pool
}

func exampleConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Load("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// NOTIFYD_WEBHOOK_SECRET is unset here: the daemon refuses unsigned webhooks.
	if cfg.Channels["webhook"], err = cfg.Channels["webhook"].With("", map[string]any{"secret": "example-webhook-secret"}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func postComment(t *testing.T, a *app, post, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/posts/"+post+"/comments", strings.NewReader(body))
	rec := httptest.NewRecorder()
	a.routes().ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	return servertest.Count(t, pool, sql, args...)
}

// A comment enqueues comment.created for the post's author: the notification
// row and its notify.fanout job are there once the request returns.
func TestCommentEnqueuesNotification(t *testing.T) {
	t.Parallel()
	a, pool := newTestApp(t)
	code, body := postComment(t, a, "9", `{"id":"c1","user_id":"u1","user_name":"Ada","body":"Nice  post!"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST = %d %s, want 201", code, body)
	}
	var resp commentResponse
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Notification.ID == "" || resp.Notification.Duplicate {
		t.Fatalf("notification in response = %+v, want a new id", resp.Notification)
	}

	var (
		id, actor, status           string
		recipients, reasons, topics []string
		params                      map[string]any
	)
	err := pool.QueryRow(context.Background(), `
SELECT id::text, actor, status, recipients, reasons, topics, params
FROM notify_notifications WHERE notifier = 'comment.created' AND key = 'comment-c1'`).
		Scan(&id, &actor, &status, &recipients, &reasons, &topics, &params)
	if err != nil {
		t.Fatalf("notification row: %v", err)
	}
	if id != resp.Notification.ID || actor != "u1" || status != "pending" {
		t.Errorf("notification = id %s actor %s status %s, want id %s actor u1 status pending", id, actor, status,
			resp.Notification.ID)
	}
	if strings.Join(recipients, ",") != "u2" || strings.Join(reasons, ",") != "author" ||
		strings.Join(topics, ",") != "post-9" {
		t.Errorf("audience = %v %v topics %v, want [u2] [author] topics [post-9]", recipients, reasons, topics)
	}
	want := map[string]any{"post_title": "Hello world", "author_name": "Ada",
		"url": "https://blog.example.test/posts/9#comment-c1", "excerpt": "Nice post!"}
	for k, v := range want {
		if params[k] != v {
			t.Errorf("params[%s] = %v, want %v", k, params[k], v)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job
WHERE kind = 'notify.fanout' AND queue = 'fanout' AND state = 'available' AND args->>'notification_id' = $1`, id); n != 1 {
		t.Errorf("notify.fanout jobs for the notification = %d, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM example_comments WHERE id = 'c1' AND post_id = 9`); n != 1 {
		t.Errorf("comments = %d, want 1", n)
	}
}

// A comment whose insert fails writes nothing, notification included: the
// duplicate id of a comment imported without a notification, and a retried
// POST whose comment already exists (notified once, not twice).
func TestDuplicateCommentIDNotifiesNothingNew(t *testing.T) {
	t.Parallel()
	a, pool := newTestApp(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO example_comments (id, post_id, author_id, author_name, body)
VALUES ('imported', 9, 'u3', 'Cy', 'from the old system')`); err != nil {
		t.Fatal(err)
	}
	code, body := postComment(t, a, "9", `{"id":"imported","user_id":"u1","user_name":"Ada","body":"Hi"}`)
	if code != http.StatusConflict {
		t.Fatalf("POST with an existing id = %d %s, want 409", code, body)
	}
	if n := count(t, pool, `SELECT count(*) FROM notify_notifications WHERE key = 'comment-imported'`); n != 0 {
		t.Errorf("notifications after a failed insert = %d, want 0", n)
	}

	for i, want := range []int{http.StatusCreated, http.StatusConflict} {
		if code, body := postComment(t, a, "9", `{"id":"c2","user_id":"u1","body":"Twice?"}`); code != want {
			t.Fatalf("POST #%d = %d %s, want %d", i+1, code, body, want)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM notify_notifications WHERE key = 'comment-c2'`); n != 1 {
		t.Errorf("notifications for a comment posted twice = %d, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout'`); n != 1 {
		t.Errorf("notify.fanout jobs = %d, want 1", n)
	}
}

// Atomic enqueue: when the application's transaction fails AFTER SendTx ran,
// the notification goes with it. A deferred constraint trigger (checked at
// COMMIT, so after SendTx) stands in for any late failure of the app's write.
func TestFailedCommitLeavesNoNotification(t *testing.T) {
	t.Parallel()
	a, pool := newTestApp(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
CREATE FUNCTION example_no_spam() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.body ILIKE '%spam%' THEN
        RAISE EXCEPTION 'spam is not a comment' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER example_comments_no_spam AFTER INSERT ON example_comments
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION example_no_spam();`); err != nil {
		t.Fatal(err)
	}
	code, body := postComment(t, a, "9", `{"id":"c3","user_id":"u1","body":"buy spam"}`)
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "spam is not a comment") {
		t.Fatalf("POST = %d %s, want 422 from the commit", code, body)
	}
	if n := count(t, pool, `SELECT count(*) FROM example_comments`); n != 0 {
		t.Errorf("comments = %d, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM notify_notifications`); n != 0 {
		t.Errorf("notifications = %d, want 0: the notification must roll back with the comment", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job`); n != 0 {
		t.Errorf("river jobs = %d, want 0", n)
	}

	// The same request without the offending word goes through.
	if code, body := postComment(t, a, "9", `{"id":"c3","user_id":"u1","body":"buy eggs"}`); code != http.StatusCreated {
		t.Fatalf("POST = %d %s, want 201", code, body)
	}
	if n := count(t, pool, `SELECT count(*) FROM notify_notifications WHERE key = 'comment-c3'`); n != 1 {
		t.Errorf("notifications = %d, want 1", n)
	}
}

// Refusals: an unknown post, a bad body, and params the notifier's schema
// refuses all write nothing.
func TestCommentRefusals(t *testing.T) {
	t.Parallel()
	a, pool := newTestApp(t)
	for _, tc := range []struct {
		post, body string
		want       int
	}{
		{"10", `{"user_id":"u1","body":"hi"}`, http.StatusNotFound},
		{"nine", `{"user_id":"u1","body":"hi"}`, http.StatusNotFound},
		{"9", `{"user_id":"u1","body":"hi"`, http.StatusBadRequest},
		{"9", `{"user_id":"u1","body":"hi","extra":1}`, http.StatusBadRequest},
		{"9", `{"body":"hi"}`, http.StatusUnprocessableEntity},
		{"9", `{"user_id":"u1","body":"  "}`, http.StatusUnprocessableEntity},
		{"9", `{"id":"a/b","user_id":"u1","body":"hi"}`, http.StatusUnprocessableEntity},
	} {
		if code, body := postComment(t, a, tc.post, tc.body); code != tc.want {
			t.Errorf("POST /posts/%s/comments %s = %d %s, want %d", tc.post, tc.body, code, body, tc.want)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM example_comments`) + count(t, pool, `SELECT count(*) FROM notify_notifications`); n != 0 {
		t.Errorf("rows written by refused requests = %d, want 0", n)
	}
}

// GET /token mints a token notifyd accepts for that recipient.
func TestToken(t *testing.T) {
	t.Parallel()
	a := &app{tokenSecret: testSecret, logger: slog.New(slog.DiscardHandler)}
	rec := httptest.NewRecorder()
	a.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/token?user=u2", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /token = %d %s", rec.Code, rec.Body)
	}
	tok, _ := io.ReadAll(rec.Body)
	if sub, err := notifyd.ParseRecipientToken(testSecret, string(tok)); err != nil || sub != "u2" {
		t.Fatalf("token subject = %q, %v; want u2", sub, err)
	}
	rec = httptest.NewRecorder()
	a.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/token", nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("GET /token without user = %d, want 400", rec.Code)
	}
	rec = httptest.NewRecorder()
	(&app{}).routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/token?user=u2", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("GET /token without a secret = %d, want 503", rec.Code)
	}
}

// End to end with notifyd's workers: the comment becomes an inbox item for
// the post's author, rendered from config.example.yaml's templates.
func TestCommentReachesTheInbox(t *testing.T) {
	t.Parallel()
	a, pool := newTestApp(t)
	// No channels configured: email is honestly "unavailable", in_app works.
	servertest.StartWorkers(t, &jobs.Deps{Pool: pool, Config: exampleConfig(t)})
	if code, body := postComment(t, a, "9", `{"id":"c4","user_id":"u1","user_name":"Ada","body":"Nice post!"}`); code != http.StatusCreated {
		t.Fatalf("POST = %d %s", code, body)
	}
	var title, reason, url string
	servertest.Eventually(t, 20*time.Second, "the inbox item for u2", func() bool {
		err := pool.QueryRow(context.Background(), `SELECT title, reason, url FROM notify_inbox
WHERE recipient = 'u2' AND notifier = 'comment.created' AND key = 'comment-c4'`).Scan(&title, &reason, &url)
		return err == nil
	})
	if title != "Ada commented on Hello world" || reason != "author" || url != "https://blog.example.test/posts/9#comment-c4" {
		t.Errorf("inbox item = %q %q %q", title, reason, url)
	}
	if n := count(t, pool, `SELECT count(*) FROM notify_inbox WHERE recipient = 'u1'`); n != 0 {
		t.Errorf("the commenter (the actor) got %d inbox items, want 0", n)
	}
	servertest.Eventually(t, 20*time.Second, "the email delivery row", func() bool {
		return count(t, pool, `SELECT count(*) FROM notify_deliveries
WHERE recipient = 'u2' AND channel = 'email' AND status = 'unavailable'`) == 1
	})
}
