package stores_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

// A database where notify_send accepted send_at => '-infinity' and
// 'infinity' (a fan-out job River's fetch and rescuer cannot read, a
// notification the API cannot show) is repaired by the migration: both are
// moved to now, and no infinite send_at can be written again.
func TestMigrationMovesInfiniteSchedulesToNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const schema = "poisoned"
	pool := schemaPool(t, schema)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	if err := stores.MigrateTo(ctx, pool, 31); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`INSERT INTO notify_notifiers (name, category, max_recipients) VALUES ('n', 'c', 10)`,
		`SELECT notify_send('n', 'past', '["u1"]', send_at => '-infinity')`,
		`SELECT notify_send('n', 'future', '["u1"]', send_at => 'infinity')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	const infinite = `SELECT (SELECT count(*) FROM river_job WHERE NOT isfinite(scheduled_at))
	                        + (SELECT count(*) FROM notify_notifications WHERE NOT isfinite(send_at))`
	if n := servertest.Count(t, pool, infinite); n != 4 {
		t.Fatalf("before the migration: %d infinite times, want 4 (the setup is wrong)", n)
	}
	if err := stores.Migrate(ctx, pool, schema, nil); err != nil {
		t.Fatal(err)
	}
	if n := servertest.Count(t, pool, infinite); n != 0 {
		t.Fatalf("after the migration: %d infinite times", n)
	}
	if _, err := pool.Exec(ctx, `UPDATE notify_notifications SET send_at = 'infinity'`); err == nil {
		t.Fatal("an infinite send_at can still be written")
	}
}
