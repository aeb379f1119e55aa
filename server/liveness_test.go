package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

// A running daemon registers its River client and holds its liveness lock,
// so the retry sweep of any replica leaves its jobs alone; a clean stop
// unregisters it.
func TestRunHoldsTheRiverClientsLiveness(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, "")
	cfg.Database.URL = url
	d, stop := startDaemon(t, cfg)
	id := d.River().ID()
	servertest.Eventually(t, 10*time.Second, "the River client registered", func() bool {
		return servertest.Count(t, pool, `SELECT count(*) FROM notify_river_clients WHERE client_id = $1`, id) == 1
	})
	var r stores.Rescue
	if err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) (err error) {
		r, err = stores.RescueDeadClients(context.Background(), tx, []string{id}, time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(r.Gone) != 0 || len(r.Freed) != 0 {
		t.Fatalf("the sweep took the running daemon's client for gone")
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := servertest.Count(t, pool, `SELECT count(*) FROM notify_river_clients`); n != 0 {
		t.Fatalf("%d River clients registered after a clean stop", n)
	}
}
