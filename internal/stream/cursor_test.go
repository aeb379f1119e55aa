package stream

import (
	"strconv"
	"testing"
)

func TestParseCursor(t *testing.T) {
	t.Parallel()
	const epoch = "9c1f2e7a40d3b815"
	cases := []struct {
		in   string
		want cursor
		ok   bool
	}{
		{in: epoch + ".0", want: cursor{epoch: epoch}, ok: true},
		{in: epoch + ".1099511693313", want: cursor{epoch: epoch, seq: 1099511693313}, ok: true},
		{in: "0000000000000000.42", want: cursor{epoch: "0000000000000000", seq: 42}, ok: true},
		{in: epoch + ".9223372036854775807", want: cursor{epoch: epoch, seq: 1<<63 - 1}, ok: true},
		// Another database's epoch parses; the handler compares it.
		{in: "ffffffffffffffff.7", want: cursor{epoch: "ffffffffffffffff", seq: 7}, ok: true},
		// A bare seq: the cursor before it named its database.
		{in: "0", want: cursor{}, ok: true},
		{in: "1099511693313", want: cursor{seq: 1099511693313}, ok: true},

		// Malformed: none of these was ever sent.
		{in: ""},
		{in: "."},
		{in: epoch},
		{in: epoch + "."},
		{in: "." + "42"},
		{in: epoch + ".-3"},
		{in: epoch + ".+3"},
		{in: epoch + ". 3"},
		{in: epoch + ".3 "},
		{in: epoch + ".1.2"},
		{in: epoch + ".9223372036854775808"}, // beyond int64
		{in: epoch + ".0x10"},
		{in: "9C1F2E7A40D3B815.3"},  // upper case
		{in: "9c1f2e7a40d3b81.3"},   // 15 digits
		{in: "9c1f2e7a40d3b8150.3"}, // 17 digits
		{in: "9c1f2e7a40d3b81g.3"},
		{in: "9c1f2e7a40d3b815:3"},
		{in: "-3"},
		{in: "+3"},
		{in: "soon"},
		{in: "3e5"},
		{in: "9223372036854775808"},
		{in: "٣"}, // an Arabic-Indic digit
		{in: "007"},
		{in: epoch + ".007"},
		{in: epoch + ".00"},
	}
	for _, tc := range cases {
		got, ok := parseCursor(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseCursor(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	const epoch = "0123456789abcdef"
	for _, seq := range []int64{0, 1, 65536, 1099511693313, 1<<63 - 1} {
		s := string(appendCursor(nil, epoch, seq))
		if want := epoch + "." + strconv.FormatInt(seq, 10); s != want {
			t.Fatalf("appendCursor(%d) = %q, want %q", seq, s, want)
		}
		if c, ok := parseCursor(s); !ok || c != (cursor{epoch: epoch, seq: seq}) {
			t.Fatalf("parseCursor(%q) = %+v, %v", s, c, ok)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"0", "42", "9c1f2e7a40d3b815.1099511693313", "-1", "x.1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := parseCursor(s)
		if !ok {
			return
		}
		if c.seq < 0 {
			t.Fatalf("parseCursor(%q): negative seq %d", s, c.seq)
		}
		// Only what a stream sends parses (or sent, for a bare seq).
		want := strconv.FormatInt(c.seq, 10)
		if c.epoch != "" {
			want = string(appendCursor(nil, c.epoch, c.seq))
		}
		if s != want {
			t.Fatalf("parseCursor(%q) = %+v, which is sent as %q", s, c, want)
		}
	})
}
