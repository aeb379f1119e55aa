package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/notifyd/notifyd/internal/wire"
)

// DecodeJSON reads r's body into dst (a pointer to a struct) under the rules
// every endpoint shares, and returns an *wire.Error to hand to WriteError:
//
//   - a body over http.max_body is a 413 body_too_large;
//   - an empty body is a 400, unless allowEmpty, when it reads as {};
//   - the body must be valid UTF-8 and one JSON object, with nothing after it;
//   - unknown fields and wrong types are 400s naming the field;
//   - strings may not contain NUL (\u0000), which PostgreSQL cannot store.
func (s *Server) DecodeJSON(w http.ResponseWriter, r *http.Request, dst any, allowEmpty bool) error {
	data, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeBody(data, dst, allowEmpty)
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	tooLarge := errorf(http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge,
		"request body is larger than %d bytes (http.max_body)", s.maxBody)
	if r.ContentLength > s.maxBody {
		return nil, tooLarge
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return nil, tooLarge
		}
		return nil, badRequest("reading request body: %v", err)
	}
	return data, nil
}

func decodeBody(data []byte, dst any, allowEmpty bool) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		if !allowEmpty {
			return badRequest("request body is empty: send a JSON object")
		}
		trimmed = []byte("{}")
	}
	if !utf8.Valid(trimmed) {
		return badRequest("request body is not valid UTF-8")
	}
	if trimmed[0] != '{' {
		return badRequest("request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("unexpected data after the JSON object")
	}
	if bytes.Contains(trimmed, []byte(`\u0000`)) && containsNUL(trimmed) {
		return badRequest(`strings must not contain NUL (\u0000)`)
	}
	return nil
}

// jsonError turns an encoding/json error into a 400 that names the field.
func jsonError(err error) *wire.Error {
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntaxErr):
		return badRequest("malformed JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("malformed JSON: the body ends before the value does")
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return badRequest("want %s, got JSON %s", jsonKind(typeErr.Type), typeErr.Value)
		}
		return fieldError(typeErr.Field, "want %s, got JSON %s", jsonKind(typeErr.Type), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return fieldError(field, "unknown field")
	}
	return badRequest("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[json.Number]() {
		return "a number"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

// containsNUL reports whether any string (or object key) in the JSON text
// holds a NUL character once unescaped.
func containsNUL(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && strings.IndexByte(s, 0) >= 0 {
			return true
		}
	}
}

// decodeObject decodes raw (a JSON object, or null/absent for empty) into a
// map, numbers kept as json.Number so large integers survive. field names the
// value in errors.
func decodeObject(field string, raw json.RawMessage) (map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, nil
	}
	if raw[0] != '{' {
		return nil, fieldError(field, "want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fieldError(field, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return m, nil
}

// decodeStrict decodes raw into dst, rejecting unknown fields; errors name
// fields under prefix ("recipients[2]").
func decodeStrict(prefix string, raw json.RawMessage, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		e := jsonError(err)
		for i, d := range e.Details {
			if fd, ok := d.(wire.FieldDetail); ok {
				fd.Field = prefix + "." + fd.Field
				e.Details[i] = fd
				e.Message = fd.Field + ": " + fd.Message
			}
		}
		if len(e.Details) == 0 {
			return fieldError(prefix, "%s", e.Message)
		}
		return e
	}
	return nil
}

// parseQuery parses r's query string, refusing one that does not parse with
// a 400 bad_request. r.URL.Query() drops pairs it cannot decode without a
// word, so "?cursor=%%%garbage" would read as no cursor and answer the first
// page: a client with a bug would never learn of it.
func parseQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeBadRequest,
			Message: "malformed query string: " + err.Error()}
	}
	return q, nil
}
