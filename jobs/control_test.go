package jobs_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

var forgers atomic.Int64

// forgerSetup is setup, plus a pool on the same database as a new LOGIN
// role whose only right is membership in notifyd_app (what an
// application's role has; NOTIFY needs no grant at all), and the prefix of
// River's channels there ("<schema>.").
func forgerSetup(t *testing.T) (b *bundle, forger *pgxpool.Pool, prefix string) {
	t.Helper()
	ctx := context.Background()
	pool, dbURL := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, "")
	client := servertest.Client(t, pool, cfg)
	deps := &jobs.Deps{Pool: pool, Config: cfg, Logger: servertest.Logger()}
	b = &bundle{pool: pool, cfg: cfg, client: client, deps: servertest.Wire(deps, servertest.Channels(t, cfg))}

	role := fmt.Sprintf("forger_%d_%d", os.Getpid(), forgers.Add(1))
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE ROLE "+ident+" LOGIN PASSWORD 'forger'; GRANT "+stores.AppRole+" TO "+ident); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP OWNED BY "+ident+"; DROP ROLE "+ident); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "forger")
	if forger, err = pgxpool.New(ctx, u.String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(forger.Close)
	if err := pool.QueryRow(ctx, "SELECT current_schema() || '.'").Scan(&prefix); err != nil {
		t.Fatal(err)
	}
	return b, forger, prefix
}

// notifyAs sends each payload on channel from pool's role.
func notifyAs(t *testing.T, pool *pgxpool.Pool, channel string, payloads ...string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, channel, payloads); err != nil {
		t.Fatalf("notify %s: %v", channel, err)
	}
}

// holdFanout makes the fan-out of notification id stop after its first
// committed step until release is called (or 30 s pass), and returns a
// channel closed when it is held there.
func holdFanout(b *bundle, id *string) (held <-chan struct{}, release func()) {
	h, r := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	b.deps.AfterFanoutStep = func(nid string) error {
		if nid != *id {
			return nil
		}
		once.Do(func() {
			close(h)
			select {
			case <-r:
			case <-time.After(30 * time.Second):
			}
		})
		return nil
	}
	return h, func() { releaseOnce.Do(func() { close(r) }) }
}

func runningFanoutJob(t *testing.T, b *bundle) int64 {
	t.Helper()
	var id int64
	if err := b.pool.QueryRow(context.Background(),
		`SELECT id FROM river_job WHERE kind = 'notify.fanout' AND state = 'running'`).Scan(&id); err != nil {
		t.Fatalf("the running fan-out job: %v", err)
	}
	return id
}

// The application's role can NOTIFY River's channels, but the daemon takes
// no control from them: while it spams "pause every queue" (and a leader
// resignation request, and junk and real-looking insert wakes), every
// notification sent is fanned out promptly. (River would take the pause
// from its control channel and keep the queues paused until its fallback
// poll, a minute later.)
func TestForgedPauseDoesNotStallWork(t *testing.T) {
	t.Parallel()
	b, forger, prefix := forgerSetup(t)
	forge := func() {
		notifyAs(t, forger, prefix+"river_control", `{"action":"pause","queue":"*"}`,
			`{"action":"pause","queue":"fanout"}`, `{"action":"pause","queue":"send"}`)
		notifyAs(t, forger, prefix+"river_leadership", `{"action":"request_resign"}`)
		notifyAs(t, forger, prefix+"river_insert", `{"queue":"fanout"}`, `not json`, `{"queue":"nope"}`)
	}
	forge()
	servertest.StartWorkers(t, b.deps)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond): // a pace, not a synchronisation
				forge()
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	forge()
	ctx := context.Background()
	for i := range 5 {
		res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: fmt.Sprintf("forged-pause-%d", i),
			Recipients: recipients(3, "author"), Params: commentParams})
		if err != nil {
			t.Fatal(err)
		}
		servertest.Eventually(t, 5*time.Second, "a notification fanned out while pauses are forged", func() bool {
			return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'fanned_out'`, res.ID) == 1
		})
	}
}

// A cancel of the running fan-out forged on River's control channel
// changes nothing: the fan-out runs to its end and writes every item.
// (River would cancel the job's context, and the notification would stay
// pending with part of its items, for good.)
func TestForgedCancelDoesNotLeaveAFanoutPending(t *testing.T) {
	t.Parallel()
	b, forger, prefix := forgerSetup(t)
	b.cfg.Queues.FanoutChunk = 50
	var id string
	held, release := holdFanout(b, &id)
	defer release()
	ctx := context.Background()
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "forged-cancel",
		Recipients: recipients(1000, "author"), Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	id = res.ID
	servertest.StartWorkers(t, b.deps)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the fan-out did not start")
	}
	job := runningFanoutJob(t, b)
	for range 3 {
		notifyAs(t, forger, prefix+"river_control", fmt.Sprintf(`{"action":"cancel","queue":"fanout","job_id":%d}`, job))
	}
	release()
	waitStatus(t, b, res.ID, "fanned_out")
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`); n != 1000 {
		t.Fatalf("inbox items = %d, want 1000", n)
	}
}

// An operator's pause and resume through the daemon's River client still
// reach its producers at once (River's queue events say so), and the work
// paused meanwhile then runs.
func TestOperatorPauseAndResumeStillWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client := servertest.StartWorkers(t, b.deps)
	events, cancel := client.Subscribe(river.EventKindQueuePaused, river.EventKindQueueResumed)
	defer cancel()
	ctx := context.Background()
	wait := func(kind river.EventKind) {
		t.Helper()
		for {
			select {
			case e := <-events:
				if e.Kind == kind && e.Queue != nil && e.Queue.Name == jobs.QueueFanout {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s event for the fan-out queue", kind)
			}
		}
	}
	if err := client.QueuePause(ctx, jobs.QueueFanout, nil); err != nil {
		t.Fatal(err)
	}
	wait(river.EventKindQueuePaused)
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "operator-pause",
		Recipients: recipients(3, "author"), Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.QueueResume(ctx, jobs.QueueFanout, nil); err != nil {
		t.Fatal(err)
	}
	wait(river.EventKindQueueResumed)
	waitStatus(t, b, res.ID, "fanned_out")
}

// A fan-out job cancelled through River's own API (as River UI does) ends
// cancelled; the retry sweep then resumes the notification's fan-out, which
// finishes with every item written once.
func TestRetrySweepResumesAFanoutCancelledThroughRiver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Queues.FanoutChunk = 50
	var id string
	held, release := holdFanout(b, &id)
	defer release()
	ctx := context.Background()
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "river-cancel",
		Recipients: recipients(500, "author"), Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	id = res.ID
	client := servertest.StartWorkers(t, b.deps)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the fan-out did not start")
	}
	job := runningFanoutJob(t, b)
	if _, err := client.JobCancel(ctx, job); err != nil {
		t.Fatal(err)
	}
	release()
	servertest.Eventually(t, 10*time.Second, "the fan-out job cancelled", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'cancelled'`, job) == 1
	})
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'pending'`, res.ID); n != 1 {
		t.Fatal("the cancelled fan-out's notification is not pending: nothing left to resume")
	}
	if _, err := client.Insert(ctx, jobs.RetrySweepArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, b, res.ID, "fanned_out")
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`); n != 500 {
		t.Fatalf("inbox items = %d, want 500", n)
	}
}

// A pending notification whose fan-out job was deleted (River UI can) is
// found by the retry sweep's scan and fanned out; so is a scheduled one,
// whose new job waits for its send_at.
func TestRetrySweepResumesAFanoutWhoseJobWasDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "deleted-job",
		Recipients: recipients(20, "author"), Params: commentParams})
	if err != nil {
		t.Fatal(err)
	}
	sendAt := time.Now().Add(time.Hour)
	later, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "deleted-scheduled-job",
		Recipients: recipients(20, "author"), Params: commentParams, SendAt: sendAt})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'notify.fanout';
		UPDATE notify_notifications SET created_at = now() - interval '5 minutes'`); err != nil {
		t.Fatal(err)
	}
	client := servertest.StartWorkers(t, b.deps)
	if _, err := client.Insert(ctx, jobs.RetrySweepArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, b, res.ID, "fanned_out")
	servertest.Eventually(t, 10*time.Second, "the scheduled notification's fan-out job back, at its send_at", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.fanout' AND state = 'scheduled'
			AND args->>'notification_id' = $1 AND scheduled_at = $2`, later.ID, sendAt) == 1
	})
}

// An idle fan-out queue starts within moments of a send's commit, from the
// Go API and from the SQL API alike, though it polls only every 30 s here:
// the send wakes it.
func TestAnIdleFanoutQueueWakesAtCommit(t *testing.T) {
	t.Parallel()
	b, app, _ := forgerSetup(t)
	b.cfg.Queues.FetchPollInterval = config.Duration(30 * time.Second)
	servertest.StartWorkers(t, b.deps)
	ctx := context.Background()
	for i := range 3 {
		res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: fmt.Sprintf("wake-go-%d", i),
			Recipients: recipients(2, "author"), Params: commentParams})
		if err != nil {
			t.Fatal(err)
		}
		servertest.Eventually(t, 3*time.Second, "a SendTx woke the fan-out queue", func() bool {
			return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'fanned_out'`, res.ID) == 1
		})
		var id string
		if err := app.QueryRow(ctx, `SELECT id FROM notify_send('comment.created', $1, '["user-00001"]', '{"post_title": "Hi", "author_name": "Ada"}')`,
			fmt.Sprintf("wake-sql-%d", i)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		servertest.Eventually(t, 3*time.Second, "a notify_send woke the fan-out queue", func() bool {
			return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE id = $1 AND status = 'fanned_out'`, id) == 1
		})
	}
}
