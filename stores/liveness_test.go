package stores_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// A registered River client whose liveness lock is free has its running
// jobs made available at once, with the rescue recorded, and is forgotten;
// a client whose process holds its lock, and a client that never
// registered, keep theirs running (River's rescuer deals with the last).
func TestRescueDeadClients(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	connect := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	gone, live := connect(), connect()
	defer live.Close(ctx)
	for c, id := range map[*pgx.Conn]string{gone: "client-gone", live: "client-live"} {
		if err := stores.HoldLiveness(ctx, c, id); err != nil {
			t.Fatal(err)
		}
	}
	other := connect() // a second process with the same client ID is refused
	if err := stores.HoldLiveness(ctx, other, "client-live"); !errors.Is(err, stores.ErrLivenessHeld) {
		t.Fatalf("a second hold of a held client's lock = %v, want ErrLivenessHeld", err)
	}
	other.Close(ctx)
	gone.Close(ctx) // the process died: PostgreSQL released its lock
	for _, owner := range []string{"client-gone", "client-live", "client-unregistered"} {
		if _, err := pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at,
			tags, metadata, attempt, attempted_at, attempted_by)
			VALUES ('{}', 'test.rescue', 25, 1, 'default', 'running', now(), '{}', '{}', 1, now(), ARRAY['earlier', $1])`, owner); err != nil {
			t.Fatal(err)
		}
	}
	rescue := func() (int, int) {
		t.Helper()
		var jobs, clients int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			jobs, clients, err = stores.RescueDeadClients(ctx, tx)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return jobs, clients
	}
	state := func(owner string) (state string, errs, rescues int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT state::text, coalesce(cardinality(errors), 0), coalesce((metadata->>'river:rescue_count')::int, 0)
			FROM river_job WHERE attempted_by[2] = $1`, owner).Scan(&state, &errs, &rescues); err != nil {
			t.Fatal(err)
		}
		return state, errs, rescues
	}

	if jobs, clients := rescue(); jobs != 1 || clients != 1 {
		t.Fatalf("rescued %d jobs of %d clients, want 1 of 1", jobs, clients)
	}
	if s, errs, rescues := state("client-gone"); s != "available" || errs != 1 || rescues != 1 {
		t.Fatalf("the gone client's job: %s, %d errors, rescue count %d; want available, 1, 1", s, errs, rescues)
	}
	for _, owner := range []string{"client-live", "client-unregistered"} {
		if s, _, _ := state(owner); s != "running" {
			t.Fatalf("%s's job is %s, want running", owner, s)
		}
	}
	rows, _ := pool.Query(ctx, `SELECT client_id FROM notify_river_clients ORDER BY 1`)
	registered, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(registered) != 1 || registered[0] != "client-live" {
		t.Fatalf("registered clients %v (%v), want only client-live", registered, err)
	}
	if jobs, clients := rescue(); jobs != 0 || clients != 0 {
		t.Fatalf("a second sweep rescued %d jobs of %d clients", jobs, clients)
	}

	// The live one stops cleanly: unregistered, nothing left to rescue.
	if err := stores.ReleaseLiveness(ctx, live, "client-live"); err != nil {
		t.Fatal(err)
	}
	if jobs, clients := rescue(); jobs != 0 || clients != 0 {
		t.Fatalf("after a clean stop the sweep rescued %d jobs of %d clients", jobs, clients)
	}
}
