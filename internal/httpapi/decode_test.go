package httpapi

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// FuzzDecodeSendRequest feeds arbitrary bodies through what POST
// /v1/notifications does before touching the database: it must never panic,
// every refusal must be a 4xx *wire.Error, and what it accepts must be storable
// (valid UTF-8, no NUL).
func FuzzDecodeSendRequest(f *testing.F) {
	for _, seed := range []string{
		`{"notifier":"comment.created","key":"k","recipients":["u1",{"id":"u2","reason":"author"}],"topics":["t"],"params":{"a":1},"send_at":"2030-01-01T00:00:00Z"}`,
		`{"notifier":1}`, `{"recipients":[5]}`, `{"recipients":[{"id":"x","y":1}]}`, `{"params":[1]}`, `{"params":null}`,
		`{} {}`, `[]`, `null`, ``, "{\"key\":\"\xff\"}", `{"key":"\u0000"}`, `{"params":{"\u0000":1}}`, `{"send_at":"x"}`,
		`{"params":{"n":123456789012345678901234567890}}`, `{"key":"\ud800"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req sendRequest
		err := decodeBody(body, &req, false)
		if err == nil {
			_, err = req.notification()
		}
		if err != nil {
			var apiErr *wire.Error
			if !errors.As(err, &apiErr) || apiErr.Status < 400 || apiErr.Status >= 500 || apiErr.Code == "" || apiErr.Message == "" {
				t.Fatalf("refusal is not a 4xx API error: %#v", err)
			}
			return
		}
		for _, s := range append([]string{req.Notifier, req.Key, req.Actor}, req.Topics...) {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("accepted an unstorable string %q", s)
			}
		}
	})
}

func FuzzCursor(f *testing.F) {
	f.Add(encodeCursor(stores.InboxCursor{CreatedAt: time.Unix(1700000000, 123000).UTC(), ID: "0190b8a4-0000-7000-8000-000000000001"}))
	f.Add("")
	f.Add("AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same cursor.
		if again := encodeCursor(*c); again != s {
			t.Fatalf("cursor %q decodes and re-encodes as %q", s, again)
		}
	})
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	in := stores.InboxCursor{CreatedAt: time.Date(2029, 1, 2, 3, 4, 5, 678901000, time.UTC), ID: "0190b8a4-1234-7abc-8def-0123456789ab"}
	out, err := decodeCursor(encodeCursor(in))
	if err != nil {
		t.Fatal(err)
	}
	if !out.CreatedAt.Equal(in.CreatedAt) || out.ID != in.ID {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
}
