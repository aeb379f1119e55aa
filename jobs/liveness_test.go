package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/server/servertest"
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
	servertest.StartWorkers(t, b.deps)
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
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`); n != 299 {
		t.Fatalf("inbox items = %d, want 299", n)
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
	client := servertest.StartWorkers(t, b.deps)
	go func() {
		defer close(done)
		b.deps.RunLiveness(runCtx, client)
	}()
	servertest.Eventually(t, 10*time.Second, "the killed client's job rescued", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'test.rescue' AND state = 'available'`) == 1
	})
	servertest.Eventually(t, 10*time.Second, "the running client registered", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_river_clients WHERE client_id = $1`, client.ID()) == 1
	})
	// Forgotten once seen gone for GoneAfter (4 s; its claims, none here,
	// taken back then).
	servertest.Eventually(t, 15*time.Second, "the killed client forgotten", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_river_clients WHERE client_id = 'killed-client'`) == 0
	})
	stop()
	<-done
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_river_clients`); n != 0 {
		t.Fatalf("%d clients registered after the liveness ended, want none", n)
	}
}

// A process that died holding claims (its liveness connection closed with
// it) frees them within seconds, whatever retry.lease (5 minutes here): a
// live replica re-drives every one and each is emailed once. A claim held
// by a process that may be alive (its lock held) keeps its lease.
func TestAGoneProcessesClaimsAreSentWithinSeconds(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "retry: {lease: 5m}\n")
	ctx := context.Background()
	const n = 40
	var to []string
	for i := range n {
		r := fmt.Sprintf("u%02d", i)
		b.profile(t, r, r+"@example.test")
		to = append(to, r)
	}
	b.profile(t, "alive", "alive@example.test")
	gone := b.send(t, "inv-gone", to...)
	alive := b.send(t, "inv-alive", "alive")
	// The fan-outs are done (they write nothing themselves), their email
	// rows written, and claimed by two processes as their send jobs would:
	// one that is about to die and one that lives on.
	if _, err := b.pool.Exec(ctx, `UPDATE notify_notifications SET status = 'fanned_out' WHERE id = ANY($1::uuid[])`,
		[]string{gone, alive}); err != nil {
		t.Fatal(err)
	}
	rows, err := b.pool.Query(ctx, `INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status)
		SELECT gen_random_uuid(), n.id, n.notifier, n.key, r, 'email', 'immediate', 'pending'
		FROM notify_notifications n, unnest($2::text[]) r WHERE n.id = $1
		UNION ALL
		SELECT gen_random_uuid(), $3, 'invoice.paid', 'inv-alive', 'alive', 'email', 'immediate', 'pending'
		RETURNING id::text, recipient`, gone, to, alive)
	if err != nil {
		t.Fatal(err)
	}
	claimant := map[string]string{}
	for rows.Next() {
		var id, r string
		if err := rows.Scan(&id, &r); err != nil {
			t.Fatal(err)
		}
		claimant[id] = "dead-replica"
		if r == "alive" {
			claimant[id] = "live-replica"
		}
	}
	if rows.Err() != nil || len(claimant) != n+1 {
		t.Fatalf("wrote %d email rows (%v), want %d", len(claimant), rows.Err(), n+1)
	}
	hold := func(id string) *pgx.Conn {
		conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig)
		if err != nil {
			t.Fatal(err)
		}
		if err := stores.HoldLiveness(ctx, conn, id); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	dead, live := hold("dead-replica"), hold("live-replica")
	defer live.Close(ctx)
	for id, by := range claimant {
		if c, err := stores.ClaimDeliveriesSuppressing(ctx, b.pool, []string{id}, time.Now(), stores.AddressFields{}, by); err != nil || len(c) != 1 {
			t.Fatalf("claim %s as %s: %d, %v", id, by, len(c), err)
		}
	}
	dead.Close(ctx) // the process dies with its claims

	// Another replica runs, with its liveness.
	client := servertest.StartWorkers(t, b.deps)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.deps.RunLiveness(runCtx, client)
	}()
	defer func() {
		stop()
		<-done
	}()
	start := time.Now()
	servertest.Eventually(t, 15*time.Second, "the dead replica's claims all sent", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND status = 'sent'`, gone) == n
	})
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the dead replica's claims took %s to send, want within 10 s", took)
	}
	if got := b.smtp.Count(); got != n {
		t.Fatalf("received %d messages, want %d (each freed claim once)", got, n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1
		AND last_error LIKE 'claim released: %dead-replica%'`, gone); n == 0 {
		t.Fatalf("no sent row says its claim was released")
	}
	if d := b.delivery(t, alive, "alive"); d.status != "sending" {
		t.Fatalf("the live replica's claim is %s, want still sending (its lease protects it)", d.status)
	}
}
