package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5/pgconn"
)

// Error codes, the "code" of every error response. Clients branch on the code,
// never on the message.
const (
	CodeBadRequest        = "bad_request"         // 400: malformed JSON, wrong type, unknown field, bad query value, bad id
	CodeBadCursor         = "bad_cursor"          // 400: an inbox cursor that was not issued by this API
	CodeUnauthorized      = "unauthorized"        // 401: missing, forged, expired or wrong kind of token
	CodeNotFound          = "not_found"           // 404: unknown route or resource
	CodeUnknownNotifier   = "unknown_notifier"    // 404: POST /v1/notifications names no configured notifier
	CodeMethodNotAllowed  = "method_not_allowed"  // 405: the route exists for other methods (see Allow)
	CodeBodyTooLarge      = "body_too_large"      // 413: body over http.max_body
	CodeInvalidRequest    = "invalid_request"     // 422: well-formed JSON that breaks a rule (missing key, id too long)
	CodeInvalidParams     = "invalid_params"      // 422: params fail the notifier's JSON Schema
	CodeTooManyRecipients = "too_many_recipients" // 422: more inline recipients than max_recipients
	CodeInternal          = "internal"            // 500: a bug or a database failure; the log has the cause
	CodeNotReady          = "not_ready"           // 503: /readyz: database unreachable or migrations pending
)

// Error is an API error: an HTTP status and the body
// {"error":{"code","message","details"}}. Handlers mounted through Options.Extra
// can return the same shape with WriteError.
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

func errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *Error {
	return errorf(http.StatusBadRequest, CodeBadRequest, format, args...)
}

// fieldError is a 400 about one field.
func fieldError(field, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: field + ": " + msg,
		Details: []any{FieldDetail{Field: field, Message: msg}}}
}

func notFoundError(format string, args ...any) *Error {
	return errorf(http.StatusNotFound, CodeNotFound, format, args...)
}

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details []any  `json:"details"`
}

// WriteError writes err as the API's error shape. An *Error (anywhere in err's
// chain) is written as it says; a PostgreSQL data exception (SQLSTATE class
// 22: a value the database cannot store) is a 400; anything else is a 500
// "internal" whose cause is logged with the request, not sent.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	apiErr := asAPIError(err)
	if info := requestInfoFrom(r); info != nil && apiErr.Status >= 500 {
		info.err = err
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

func asAPIError(err error) *Error {
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
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
