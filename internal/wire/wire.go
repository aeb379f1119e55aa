// Package wire holds what the HTTP API and the inbox stream both write: the
// error shape {"error":{"code","message","details"}} with its codes, and the
// JSON shapes of an inbox item and of the counts. It is a leaf: the API
// (internal/httpapi) and the stream (internal/stream) import it, it imports
// neither.
package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notifyd/notifyd/stores"
)

// Error codes, the "code" of every error response. Clients branch on the code,
// never on the message.
const (
	CodeBadRequest        = "bad_request"         // 400: malformed JSON, wrong type, unknown field, bad query value, bad id
	CodeBadCursor         = "bad_cursor"          // 400: an inbox cursor that was not issued by this API
	CodeUnauthorized      = "unauthorized"        // 401: missing, forged, expired or wrong kind of token
	CodeForbidden         = "forbidden"           // 403: a tenant key or tenant token outside its tenant
	CodeNotFound          = "not_found"           // 404: unknown route or resource
	CodeUnknownNotifier   = "unknown_notifier"    // 404: POST /v1/notifications names no configured notifier
	CodeMethodNotAllowed  = "method_not_allowed"  // 405: the route exists for other methods (see Allow)
	CodeBodyTooLarge      = "body_too_large"      // 413: body over http.max_body
	CodeInvalidRequest    = "invalid_request"     // 422: well-formed JSON that breaks a rule (missing key, id too long)
	CodeInvalidParams     = "invalid_params"      // 422: params fail the notifier's JSON Schema
	CodeTooManyRecipients = "too_many_recipients" // 422: more inline recipients than max_recipients
	CodeRateLimited       = "rate_limited"        // 429: the caller's token bucket is empty, or too many open streams
	CodeInternal          = "internal"            // 500: a bug or a database failure; the log has the cause
	CodeNotReady          = "not_ready"           // 503: /readyz: database unreachable or migrations pending
)

// Error is an API error: an HTTP status and the body
// {"error":{"code","message","details"}}. Handlers mounted beside the API
// return the same shape with WriteError.
type Error struct {
	Status  int
	Code    string
	Message string
	// Details are encoded as the "details" array ([] when empty). Each is a
	// JSON object: FieldDetail for request fields, config.ParamsDetail
	// ({"pointer","message"}, a JSON pointer into params) for invalid_params.
	Details []any
	// Err is the cause, logged with the request and never sent to the client.
	Err error
}

// FieldDetail names the request field an error is about: "key",
// "recipients[2].id", "ids[0]", or a query parameter ("limit").
type FieldDetail struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details []any  `json:"details"`
}

// Cause is where WriteError leaves the cause of a 5xx for the request's log
// line: the API's request logger puts one in the context (WithCause) and
// logs Err after the handler returns.
type Cause struct {
	Err error
}

type causeKey struct{}

// WithCause returns ctx carrying a new, empty Cause.
func WithCause(ctx context.Context) (context.Context, *Cause) {
	c := &Cause{}
	return context.WithValue(ctx, causeKey{}, c), c
}

// SetCause records err as the cause of r's failure, for the log line; it
// does nothing when r's context carries no Cause.
func SetCause(r *http.Request, err error) {
	if r == nil {
		return
	}
	if c, ok := r.Context().Value(causeKey{}).(*Cause); ok {
		c.Err = err
	}
}

// WriteError writes err as the API's error shape. An *Error (anywhere in err's
// chain) is written as it says; a PostgreSQL data exception (SQLSTATE class
// 22: a value the database cannot store) is a 400; anything else is a 500
// "internal" whose cause is logged with the request, not sent.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	apiErr := AsError(err)
	if apiErr.Status >= 500 {
		SetCause(r, err)
	}
	details := apiErr.Details
	if details == nil {
		details = []any{}
	}
	if apiErr.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="notifyd"`)
	}
	WriteJSON(w, apiErr.Status, errorBody{Error: errorObject{Code: apiErr.Code, Message: apiErr.Message, Details: details}})
}

// AsError is err as the API answers it: the *Error in its chain, a 400 for a
// PostgreSQL data exception, or a 500 that keeps err as its unsent cause.
func AsError(err error) *Error {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 && pgErr.Code[:2] == "22" {
		return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: "invalid value: " + pgErr.Message, Err: err}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error", Err: err}
}

// WriteJSON writes v as the JSON body of a response with the given status.
// The body is encoded before anything is written, so an encoding failure is
// still a clean 500.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"code":"internal","message":"internal error","details":[]}}`)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	// With its length known, net/http sends a body larger than its 2 kB
	// response buffer in one write instead of chunk by chunk through a 4 kB
	// one (an inbox page of 50 items is about 25 kB: a sixth of the API's CPU
	// went to those writes).
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// InboxItem is an inbox item as the API shows it: in GET /v1/inbox pages and
// as the data of the stream's inbox.created event.
type InboxItem struct {
	ID         string          `json:"id"`
	Notifier   string          `json:"notifier"`
	Key        string          `json:"key"`
	Category   string          `json:"category"`
	Reason     string          `json:"reason"`
	Actor      *string         `json:"actor"`
	Title      string          `json:"title"`
	Body       string          `json:"body"`
	URL        string          `json:"url"`
	Params     json.RawMessage `json:"params"`
	CreatedAt  time.Time       `json:"created_at"`
	SeenAt     *time.Time      `json:"seen_at"`
	ReadAt     *time.Time      `json:"read_at"`
	ArchivedAt *time.Time      `json:"archived_at"`
	// Tenant is the tenant of the item's notification, null for none.
	Tenant *string `json:"tenant"`
}

// InboxItemOf is it as the API shows it.
func InboxItemOf(it stores.InboxItem) InboxItem {
	return InboxItem{ID: it.ID, Notifier: it.Notifier, Key: it.Key, Category: it.Category, Reason: it.Reason,
		Actor: it.Actor, Title: it.Title, Body: it.Body, URL: it.URL, Params: it.Params, CreatedAt: it.CreatedAt,
		SeenAt: it.SeenAt, ReadAt: it.ReadAt, ArchivedAt: it.ArchivedAt, Tenant: nonEmpty(it.Tenant)}
}

// nonEmpty is s, or nil for "".
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Counts is GET /v1/inbox/counts and the data of the stream's counts event.
// Each count is exact up to its cap (?max=, default 99, the stream's always
// the default); above it the count is the cap and its _capped flag is true:
// a badge shows "99+".
type Counts struct {
	Unread       int  `json:"unread"`
	Unseen       int  `json:"unseen"`
	UnreadCapped bool `json:"unread_capped"`
	UnseenCapped bool `json:"unseen_capped"`
}

// CountsOf is c as the API shows it.
func CountsOf(c stores.InboxCounts) Counts {
	return Counts{Unread: c.Unread, Unseen: c.Unseen, UnreadCapped: c.UnreadCapped, UnseenCapped: c.UnseenCapped}
}
