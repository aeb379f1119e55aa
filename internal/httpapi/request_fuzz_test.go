package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// fuzzSendConfig is a notifier whose params schema the fuzzer tries to get
// past.
const fuzzSendConfig = `
notifiers:
  comment.created:
    max_recipients: 3
    params:
      type: object
      required: [post_title]
      additionalProperties: false
      properties:
        post_title: {type: string, minLength: 1, maxLength: 50}
        author: {type: object, required: [id], properties: {id: {type: string}, karma: {type: integer, minimum: 0}}}
        tags: {type: array, maxItems: 3, items: {type: string, pattern: "^[a-z]+$"}}
        url: {type: string, format: uri}
    channels:
      in_app: {title: "{{.post_title}}"}
`

// FuzzSendParams runs arbitrary bodies through everything POST
// /v1/notifications does before it writes: decoding, the request's own
// checks, then params validation as SendTx performs it (the params are
// re-encoded and decoded with UseNumber, what the fan-out reads back). It
// never panics; every refusal is a 4xx API error; a schema refusal is a
// *config.ParamsError that the API answers 422 invalid_params with a JSON
// pointer per detail.
func FuzzSendParams(f *testing.F) {
	for _, seed := range []string{
		`{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"Hello","author":{"id":"u1","karma":3},"tags":["a","b"],"url":"https://x.test/p"}}`,
		`{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":""}}`,
		`{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x","author":{"karma":-1},"tags":["A","b","c","d"],"url":"::"}}`,
		`{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x","extra":true}}`,
		`{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x","author":{"id":"u","karma":1e400}}}`,
		`{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"x","author":{"id":"u","karma":18446744073709551616}}}`,
		`{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":"\ud800\udc00\ud800","tags":[null]}}`,
		`{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"post_title":["x"],"author":"u1"}}`,
		`{"notifier":"comment.created","key":"k","recipients":["u1"],"params":{"~1/":{"a/b":[{"~0":1}]}}}`,
		`{"params":null}`, `{"params":{}}`, `{"params":"{}"}`,
	} {
		f.Add([]byte(seed))
	}
	cfg, err := config.Parse("fuzz.yaml", []byte(fuzzSendConfig))
	if err != nil {
		f.Fatal(err)
	}
	nf, _ := cfg.Notifier("comment.created")
	f.Fuzz(func(t *testing.T, body []byte) {
		var req sendRequest
		err := decodeBody(body, &req, false)
		if err == nil {
			_, err = req.notification()
		}
		if err != nil {
			var apiErr *wire.Error
			if !errors.As(err, &apiErr) || apiErr.Status < 400 || apiErr.Status >= 500 {
				t.Fatalf("refusal is not a 4xx API error: %#v", err)
			}
			return
		}
		n, _ := req.notification()
		// What SendTx validates: the params' JSON form read back with UseNumber.
		raw, err := json.Marshal(n.Params)
		if err != nil {
			t.Fatalf("decoded params do not encode: %v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var readBack map[string]any
		if err := dec.Decode(&readBack); err != nil {
			t.Fatalf("encoded params do not decode: %v (%s)", err, raw)
		}
		verr := nf.ValidateParams(readBack)
		if verr == nil {
			// What passed must also pass as the API decoded it: the fan-out
			// and `notifyd check` must not disagree with SendTx.
			if err := nf.ValidateParams(n.Params); err != nil {
				t.Fatalf("params pass after a JSON round trip but not as decoded: %v (%s)", err, raw)
			}
			return
		}
		pe, ok := verr.(*config.ParamsError)
		if !ok {
			t.Fatalf("ValidateParams returned %T, want *config.ParamsError: %v", verr, verr)
		}
		apiErr := wire.AsError(sendError(verr))
		if apiErr.Status != http.StatusUnprocessableEntity || apiErr.Code != wire.CodeInvalidParams || len(apiErr.Details) != len(pe.Details) {
			t.Fatalf("params refusal answered %d %s with %d details, want 422 %s with %d", apiErr.Status, apiErr.Code,
				len(apiErr.Details), wire.CodeInvalidParams, len(pe.Details))
		}
		for _, d := range pe.Details {
			if d.Pointer != "" && d.Pointer[0] != '/' {
				t.Fatalf("detail pointer %q is not a JSON pointer", d.Pointer)
			}
		}
	})
}

// FuzzKeyCursor checks the topic and subscription list cursors: decoding
// never panics, a cursor of one list is never taken by the other, and what
// decodes re-encodes to a cursor that decodes to the same position.
//
// It does not require the re-encoding to be the same string: the decoder is
// base64.RawURLEncoding, which ignores the unused low bits of the last
// character, so "AnR1MQO2hXN" and "AnR1MQO2hXM" are the same cursor (see
// testdata/fuzz/FuzzKeyCursor and docs/security.md). Harmless, since a cursor
// grants nothing, but Strict() decoding would make cursors canonical.
func FuzzKeyCursor(f *testing.F) {
	for _, key := range []string{"u1", "post-9", "", "\x00", "\xff\xfe", "a/b%2F"} {
		f.Add(encodeKeyCursor(cursorRecipient, key))
		f.Add(encodeKeyCursor(cursorTopic, key))
	}
	f.Add("")
	f.Add("AgE")
	f.Add("not a cursor!")
	f.Fuzz(func(t *testing.T, s string) {
		for _, kind := range []byte{cursorRecipient, cursorTopic} {
			key, err := decodeKeyCursor(kind, s)
			if err != nil {
				continue
			}
			again := encodeKeyCursor(kind, key)
			if back, err := decodeKeyCursor(kind, again); err != nil || back != key {
				t.Fatalf("cursor %q decodes to %q, re-encodes as %q, which decodes to %q (%v)", s, key, again, back, err)
			}
			other := cursorTopic
			if kind == cursorTopic {
				other = cursorRecipient
			}
			if _, err := decodeKeyCursor(other, s); err == nil {
				t.Fatalf("cursor %q is accepted by both lists", s)
			}
		}
	})
}

// FuzzInboxCursor checks the inbox cursor as FuzzKeyCursor checks the list
// cursors: decoding never panics, and what decodes re-encodes to a cursor of
// the same position (a UTC time, a canonical lowercase UUID). FuzzCursor in
// decode_test.go asks for the very same string back, which the non-strict
// base64 decoder does not give: "AQAGCiQYHkB7AZC4pAAAcACAAAAAAAAAAZjJTEN" and
// "…TEM" decode alike (see docs/security.md).
func FuzzInboxCursor(f *testing.F) {
	f.Add(encodeCursor(stores.InboxCursor{CreatedAt: time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC), ID: "0190b8a4-1234-7abc-8def-0123456789ab"}))
	f.Add(encodeCursor(stores.InboxCursor{CreatedAt: time.Unix(0, 0).UTC(), ID: "00000000-0000-0000-0000-000000000000"}))
	f.Add("AQAGCiQYHkB7AZC4pAAAcACAAAAAAAAAAZjJTEN")
	f.Add("")
	f.Add("AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s)
		if err != nil {
			return
		}
		if c.CreatedAt.Location() != time.UTC || c.ID != strings.ToLower(c.ID) || !uuidv7.Valid(c.ID) {
			t.Fatalf("cursor %q decodes to a non-canonical %+v", s, c)
		}
		again := encodeCursor(*c)
		back, err := decodeCursor(again)
		if err != nil || !back.CreatedAt.Equal(c.CreatedAt) || back.ID != c.ID {
			t.Fatalf("cursor %q decodes to %+v, re-encodes as %q, which decodes to %+v (%v)", s, c, again, back, err)
		}
	})
}
