package stream_test

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/pgcluster"
	"github.com/notifyd/notifyd/internal/stream"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/stores"
)

// A failover is the same log going on: a cursor from the primary resumes on
// the standby promoted in its place (pg_basebackup -R, the same system
// identifier), with neither reset nor gap, and a stream open through the
// failover goes on with the same epoch. A cursor of this log is still
// refused, with a reset, by a server of another system.
func TestCursorSurvivesFailoverToPromotedStandby(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Dir: postgresTempDir(t), Tuned: true, Replication: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	const dbName = "notifyd"
	if err := primary.EnsureDatabase(ctx, dbName); err != nil {
		t.Fatal(err)
	}
	direct, err := pgxpool.New(ctx, primary.URL(dbName))
	if err != nil {
		t.Fatal(err)
	}
	if err := stores.Migrate(ctx, direct, "", nil); err != nil {
		t.Fatal(err)
	}
	direct.Close()
	standby, err := pgcluster.StartStandby(ctx, primary, pgcluster.Options{Dir: postgresTempDir(t), Tuned: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })

	// The daemon's pool names both servers and takes the one that writes.
	hosts := func(raw string) (dir, port string) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u.Query().Get("host"), u.Query().Get("port")
	}
	d1, p1 := hosts(primary.URL(dbName))
	d2, p2 := hosts(standby.URL(dbName))
	multi := "postgres://postgres@/" + dbName + "?" + url.Values{"host": {d1 + "," + d2}, "port": {p1 + "," + p2},
		"sslmode": {"disable"}, "target_session_attrs": {"read-write"}}.Encode()
	pool, err := pgxpool.New(ctx, multi)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	hub := newHub(t, pool)
	srv := serve(t, hub, stream.HandlerOptions{}, nil)
	run(t, hub)
	const me = "failover-me"

	running := connect(t, srv, me, "")
	running.expectCounts(t, 0, 0)
	before := create(t, pool, me, me)
	running.expectCreated(t, before[0])
	running.expectCreated(t, before[1])
	at := running.expectCounts(t, 2, 2)
	epoch := at.epoch(t)
	missed := create(t, pool, me)[0] // after the cursor, before the failover
	running.expectCreated(t, missed)
	running.expectCounts(t, 3, 3)

	// The standby has everything the primary committed (a clean stop sends
	// the standby the rest of the WAL first); then it is promoted.
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted, err := pgxpool.New(ctx, standby.URL(dbName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(promoted.Close)
	if e, err := stores.ChangeLogEpoch(ctx, promoted); err != nil || e != epoch {
		t.Fatalf("the promoted standby's epoch %s (%v), want the primary's %s", e, err, epoch)
	}
	after := create(t, promoted, me)[0]

	// The stream open through the failover goes on, same epoch.
	if ev := running.expectCreated(t, after); ev.epoch(t) != epoch {
		t.Fatalf("live event id %s after the failover, want epoch %s", ev.id, epoch)
	}
	running.expectCounts(t, 4, 4)

	// The cursor from before the failover replays what came after it, on
	// either side of the failover, without a reset.
	resumed := connect(t, srv, me, at.id)
	if ev := resumed.next(t); ev.name != "inbox.created" || ev.json(t)["id"] != missed {
		t.Fatalf("the pre-failover cursor on the promoted standby: event %s %s (id %s), want the missed item %s",
			ev.name, ev.data, ev.id, missed)
	}
	if ev := resumed.expectCreated(t, after); ev.epoch(t) != epoch {
		t.Fatalf("replayed id %s, want epoch %s", ev.id, epoch)
	}
	resumed.expectCounts(t, 4, 4)

	// Another system (a server initialised on its own) refuses the cursor.
	other := pgtest.NewDB(t)
	otherHub := newHub(t, other)
	otherSrv := serve(t, otherHub, stream.HandlerOptions{}, nil)
	run(t, otherHub)
	elsewhere := connect(t, otherSrv, me, at.id)
	if ev := elsewhere.next(t); ev.name != "reset" || ev.epoch(t) == epoch {
		t.Fatalf("the cursor on another system: event %s (id %s), want reset with another epoch", ev.name, ev.id)
	}
}

// postgresTempDir is a t.TempDir() the postgres account can reach when the
// test runs as root (the cluster's programs run as postgres).
func postgresTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}
