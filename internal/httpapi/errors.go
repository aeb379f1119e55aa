package httpapi

import (
	"fmt"
	"net/http"

	"github.com/notifyd/notifyd/internal/wire"
)

// The error shape and its codes are internal/wire's, shared with the inbox
// stream; these build the errors the API's handlers return.

func errorf(status int, code, format string, args ...any) *wire.Error {
	return &wire.Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *wire.Error {
	return errorf(http.StatusBadRequest, wire.CodeBadRequest, format, args...)
}

// fieldError is a 400 about one field.
func fieldError(field, format string, args ...any) *wire.Error {
	msg := fmt.Sprintf(format, args...)
	return &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeBadRequest, Message: field + ": " + msg,
		Details: []any{wire.FieldDetail{Field: field, Message: msg}}}
}

func notFoundError(format string, args ...any) *wire.Error {
	return errorf(http.StatusNotFound, wire.CodeNotFound, format, args...)
}
