package server_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

// The migration's fan-out job (what a database migrated but not yet
// published holds) is the Go declaration of the job.
func TestMigrationDeclaresTheFanoutJobAsGoDoes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	got, err := stores.ReadCatalog(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	c, err := server.CatalogOf(servertest.Config(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	want := c.Fanout
	if got.Fanout != want {
		t.Fatalf("migration's fan-out job %+v, Go declares %+v (jobs.FanoutArgs)", got.Fanout, want)
	}
	if len(got.Notifiers) != 0 {
		t.Fatalf("a fresh database has notifiers %v", got.Notifiers)
	}
}

// The fan-out job that SendTx (and notify_send) insert by hand is the row
// River's own InsertTx writes for jobs.FanoutArgs: kind, queue, attempts,
// priority, state, tags, metadata and args.
func TestHandWrittenFanoutJobIsRiversInsert(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	cfg := servertest.Config(t, "")
	if err := server.PublishCatalog(ctx, pool, cfg, nil); err != nil {
		t.Fatal(err)
	}
	client, err := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// With a topic: a small notification (inline recipients only) gets no
	// job (the fan-out claimers take it).
	res, err := client.Send(ctx, notifyd.Notification{Notifier: "team.joined", Key: "k", Recipients: []notifyd.Recipient{{ID: "u1"}},
		Topics: []string{"team-1"}})
	if err != nil {
		t.Fatal(err)
	}
	var riverJobID int64
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		job, err := rc.InsertTx(ctx, tx, jobs.FanoutArgs{NotificationID: res.ID}, nil)
		if err == nil {
			riverJobID = job.Job.ID
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	const row = `SELECT to_jsonb(j) - 'id' - 'created_at' - 'scheduled_at' FROM river_job j WHERE id = $1`
	var ours, rivers string
	if err := pool.QueryRow(ctx, `SELECT to_jsonb(j) - 'id' - 'created_at' - 'scheduled_at' FROM river_job j
		WHERE id <> $1`, riverJobID).Scan(&ours); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, row, riverJobID).Scan(&rivers); err != nil {
		t.Fatal(err)
	}
	if ours != rivers {
		t.Fatalf("the hand-written fan-out job differs from River's InsertTx:\nours   %s\nRiver's %s", ours, rivers)
	}
}

// Publish adds and updates but never removes; Sync also removes what the
// config no longer declares; notify_send follows the catalog at once.
func TestPublishAndSync(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	send := func(notifier string) error {
		_, err := pool.Exec(ctx, `SELECT notify_send($1, 'k-' || $1, '["u1"]', '{"post_title": "p", "author_name": "a"}')`,
			notifier)
		return err
	}
	unknown := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "22023" && pgErr.ColumnName == "notifier"
	}
	if err := send("comment.created"); !unknown(err) {
		t.Fatalf("notify_send before any publish = %v, want an unknown notifier", err)
	}
	old := servertest.Config(t, "")
	if err := server.PublishCatalog(ctx, pool, old, nil); err != nil {
		t.Fatal(err)
	}
	if err := send("comment.created"); err != nil {
		t.Fatal(err)
	}
	// The next config drops team.joined, adds deploy.done and changes
	// comment.created's limit.
	next := servertest.Config(t, "")
	delete(next.Notifiers, "team.joined")
	added := *next.Notifiers["comment.created"]
	added.Name, added.Category, added.MaxRecipients = "deploy.done", "ops", 7
	next.Notifiers["deploy.done"] = &added
	changed := *next.Notifiers["comment.created"]
	changed.MaxRecipients = 1
	next.Notifiers["comment.created"] = &changed

	names := func() []stores.CatalogNotifier {
		c, err := stores.ReadCatalog(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.Notifiers {
			c.Notifiers[i].Params = stores.ParamsCheck{} // compared by the params check's own tests
		}
		return c.Notifiers
	}
	if err := server.PublishCatalog(ctx, pool, next, nil); err != nil {
		t.Fatal(err)
	}
	want := []stores.CatalogNotifier{cn("comment.created", "comments", 1), cn("deploy.done", "ops", 7), cn("team.joined", "teams", 3)}
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("after Publish: %v, want %v (nothing removed)", got, want)
	}
	var pgErr *pgconn.PgError
	if err := send("comment.created"); err != nil {
		t.Fatal(err) // a duplicate of the first: one inline recipient is within 1
	}
	if _, err := pool.Exec(ctx, `SELECT notify_send('comment.created', 'two', '["u1", "u2"]', '{"post_title": "p", "author_name": "a"}')`); !errors.As(err, &pgErr) ||
		pgErr.Code != "22023" || pgErr.ColumnName != "recipients" {
		t.Fatalf("two inline recipients for a limit of 1: %v", err)
	}

	if err := server.SyncCatalog(ctx, pool, next, nil); err != nil {
		t.Fatal(err)
	}
	want = []stores.CatalogNotifier{cn("comment.created", "comments", 1), cn("deploy.done", "ops", 7)}
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("after Sync: %v, want %v", got, want)
	}
	if err := send("team.joined"); !unknown(err) {
		t.Fatalf("notify_send of a removed notifier = %v, want an unknown notifier", err)
	}
	if err := send("deploy.done"); err != nil {
		t.Fatal(err)
	}
}

func cn(name, category string, maxRecipients int) stores.CatalogNotifier {
	return stores.CatalogNotifier{Name: name, Category: category, MaxRecipients: maxRecipients}
}
