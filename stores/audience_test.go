package stores_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

func TestAudienceArg(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   any
		want any
	}{
		{nil, nil},
		{"a'b", "a'b"},
		{json.Number("42"), "42"},
		{1.5, "1.5"},
		{true, "true"},
		{[]any{json.Number("1"), "x\"y", nil}, `{"1","x\"y",NULL}`},
		{map[string]any{"a": 1.0}, `{"a":1}`},
	} {
		got, err := stores.AudienceArg(c.in)
		if err != nil || got != c.want {
			t.Errorf("AudienceArg(%#v) = %#v, %v; want %#v", c.in, got, err, c.want)
		}
	}
	if _, err := stores.AudienceArg([]any{[]any{"x"}}); err == nil {
		t.Error("an array of arrays was accepted")
	}
}

// audienceID is the notification the stores tests stage audiences for.
const audienceID = "0190b8a4-0000-7000-8000-0000000000a1"

// StageAudience binds the args as the query's placeholders read them (an
// integer, an array for = ANY), keeps one row per id with the strongest
// reason (the default reason where the query gives none), leaves out the
// actor, empty and NULL ids, and writes nothing but the notification's
// audience members: the query runs READ ONLY and has the statement timeout.
func TestStageAudience(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE TABLE members (org bigint, person text, role text);
		INSERT INTO members VALUES (7, 'ada', 'admin'), (7, 'ada', 'member'), (7, 'bob', NULL), (7, 'cy', 'member'),
		                           (7, '', 'member'), (7, NULL, 'member'), (8, 'dan', 'admin'), (7, 'actor', 'admin');
		CREATE SEQUENCE members_seq;
		CREATE FUNCTION members_write() RETURNS text LANGUAGE sql AS $$ INSERT INTO members VALUES (0, 'w', 'w') RETURNING 'w' $$`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	read := func() []string {
		rows, err := conn.Query(ctx, `SELECT recipient || ':' || reason FROM notify_audience_members WHERE notification_id = $1 ORDER BY recipient`, audienceID)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	q := stores.AudienceQuery{
		Query:   `SELECT person AS id, role AS reason FROM members WHERE org = $1 AND (role IS NULL OR role <> ALL($2))`,
		Args:    []any{json.Number("7"), []any{"guest"}},
		Timeout: time.Second, Actor: "actor", Reasons: []string{"admin", "member"}, DefaultReason: "direct",
	}
	n, err := stores.StageAudience(ctx, conn.Conn(), audienceID, q)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ada:admin", "bob:direct", "cy:member"}
	if got := read(); n != 3 || !slices.Equal(got, want) {
		t.Fatalf("staged %d: %v, want %v", n, got, want)
	}
	// Staged again: the members are replaced; with notify_actor the actor
	// is in.
	q.NotifyActor = true
	if _, err := stores.StageAudience(ctx, conn.Conn(), audienceID, q); err != nil {
		t.Fatal(err)
	}
	if got := read(); !slices.Equal(got, []string{"actor:admin", "ada:admin", "bob:direct", "cy:member"}) {
		t.Fatalf("with notify_actor: %v", got)
	}
	// A write in the query is refused as in a READ ONLY transaction, and
	// what was staged stays as it was.
	for query, want := range map[string]string{
		`SELECT person AS id FROM members, LATERAL (SELECT nextval('members_seq')) s`: "cannot execute nextval() in a read-only transaction",
		`SELECT person AS id FROM members FOR UPDATE`:                                 "cannot execute SELECT FOR UPDATE in a read-only transaction",
		`SELECT members_write() AS id`:                                                "cannot execute INSERT in a read-only transaction",
	} {
		_, err = stores.StageAudience(ctx, conn.Conn(), audienceID, stores.AudienceQuery{Query: query})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want %q", query, err, want)
		}
	}
	if got := read(); len(got) != 4 {
		t.Fatalf("after refused writes: %v", got)
	}
	var rows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM members`).Scan(&rows); err != nil || rows != 8 {
		t.Fatalf("members has %d rows (%v), want 8", rows, err)
	}
	// The connection is read-write again after the query.
	if _, err := conn.Exec(ctx, `INSERT INTO members VALUES (9, 'eve', NULL)`); err != nil {
		t.Fatalf("a write after staging: %v", err)
	}
}

// A param reaches an array placeholder only as a JSON array: a string (or a
// number, an object) is refused with ErrAudienceArg rather than parsed as
// an array literal the sender wrote ("{u1,admin}" as two recipients).
func TestStageAudienceBindsOnlyArraysToArrays(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	q := stores.AudienceQuery{Query: `SELECT x AS id FROM unnest($1::text[]) AS x`, DefaultReason: "direct"}
	for _, bad := range []any{"{u1,admin}", json.Number("1"), map[string]any{}, []any{[]any{"u1"}}} {
		q.Args = []any{bad}
		if n, err := stores.StageAudience(ctx, conn.Conn(), audienceID, q); !errors.Is(err, stores.ErrAudienceArg) {
			t.Errorf("param %#v for $1::text[]: %d staged, %v; want ErrAudienceArg", bad, n, err)
		}
	}
	q.Args = []any{[]any{"u1", "u2"}}
	if n, err := stores.StageAudience(ctx, conn.Conn(), audienceID, q); err != nil || n != 2 {
		t.Fatalf("an array for $1::text[]: %d staged, %v", n, err)
	}
	// A string for a text placeholder is the string, braces and all.
	q.Query, q.Args = `SELECT $1::text AS id`, []any{"{u1,admin}"}
	if n, err := stores.StageAudience(ctx, conn.Conn(), audienceID, q); err != nil || n != 1 {
		t.Fatalf("a string for $1::text: %d staged, %v", n, err)
	}
}

// A run of the fan-out job that stages the audience of a notification
// another run has normalised already writes nothing: the members that
// fan-out reads stay as they are.
func TestStageAudienceLeavesANormalisedNotification(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `INSERT INTO notify_notifications (id, notifier, key, status, normalized)
		VALUES ($1, 'n', 'k', 'pending', true)`, audienceID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO notify_audience_members VALUES ($1, 'kept', 'direct')`, audienceID); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	n, err := stores.StageAudience(ctx, conn.Conn(), audienceID, stores.AudienceQuery{Query: `SELECT 'new' AS id`, DefaultReason: "direct"})
	if err != nil || n != 0 {
		t.Fatalf("staged %d (%v), want nothing", n, err)
	}
	var got []string
	rows, err := pool.Query(ctx, `SELECT recipient FROM notify_audience_members WHERE notification_id = $1`, audienceID)
	if err == nil {
		got, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("members %v (%v), want [kept]", got, err)
	}
}
