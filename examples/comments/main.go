// Command comments is a small web application that uses notifyd the way an
// application should: it writes a comment and enqueues the notification about
// it in the SAME database transaction (notifyd.Client.SendTx), so the
// notification exists if and only if the comment does. It also mints the
// recipient tokens its front-end needs to read the inbox from notifyd.
//
//	POST /posts/{id}/comments  {"user_id":"u1","user_name":"Ada","body":"Nice post!"}
//	GET  /posts/{id}           the post and its comments
//	GET  /token?user=u2        a recipient token for u2 (text/plain)
//
// It keeps its own tables (example_posts, example_comments) in the database
// notifyd uses, creates them at start, and seeds post 9 "Hello world" written
// by u2. See README.md for a walkthrough against `make run`.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
)

func main() {
	addr := flag.String("addr", envOr("ADDR", "127.0.0.1:8090"), "address to listen on ($ADDR)")
	dbURL := flag.String("database-url", os.Getenv("DATABASE_URL"),
		"PostgreSQL URL of the database notifyd uses ($DATABASE_URL)")
	secret := flag.String("token-secret", os.Getenv("NOTIFYD_TOKEN_SECRET"),
		"notifyd's http.token_secret, to mint recipient tokens ($NOTIFYD_TOKEN_SECRET)")
	cfgPath := flag.String("notifyd-config", os.Getenv("NOTIFYD_CONFIG"),
		"optional notifyd config: validate params against the notifier's schema before writing ($NOTIFYD_CONFIG)")
	publicURL := flag.String("public-url", "", "base URL of this app, for links in notifications (default http://<addr>)")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, *dbURL, *secret, *cfgPath, *publicURL, logger); err != nil {
		logger.Error("comments example stopped", "err", err)
		os.Exit(1)
	}
}

func run(addr, dbURL, secret, cfgPath, publicURL string, logger *slog.Logger) error {
	if dbURL == "" {
		return errors.New("no database: set DATABASE_URL or -database-url (see README.md)")
	}
	if publicURL == "" {
		publicURL = "http://" + addr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	if err := setup(ctx, pool); err != nil {
		return err
	}

	// With a notifyd config, SendTx refuses an unknown notifier or params that
	// fail its JSON Schema before anything is written; without one the daemon
	// checks at fan-out and marks the notification rejected.
	var ccfg notifyd.ClientConfig
	if cfgPath != "" {
		if ccfg.Config, err = config.Load(cfgPath); err != nil {
			return err
		}
	}
	client, err := notifyd.NewClient(pool, ccfg)
	if err != nil {
		return err
	}

	a := &app{pool: pool, notify: client, tokenSecret: secret, publicURL: strings.TrimRight(publicURL, "/"), logger: logger}
	srv := &http.Server{Addr: addr, Handler: a.routes(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	logger.Info("comments example listening", "addr", addr, "post", publicURL+"/posts/9")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// schema is the application's own tables. notifyd's tables (notify_*) and
// River's (river_*) live beside them; notifyd never touches these.
const schema = `
CREATE TABLE IF NOT EXISTS example_posts (
    id        bigint PRIMARY KEY,
    author_id text NOT NULL,
    title     text NOT NULL
);
CREATE TABLE IF NOT EXISTS example_comments (
    id          text PRIMARY KEY,
    post_id     bigint NOT NULL REFERENCES example_posts (id),
    author_id   text NOT NULL,
    author_name text NOT NULL,
    body        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO example_posts (id, author_id, title) VALUES (9, 'u2', 'Hello world') ON CONFLICT (id) DO NOTHING;
`

// setup creates the example's tables and its demo post.
func setup(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create the example's tables: %w", err)
	}
	return nil
}

// app is the web application.
type app struct {
	pool        *pgxpool.Pool
	notify      *notifyd.Client
	tokenSecret string
	publicURL   string
	logger      *slog.Logger
}

func (a *app) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /posts/{id}/comments", a.createComment)
	mux.HandleFunc("GET /posts/{id}", a.getPost)
	mux.HandleFunc("GET /token", a.token)
	return mux
}

// commentRequest is the body of POST /posts/{id}/comments. In a real
// application the commenter comes from the session, not from the body.
type commentRequest struct {
	// ID is optional; the server makes one up when it is absent. A client that
	// picks its own id can retry safely: a second POST with the same id is 409.
	ID       string `json:"id"`
	UserID   string `json:"user_id"`
	UserName string `json:"user_name"`
	Body     string `json:"body"`
}

type comment struct {
	ID         string    `json:"id"`
	PostID     int64     `json:"post_id"`
	AuthorID   string    `json:"author_id"`
	AuthorName string    `json:"author_name"`
	Body       string    `json:"body"`
	CreatedAt  time.Time `json:"created_at"`
}

type commentResponse struct {
	Comment      comment      `json:"comment"`
	Notification notification `json:"notification"`
}

// notification is what SendTx reported: the notification's id, and whether
// (notifier, key) had been sent before.
type notification struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

var commentIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// errPostNotFound ends the transaction when the post does not exist.
var errPostNotFound = errors.New("no such post")

// createComment writes the comment and enqueues "comment.created" for the
// post's author in one transaction: both commit, or neither does.
func (a *app) createComment(w http.ResponseWriter, r *http.Request) {
	postID, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusNotFound, "no such post")
		return
	}
	var req commentRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	switch {
	case req.UserID == "" || len(req.UserID) > 255 || !utf8.ValidString(req.UserID):
		writeError(w, http.StatusUnprocessableEntity, "user_id: 1 to 255 bytes of UTF-8")
		return
	case strings.TrimSpace(req.Body) == "":
		writeError(w, http.StatusUnprocessableEntity, "body: is required")
		return
	case req.ID != "" && !commentIDRE.MatchString(req.ID):
		writeError(w, http.StatusUnprocessableEntity, "id: 1 to 64 letters, digits, '-' or '_'")
		return
	}
	if req.UserName == "" {
		req.UserName = req.UserID
	}
	if req.ID == "" {
		req.ID = newID()
	}

	c := comment{ID: req.ID, PostID: postID, AuthorID: req.UserID, AuthorName: req.UserName, Body: req.Body}
	var sent notifyd.SendResult
	err = pgx.BeginFunc(r.Context(), a.pool, func(tx pgx.Tx) error {
		var postAuthor, postTitle string
		err := tx.QueryRow(r.Context(), `SELECT author_id, title FROM example_posts WHERE id = $1`, postID).
			Scan(&postAuthor, &postTitle)
		if errors.Is(err, pgx.ErrNoRows) {
			return errPostNotFound
		}
		if err != nil {
			return err
		}

		// 1. The application's own write.
		err = tx.QueryRow(r.Context(), `
INSERT INTO example_comments (id, post_id, author_id, author_name, body)
VALUES ($1, $2, $3, $4, $5)
RETURNING created_at`, c.ID, c.PostID, c.AuthorID, c.AuthorName, c.Body).Scan(&c.CreatedAt)
		if err != nil {
			return err
		}

		// 2. The notification, in the same transaction (one more round trip).
		// The key is derived from the comment, so a retried request can never
		// notify twice. The commenter is the actor: when the post's author
		// comments on their own post, notifyd leaves them out.
		sent, err = a.notify.SendTx(r.Context(), tx, notifyd.Notification{
			Notifier:   "comment.created",
			Key:        "comment-" + c.ID,
			Actor:      c.AuthorID,
			Recipients: []notifyd.Recipient{{ID: postAuthor, Reason: "author"}},
			Topics:     []string{fmt.Sprintf("post-%d", postID)},
			Params: map[string]any{
				"post_title":  postTitle,
				"author_name": c.AuthorName,
				"url":         fmt.Sprintf("%s/posts/%d#comment-%s", a.publicURL, postID, c.ID),
				"excerpt":     excerpt(c.Body, 140),
			},
		})
		// 3. pgx.BeginFunc commits when this returns nil. If anything failed,
		// or the commit itself fails, neither the comment nor the
		// notification exists.
		return err
	})
	if err != nil {
		a.commentError(w, r, err)
		return
	}
	a.logger.Info("comment created", "comment", c.ID, "post", postID, "notification_id", sent.ID,
		"duplicate", sent.Duplicate)
	writeJSON(w, http.StatusCreated, commentResponse{Comment: c,
		Notification: notification{ID: sent.ID, Duplicate: sent.Duplicate}})
}

func (a *app) commentError(w http.ResponseWriter, r *http.Request, err error) {
	var pgErr *pgconn.PgError
	var inputErr *notifyd.InputError
	var paramsErr *config.ParamsError
	switch {
	case errors.Is(err, errPostNotFound):
		writeError(w, http.StatusNotFound, "no such post")
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
		writeError(w, http.StatusConflict, "a comment with this id already exists")
	case errors.As(err, &pgErr) && pgErr.Code == "23514": // check_violation
		writeError(w, http.StatusUnprocessableEntity, "comment rejected: "+pgErr.Message)
	case errors.As(err, &inputErr), errors.As(err, &paramsErr), errors.Is(err, notifyd.ErrUnknownNotifier),
		errors.Is(err, notifyd.ErrTooManyRecipients):
		// Only with -notifyd-config: SendTx refused the notification, so the
		// whole transaction (the comment too) rolled back.
		writeError(w, http.StatusUnprocessableEntity, "notification refused: "+err.Error())
	default:
		a.logger.ErrorContext(r.Context(), "create comment", "err", err)
		writeError(w, http.StatusInternalServerError, "could not save the comment")
	}
}

// getPost is GET /posts/{id}: the post and its comments, oldest first.
func (a *app) getPost(w http.ResponseWriter, r *http.Request) {
	postID, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusNotFound, "no such post")
		return
	}
	var post struct {
		ID       int64     `json:"id"`
		AuthorID string    `json:"author_id"`
		Title    string    `json:"title"`
		Comments []comment `json:"comments"`
	}
	err = a.pool.QueryRow(r.Context(), `SELECT id, author_id, title FROM example_posts WHERE id = $1`, postID).
		Scan(&post.ID, &post.AuthorID, &post.Title)
	if errors.Is(err, pgx.ErrNoRows) {
		writeError(w, http.StatusNotFound, "no such post")
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	rows, err := a.pool.Query(r.Context(), `
SELECT id, post_id, author_id, author_name, body, created_at
FROM example_comments WHERE post_id = $1 ORDER BY created_at, id LIMIT 200`, postID)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	post.Comments, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (comment, error) {
		var c comment
		err := row.Scan(&c.ID, &c.PostID, &c.AuthorID, &c.AuthorName, &c.Body, &c.CreatedAt)
		return c, err
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, post)
}

// tokenTTL is how long a minted recipient token lives. The front-end asks for
// a new one before it expires (an EventSource that gets a 401 must too).
const tokenTTL = time.Hour

// token is GET /token?user=u2: the recipient token the front-end presents to
// notifyd's /v1/inbox and /v1/inbox/stream, as text/plain.
//
// THIS IS A DEMO: anyone can ask for anyone's token. A real application takes
// the recipient id from the signed-in session and never from the request.
func (a *app) token(w http.ResponseWriter, r *http.Request) {
	if a.tokenSecret == "" {
		writeError(w, http.StatusServiceUnavailable, "no token secret: set NOTIFYD_TOKEN_SECRET or -token-secret to notifyd's http.token_secret")
		return
	}
	user := r.URL.Query().Get("user")
	if user == "" || len(user) > 255 || !utf8.ValidString(user) {
		writeError(w, http.StatusBadRequest, "user: give ?user=<recipient id>")
		return
	}
	tok, err := notifyd.RecipientToken(a.tokenSecret, user, tokenTTL)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(tok))
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// excerpt shortens s to at most n runes, on a rune boundary.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
