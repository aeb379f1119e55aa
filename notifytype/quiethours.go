package notifytype

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// QuietHours is a recipient's daily window in which deliveries that reach a
// person directly (email, SMS, push) are held until it ends. Start and End
// are wall-clock times "HH:MM" in the recipient's timezone; a window whose
// end is not after its start crosses midnight ("22:00" to "07:00").
type QuietHours struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// ParseQuietHours reads a profile's quiet_hours JSON and checks it (see
// QuietHours.Validate). Empty input and JSON null are no quiet hours (nil).
func ParseQuietHours(raw []byte) (*QuietHours, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var q QuietHours
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		return nil, fmt.Errorf(`quiet_hours: want {"start":"HH:MM","end":"HH:MM"}: %w`, err)
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	return &q, nil
}

// Validate reports whether Start and End are 24-hour "HH:MM" times that
// differ (an empty window is written as no quiet hours).
func (q QuietHours) Validate() error {
	s, err := clock(q.Start)
	if err != nil {
		return fmt.Errorf("quiet_hours.start: %w", err)
	}
	e, err := clock(q.End)
	if err != nil {
		return fmt.Errorf("quiet_hours.end: %w", err)
	}
	if s == e {
		return errors.New("quiet_hours: start and end are the same time (omit quiet_hours for none)")
	}
	return nil
}

// Holds reports whether t falls inside the window in loc (nil is UTC) and,
// if so, the instant the window ends. Wall-clock times are resolved on each
// calendar day as time.Date does: on a day when the clocks skip an hour, a
// time inside the gap is read past it, so the window's length follows the
// day's (a window "01:00"–"03:00" on a spring-forward night lasts one hour).
func (q QuietHours) Holds(t time.Time, loc *time.Location) (time.Time, bool) {
	if loc == nil {
		loc = time.UTC
	}
	s, err1 := clock(q.Start)
	e, err2 := clock(q.End)
	if err1 != nil || err2 != nil || s == e {
		return time.Time{}, false
	}
	lt := t.In(loc)
	y, m, d := lt.Date()
	// The window that started yesterday may still be open (it crosses
	// midnight), or today's may be.
	for _, day := range []int{d - 1, d} {
		start := time.Date(y, m, day, s/60, s%60, 0, 0, loc)
		endDay := day
		if e <= s {
			endDay++
		}
		end := time.Date(y, m, endDay, e/60, e%60, 0, 0, loc)
		if !t.Before(start) && t.Before(end) {
			return end, true
		}
	}
	return time.Time{}, false
}

// clock parses "HH:MM" (00:00–23:59) into minutes after midnight.
func clock(v string) (int, error) {
	if len(v) != 5 || v[2] != ':' {
		return 0, fmt.Errorf("want HH:MM (24-hour), got %q", v)
	}
	t, err := time.Parse("15:04", v)
	if err != nil {
		return 0, fmt.Errorf("want HH:MM (24-hour), got %q", v)
	}
	return t.Hour()*60 + t.Minute(), nil
}
