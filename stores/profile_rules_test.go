package stores_test

import (
	"context"
	"testing"
	"time"
	_ "time/tzdata" // zones for time.LoadLocation where the system has none

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
)

// The daemon reads a recipient's timezone with Go's time.LoadLocation (digest
// times, quiet hours): every name notify_put_recipient accepts loads in Go.
// Of PostgreSQL's zone names it refuses only what Go would not load the same
// way, and names Go refuses are refused.
func TestTimezoneRuleAgreesWithGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := pgtest.Tx(t)
	rows, err := tx.Query(ctx, `SELECT name, notify_check_timezone(name) FROM pg_timezone_names
UNION ALL SELECT x, notify_check_timezone(x)
FROM unnest(ARRAY['Europe/Paris', 'UTC', 'Etc/GMT+5', 'EST5EDT', 'europe/paris', 'EST5', 'PST', 'Local', '<+03>-3',
                  '+05:00', '5', 'INTERVAL ''1 hour''', '../../etc/passwd', '/etc/localtime', 'Europe/Paris ']) AS x`)
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	var name string
	var ok bool
	_, err = pgx.ForEachRow(rows, []any{&name, &ok}, func() error {
		_, goErr := time.LoadLocation(name)
		if ok {
			accepted++
			if goErr != nil || name == "Local" {
				t.Errorf("notify_check_timezone accepts %q, which Go does not load: %v", name, goErr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if accepted < 400 {
		t.Fatalf("only %d zone names accepted", accepted)
	}
	for _, tz := range []struct {
		name string
		ok   bool
	}{{"Europe/Paris", true}, {"UTC", true}, {"Etc/GMT+5", true}, {"EST5EDT", true}, {"europe/paris", false},
		{"EST5", false}, {"PST", false}, {"Local", false}, {"<+03>-3", false}, {"+05:00", false}, {"../../etc/passwd", false}} {
		if err := tx.QueryRow(ctx, `SELECT notify_check_timezone($1)`, tz.name).Scan(&ok); err != nil || ok != tz.ok {
			t.Errorf("notify_check_timezone(%q) = %v, %v; want %v", tz.name, ok, err, tz.ok)
		}
	}
}

// Quiet hours are read by Go (notifytype.ParseQuietHours, at delivery and in
// the preference center) and written by notify_put_recipient: both accept
// the same values.
func TestQuietHoursRuleAgreesWithGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := pgtest.Tx(t)
	for _, v := range []string{
		`{"start": "22:00", "end": "07:00"}`, `{"start": "00:00", "end": "23:59"}`, `{"start": "09:30", "end": "09:31"}`,
		`{"start": "22:00", "end": "22:00"}`, `{"start": "24:00", "end": "07:00"}`, `{"start": "7:00", "end": "08:00"}`,
		`{"start": "07:60", "end": "08:00"}`, `{"start": "07:00"}`, `{"end": "07:00"}`, `{}`, `{"start": 700, "end": "08:00"}`,
		`{"start": "07:00", "end": "08:00", "tz": "UTC"}`, `{"start": "07:00:00", "end": "08:00"}`, `{"start": " 7:00", "end": "08:00"}`,
		`"22:00-07:00"`, `[]`, `{"start": "07:00", "end": "08:00 "}`,
	} {
		_, goErr := notifytype.ParseQuietHours([]byte(v))
		if _, err := tx.Exec(ctx, `SAVEPOINT q`); err != nil {
			t.Fatal(err)
		}
		_, sqlErr := tx.Exec(ctx, `SELECT notify_put_recipient('quiet-'||md5($1), jsonb_build_object('quiet_hours', $1::jsonb))`, v)
		in, refused := stores.InputErrorOf(sqlErr)
		if sqlErr != nil && (!refused || in.Field != "quiet_hours") {
			t.Fatalf("%s: %v", v, sqlErr)
		}
		if (goErr == nil) != (sqlErr == nil) {
			t.Errorf("%s: Go says %v, SQL says %v", v, goErr, sqlErr)
		}
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT q`); err != nil {
			t.Fatal(err)
		}
	}
}
