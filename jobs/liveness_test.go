package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/internal/testing/notifydtest"
	"github.com/notifyd/notifyd/stores"
)

// goneClient registers River client id as a process would, and ends the
// session holding its liveness lock, as that process's death would.
func goneClient(t *testing.T, b *bundle, id string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := stores.HoldLiveness(ctx, conn, id); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
}

// A fan-out whose River job was running in a process that died (its
// liveness lock released with its connection) is rescued by the next retry
// sweep and finishes on a live worker, instead of waiting out River's
// RescueStuckJobsAfter (10 minutes by default).
func TestRetrySweepRescuesTheJobsOfAGoneProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "c-gone", Actor: "user-00003",
		Recipients: recipients(300, "author"), Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	goneClient(t, b, "gone-client") // the process that took the job
	if _, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(),
		attempted_by = ARRAY['gone-client'] WHERE kind = 'notify.fanout'`); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if b.deps.Metrics, err = metrics.New(reg, nil); err != nil {
		t.Fatal(err)
	}
	notifydtest.StartWorkers(t, b.deps)
	if _, err := b.deps.RetrySweep(ctx); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, b, res.ID, "fanned_out")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	rescued := -1.0
	for _, f := range families {
		if f.GetName() == "notifyd_rescued_jobs_total" {
			rescued = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if rescued != 1 {
		t.Fatalf("notifyd_rescued_jobs_total = %v, want 1", rescued)
	}
	if n := notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`); n != 299 {
		t.Fatalf("inbox items = %d, want 299", n)
	}
	if n := notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_river_clients`); n != 0 {
		t.Fatalf("%d River clients still registered, want the gone one forgotten", n)
	}
}

// A process's liveness, once it holds its lock, rescues the jobs of clients
// already gone (a restart takes its killed predecessor's jobs back before it
// or any replica is the leader that runs the sweep), and unregisters its
// client when it ends.
func TestLivenessRescuesItsPredecessorsJobsAndUnregisters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	goneClient(t, b, "killed-client")
	if _, err := b.pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at,
		tags, metadata, attempt, attempted_at, attempted_by)
		VALUES ('{}', 'test.rescue', 25, 1, 'default', 'running', now(), '{}', '{}', 1, now(), ARRAY['killed-client'])`); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.deps.RunLiveness(runCtx, "restarted-client")
	}()
	notifydtest.Eventually(t, 10*time.Second, "the killed client's job rescued", func() bool {
		return notifydtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'test.rescue' AND state = 'available'`) == 1
	})
	if n := notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_river_clients WHERE client_id = 'restarted-client'`); n != 1 {
		t.Fatalf("the running client is not registered")
	}
	stop()
	<-done
	if n := notifydtest.Count(t, b.pool, `SELECT count(*) FROM notify_river_clients`); n != 0 {
		t.Fatalf("%d clients registered after the liveness ended, want none", n)
	}
}
