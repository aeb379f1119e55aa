package stores_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
	rescueForgetting := func(forget ...string) stores.Rescue {
		t.Helper()
		var r stores.Rescue
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			r, err = stores.RescueDeadClients(ctx, tx, forget, time.Now())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	rescue := func() (int, int) {
		t.Helper()
		r := rescueForgetting("client-gone", "client-live", "client-unregistered")
		return r.Jobs, len(r.Gone)
	}
	state := func(owner string) (state string, errs, rescues int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT state::text, coalesce(cardinality(errors), 0), coalesce((metadata->>'river:rescue_count')::int, 0)
			FROM river_job WHERE attempted_by[2] = $1`, owner).Scan(&state, &errs, &rescues); err != nil {
			t.Fatal(err)
		}
		return state, errs, rescues
	}

	// Seen gone but not yet to be forgotten: the jobs are rescued, the
	// client stays registered.
	if r := rescueForgetting(); r.Jobs != 1 || len(r.Gone) != 1 || r.Gone[0] != "client-gone" || len(r.Freed) != 0 {
		t.Fatalf("first rescue = %+v, want 1 job of client-gone, nothing freed", r)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM notify_river_clients WHERE client_id = 'client-gone'`); n != 1 {
		t.Fatalf("the gone client was forgotten before it was asked to be")
	}
	if jobs, clients := rescue(); jobs != 0 || clients != 1 {
		t.Fatalf("rescued %d jobs of %d clients, want 0 of 1 (the job was already rescued)", jobs, clients)
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

// The deliveries a gone client had claimed are taken back (`failed`, due
// now, a last_error that names the client) only once the caller asks for
// that client to be forgotten; claims of a live client, of an unregistered
// one and without a claimant wait for the lease. A client's own FreeClaims
// takes back its claims whatever its lock.
func TestRescueDeadClientsFreesTheirClaims(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	gone, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	live, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close(ctx)
	if err := stores.HoldLiveness(ctx, gone, "client-gone"); err != nil {
		t.Fatal(err)
	}
	if err := stores.HoldLiveness(ctx, live, "client-live"); err != nil {
		t.Fatal(err)
	}
	gone.Close(ctx)
	claimants := map[string]string{ // delivery -> claimant
		"01900000-0000-7000-8000-00000000d201": "client-gone",
		"01900000-0000-7000-8000-00000000d202": "client-gone",
		"01900000-0000-7000-8000-00000000d203": "client-live",
		"01900000-0000-7000-8000-00000000d204": "client-unregistered",
		"01900000-0000-7000-8000-00000000d205": "",
	}
	i := 0
	for did, by := range claimants {
		i++
		pendingEmail(t, pool, fmt.Sprintf("01900000-0000-7000-8000-00000000d1%02d", i), did, fmt.Sprintf("k%d", i))
		c, err := stores.ClaimDeliveriesSuppressing(ctx, pool, []string{did}, time.Now(), stores.AddressFields{}, by)
		if err != nil || len(c) != 1 {
			t.Fatalf("claim %s as %q: %d rows, %v", did, by, len(c), err)
		}
	}
	rescue := func(forget ...string) stores.Rescue {
		t.Helper()
		var r stores.Rescue
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			r, err = stores.RescueDeadClients(ctx, tx, forget, time.Now())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	sending := func() int {
		return countRows(t, pool, `SELECT count(*) FROM notify_deliveries WHERE status = 'sending'`)
	}
	if r := rescue(); len(r.Freed) != 0 || len(r.Gone) != 1 || sending() != 5 {
		t.Fatalf("a rescue forgetting nobody freed %v (gone %v), %d still sending; want nothing freed", r.Freed, r.Gone, sending())
	}
	// client-live is named but alive: its lock protects its claims.
	r := rescue("client-gone", "client-live", "client-unregistered")
	if len(r.Freed) != 2 || sending() != 3 {
		t.Fatalf("freed %v, %d still sending; want the 2 claims of client-gone freed", r.Freed, sending())
	}
	if n := countRows(t, pool, `SELECT count(*) FROM notify_deliveries WHERE status = 'failed' AND claimed_at IS NULL
		AND next_attempt_at <= now() AND last_error LIKE 'claim released: %client-gone%'`); n != 2 {
		t.Fatalf("%d freed rows are failed, due and say why; want 2", n)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM notify_river_clients WHERE client_id = 'client-gone'`); n != 0 {
		t.Fatalf("the gone client is still registered")
	}
	// Its own process takes back client-live's claims.
	ids, err := stores.FreeClaims(ctx, pool, "client-live", time.Now())
	if err != nil || len(ids) != 1 || ids[0] != "01900000-0000-7000-8000-00000000d203" {
		t.Fatalf("FreeClaims = %v, %v; want the one claim of client-live", ids, err)
	}
	if sending() != 2 {
		t.Fatalf("%d still sending, want the unregistered and the anonymous claims", sending())
	}
}
