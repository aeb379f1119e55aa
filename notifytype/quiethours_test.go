package notifytype_test

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones below, also where the system has no database

	"github.com/notifyd/notifyd/notifytype"
)

func TestQuietHoursHolds(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	night := notifytype.QuietHours{Start: "22:00", End: "07:00"}
	day := notifytype.QuietHours{Start: "09:00", End: "17:00"}
	gap := notifytype.QuietHours{Start: "01:00", End: "03:00"}
	for _, tc := range []struct {
		name string
		q    notifytype.QuietHours
		at   string
		want string // "" = not held
	}{
		{"before midnight, held to the next morning", night, "2026-06-10T03:30:00Z" /* 23:30 EDT */, "2026-06-10T11:00:00Z"},
		{"after midnight, held to this morning", night, "2026-06-10T08:00:00Z" /* 04:00 EDT */, "2026-06-10T11:00:00Z"},
		{"at the end, not held", night, "2026-06-10T11:00:00Z", ""},
		{"at the start, held", night, "2026-06-10T02:00:00Z" /* 22:00 EDT */, "2026-06-10T11:00:00Z"},
		{"midday, not held", night, "2026-06-10T16:00:00Z", ""},
		{"a window within the day", day, "2026-06-10T14:00:00Z" /* 10:00 EDT */, "2026-06-10T21:00:00Z"},
		{"spring forward: the night is an hour shorter", night, "2026-03-08T06:30:00Z" /* 01:30 EST */, "2026-03-08T11:00:00Z" /* 07:00 EDT */},
		{"spring forward: a window across the gap", gap, "2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z" /* 03:00 EDT */},
		{"fall back: the night is an hour longer", night, "2026-11-01T05:30:00Z" /* 01:30 EDT */, "2026-11-01T12:00:00Z" /* 07:00 EST */},
		{"fall back: the repeated hour, second time", night, "2026-11-01T06:30:00Z" /* 01:30 EST */, "2026-11-01T12:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end, ok := tc.q.Holds(utc(tc.at), ny)
			if tc.want == "" {
				if ok {
					t.Fatalf("held until %s, want not held", end.UTC())
				}
				return
			}
			if !ok || !end.Equal(utc(tc.want)) {
				t.Fatalf("Holds = %s, %v; want %s", end.UTC(), ok, tc.want)
			}
		})
	}
}

func TestParseQuietHours(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw string
		ok  bool
	}{
		{`{"start":"22:00","end":"07:00"}`, true},
		{`null`, true},
		{``, true},
		{`{"start":"22:00","end":"22:00"}`, false},
		{`{"start":"24:00","end":"07:00"}`, false},
		{`{"start":"9:00","end":"17:00"}`, false},
		{`{"start":"22:00"}`, false},
		{`{"start":"22:00","end":"07:00","tz":"x"}`, false},
		{`"22-07"`, false},
	} {
		_, err := notifytype.ParseQuietHours([]byte(tc.raw))
		if (err == nil) != tc.ok {
			t.Errorf("ParseQuietHours(%s) = %v, want ok %v", tc.raw, err, tc.ok)
		}
	}
}
