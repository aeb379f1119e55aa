package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// digestConfig is BaseConfig plus a notifier whose email default is digest,
// an email channel on the test SMTP server, and extra (a digest: section at
// least). The digest sweep's own cron is pushed out of the way (once a year):
// tests run sweeps themselves, at the moments they choose.
func digestConfig(port int, extra string) string {
	return servertest.BaseConfig + fmt.Sprintf(`
  report.ready:
    category: reports
    params: {type: object, properties: {n: {type: string}}}
    channels:
      in_app: {title: "Report {{.n}}", url: "/reports/{{.n}}"}
      email:
        default: digest
        subject: "Report {{.n}}"
        text: "Report {{.n}} is ready."
channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: 127.0.0.1, port: %d, tls: none}
    timeout: 2s
%s`, port, extra)
}

// soonSchedule is a daily digest schedule whose next instant is about 12 hours
// from now (UTC), so nothing created during a test falls due on its own and a
// clock moved 13 hours ahead sees exactly one instant.
func soonSchedule() string {
	at := time.Now().UTC().Add(12 * time.Hour)
	return fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour())
}

type digestBundle struct {
	*emailBundle
	offset atomic.Int64 // added to the real time by deps.Clock
}

// ahead moves the injected clock d ahead of the real time.
func (b *digestBundle) ahead(d time.Duration) { b.offset.Store(int64(d)) }

func setupDigest(t *testing.T, extra string) *digestBundle {
	t.Helper()
	b := &digestBundle{emailBundle: &emailBundle{bundle: setup(t), smtp: smtpcapture.Start(t)}}
	b.cfg = servertest.Config(t, digestConfig(b.smtp.Port(), extra))
	b.deps.Config = b.cfg
	servertest.Wire(b.deps, servertest.Channels(t, b.cfg))
	b.deps.Backoff = func(int) time.Duration { return 100 * time.Millisecond }
	b.deps.Clock = func() time.Time { return time.Now().Add(time.Duration(b.offset.Load())) }
	b.client = servertest.Client(t, b.pool, b.cfg)
	return b
}

func (b *digestBundle) report(t *testing.T, key string, to ...string) {
	t.Helper()
	n := notifyd.Notification{Notifier: "report.ready", Key: key, Params: map[string]any{"n": key}}
	for _, r := range to {
		n.Recipients = append(n.Recipients, notifyd.Recipient{ID: r})
	}
	if _, err := b.client.Send(context.Background(), n); err != nil {
		t.Error(err) // also called from goroutines
	}
}

func (b *digestBundle) waitRows(t *testing.T, status string, n int) {
	t.Helper()
	servertest.Eventually(t, 60*time.Second, fmt.Sprintf("%d digest rows %s", n, status), func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE channel = 'email' AND status = $1`, status) == n
	})
}

func (b *digestBundle) sweep(t *testing.T, client *river.Client[pgx.Tx]) int {
	t.Helper()
	n, err := b.deps.DigestSweep(context.Background(), client)
	if err != nil {
		t.Fatalf("digest sweep: %v", err)
	}
	return n
}

// rowStatus reads the email row of (key, recipient).
func (b *digestBundle) rowStatus(t *testing.T, key, recipient string) (status, lastError string, attempts int) {
	t.Helper()
	err := b.pool.QueryRow(context.Background(), `SELECT status, coalesce(last_error, ''), attempts FROM notify_deliveries
		WHERE key = $1 AND recipient = $2 AND channel = 'email'`, key, recipient).Scan(&status, &lastError, &attempts)
	if err != nil {
		t.Fatalf("row %s/%s: %v", key, recipient, err)
	}
	return status, lastError, attempts
}

// onlyMessage waits for the first message and for every digest job to have
// run (digestsSettled), and fails unless exactly one was received.
func (b *digestBundle) onlyMessage(t *testing.T) smtpcapture.Message {
	t.Helper()
	if msgs := b.smtp.WaitFor(1, 20*time.Second); len(msgs) == 0 {
		t.Fatal("no digest email received after 20s")
	}
	b.digestsSettled(t)
	if got := b.smtp.Count(); got != 1 {
		t.Fatalf("received %d digest emails, want exactly 1", got)
	}
	return b.smtp.Messages()[0]
}

// digestsSettled waits until no notify.digest job of the test's database is
// left to run. Nothing sends a digest but such a job (a retry, the sweep's
// re-drive and the sweep's first send are all one, and the tests run the
// sweep themselves), so what was received and written by then is final: a
// resend the code should not have made has been waited for, not raced.
func (b *digestBundle) digestsSettled(t *testing.T) {
	t.Helper()
	toRun := func() []string {
		rows, err := b.pool.Query(context.Background(), `SELECT id || ' ' || state || ' ' || scheduled_at || ' ' || args::text FROM river_job
			WHERE kind = 'notify.digest' AND state NOT IN ('completed', 'cancelled', 'discarded') ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	if !servertest.Wait(20*time.Second, func() bool { return len(toRun()) == 0 }) {
		t.Fatalf("after 20s, digest jobs are still to run: %v", toRun())
	}
}

func (b *digestBundle) digestIDs(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT DISTINCT digest_id::text FROM notify_deliveries WHERE digest_id IS NOT NULL ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Novu's digests duplicated under concurrent triggers. Here 1,000 notifications
// reach one recipient from 8 goroutines, then two sweeps run at the same
// moment, twice: one job, one email, every row in it.
func TestDigestConcurrentSendsAndSweepsSendOneDigest(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\", max_items: 50}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	client := servertest.StartWorkers(t, b.deps)

	const total, senders = 1000, 8
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := g; i < total; i += senders {
				b.report(t, fmt.Sprintf("r-%04d", i), "u1")
			}
		})
	}
	wg.Wait()
	b.waitRows(t, "digest_pending", total)
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_notifications WHERE status = 'fanned_out'`); n != total {
		t.Fatalf("%d notifications fanned out, want %d", n, total)
	}
	if n := b.sweep(t, client); n != 0 {
		t.Fatalf("a sweep before the schedule instant enqueued %d digests", n)
	}

	b.ahead(13 * time.Hour)
	var enqueued atomic.Int64
	for range 2 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				<-start
				n, err := b.deps.DigestSweep(context.Background(), client)
				if err != nil {
					t.Error(err)
				}
				enqueued.Add(int64(n))
			})
		}
		close(start)
		wg.Wait()
	}
	if n := enqueued.Load(); n != 1 {
		t.Fatalf("4 sweeps enqueued %d digests, want 1", n)
	}

	b.waitRows(t, "digest_sent", total)
	m := b.onlyMessage(t)
	ids := b.digestIDs(t)
	if len(ids) != 1 {
		t.Fatalf("rows carry %d digest ids, want 1", len(ids))
	}
	if m.MessageID != "<"+ids[0]+"@acme.test>" {
		t.Fatalf("Message-ID = %q, want the digest id %s", m.MessageID, ids[0])
	}
	if m.Subject != "Your 1000 new notifications" || m.HeaderValue("X-Notifyd-Digest") != "1000" {
		t.Fatalf("subject %q, X-Notifyd-Digest %q: want a count of 1000", m.Subject, m.HeaderValue("X-Notifyd-Digest"))
	}
	// The first 50 items, oldest first, then the rest counted.
	rows, err := b.pool.Query(context.Background(), `SELECT key FROM notify_deliveries WHERE recipient = 'u1' ORDER BY created_at, id LIMIT 50`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&want, "- Report %s\n", k)
	}
	want.WriteString("and 950 more")
	if got := strings.TrimSpace(m.Text); got != want.String() {
		t.Fatalf("digest text:\n%s\nwant:\n%s", got, want.String())
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.digest'`); n != 1 {
		t.Fatalf("%d notify.digest jobs, want 1", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE status = 'digest_sent' AND attempts = 1 AND settled_at IS NOT NULL AND claimed_at IS NULL`); n != total {
		t.Fatalf("%d rows settled digest_sent after one attempt, want %d", n, total)
	}
}

// Uniqueness keeps the jobs few; the claim is what keeps digests apart. Four
// digest jobs for one recipient inserted at once (as if the unique key had
// failed) send one email; eight claims racing for one recipient's rows leave
// them all in one digest.
func TestDigestClaimRaceSendsOneDigest(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	b.profile(t, "u2", "u2@example.test")
	client := servertest.StartWorkers(t, b.deps)
	for i := range 5 {
		b.report(t, fmt.Sprintf("k%d", i), "u1", "u2")
	}
	b.waitRows(t, "digest_pending", 10)

	start := make(chan struct{})
	var wg sync.WaitGroup
	var claimed atomic.Int64
	for range 8 {
		wg.Go(func() {
			<-start
			c, err := stores.ClaimDigest(context.Background(), b.pool, stores.DigestClaimRequest{Recipient: "u2",
				DigestID: uuidv7.String(), DueAt: time.Now().Add(time.Hour), Now: time.Now(), MaxItems: 50})
			if err != nil {
				t.Error(err)
				return
			}
			claimed.Add(int64(c.Count))
		})
	}
	close(start)
	wg.Wait()
	if n := servertest.Count(t, b.pool, `SELECT count(DISTINCT digest_id) FROM notify_deliveries WHERE recipient = 'u2'`); claimed.Load() != 5 || n != 1 {
		t.Fatalf("8 racing claims took %d rows into %d digests, want 5 rows in 1", claimed.Load(), n)
	}

	b.ahead(13 * time.Hour)
	due := time.Now().UTC().Add(12 * time.Hour).Truncate(time.Minute)
	params := make([]river.InsertManyParams, 4)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobs.DigestArgs{Recipient: "u1", DueAt: due, OldestID: fmt.Sprint(i)}}
	}
	if _, err := client.InsertMany(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	servertest.Eventually(t, 20*time.Second, "u1's rows digest_sent", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE recipient = 'u1' AND status = 'digest_sent'`) == 5
	})
	servertest.Eventually(t, 20*time.Second, "the digest jobs to finish", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.digest' AND state = 'completed'`) == 4
	})
	if m := b.onlyMessage(t); m.Subject != "Your 5 new notifications" {
		t.Fatalf("subject %q", m.Subject)
	}
}

func TestDigestDue(t *testing.T) {
	t.Parallel()
	parse := func(spec string) jobs.Schedule {
		cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf("digest: {schedule: %q}\n", spec))
		return cfg.Digest.ScheduleCron
	}
	daily, gap, often := parse("0 8 * * *"), parse("30 2 * * *"), parse("*/5 * * * *")
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	utc, la, nz := time.UTC, zone("America/Los_Angeles"), zone("Pacific/Auckland")
	ts := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name        string
		schedule    jobs.Schedule
		loc         *time.Location
		oldest, now string
		want        string
		due         bool
	}{
		{"UTC before 08:00", daily, utc, "2026-03-07T18:00:00Z", "2026-03-08T07:59:59Z", "2026-03-08T08:00:00Z", false},
		{"UTC at 08:00", daily, utc, "2026-03-07T18:00:00Z", "2026-03-08T08:00:00Z", "2026-03-08T08:00:00Z", true},
		{"row created at the instant waits for the next", daily, utc, "2026-03-08T08:00:00Z", "2026-03-08T08:00:00Z", "2026-03-09T08:00:00Z", false},
		{"Los Angeles the day before spring-forward: 08:00 PST", daily, la, "2026-03-06T18:00:00Z", "2026-03-07T16:00:00Z", "2026-03-07T16:00:00Z", true},
		{"Los Angeles on spring-forward day: 08:00 PDT, not yet", daily, la, "2026-03-07T18:00:00Z", "2026-03-08T14:59:59Z", "2026-03-08T15:00:00Z", false},
		{"Los Angeles on spring-forward day: 08:00 PDT", daily, la, "2026-03-07T18:00:00Z", "2026-03-08T15:00:00Z", "2026-03-08T15:00:00Z", true},
		{"Auckland: 08:00 NZDT is 19:00 UTC the day before", daily, nz, "2026-03-07T18:00:00Z", "2026-03-07T19:00:00Z", "2026-03-07T19:00:00Z", true},
		{"Auckland the day before DST ends: 08:00 NZDT", daily, nz, "2026-04-03T12:00:00Z", "2026-04-03T19:00:00Z", "2026-04-03T19:00:00Z", true},
		{"Auckland on the day DST ends: 08:00 NZST, not yet", daily, nz, "2026-04-04T12:00:00Z", "2026-04-04T19:59:59Z", "2026-04-04T20:00:00Z", false},
		{"Auckland on the day DST ends: 08:00 NZST", daily, nz, "2026-04-04T12:00:00Z", "2026-04-04T20:00:00Z", "2026-04-04T20:00:00Z", true},
		{"missed instants: one digest for the latest", daily, utc, "2026-03-01T00:00:00Z", "2026-03-08T09:00:00Z", "2026-03-08T08:00:00Z", true},
		{"missed instants across spring-forward", daily, la, "2026-03-05T18:00:00Z", "2026-03-09T00:00:00Z", "2026-03-08T15:00:00Z", true},
		{"a skipped wall-clock time waits for the next day", gap, la, "2026-03-08T06:00:00Z", "2026-03-09T09:29:59Z", "2026-03-09T09:30:00Z", false},
		{"frequent schedule after a long outage", often, utc, "2026-01-01T00:00:01Z", "2026-03-08T09:03:00Z", "2026-03-08T09:00:00Z", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, due := jobs.DigestDue(c.schedule, ts(c.oldest), c.loc, ts(c.now))
			if !got.Equal(ts(c.want)) || due != c.due || got.Location() != time.UTC {
				t.Fatalf("DigestDue(%s in %s, now %s) = %s, %v; want %s, %v", c.oldest, c.loc, c.now, got, due, c.want, c.due)
			}
		})
	}
}

func TestDigestLocation(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	for tz, want := range map[string]string{
		"Pacific/Auckland": "Pacific/Auckland",
		"":                 "Europe/Paris",
		"Mars/Olympus":     "Europe/Paris",
		"Local":            "Europe/Paris",
	} {
		if got := jobs.DigestLocation(tz, paris).String(); got != want {
			t.Errorf("DigestLocation(%q) = %s, want %s", tz, got, want)
		}
	}
	if got := jobs.DigestLocation("", nil); got != time.UTC {
		t.Errorf("DigestLocation with no fallback = %s, want UTC", got)
	}
}

// Recipients in three zones with the same schedule, and one with a zone that
// does not exist (digest.timezone applies): each becomes due at 08:00 on
// their own wall clock, and a sweep enqueues only those.
func TestDigestSweepEnqueuesOnlyDueRecipients(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, "digest: {schedule: \"0 8 * * *\", sweep: \"0 0 1 1 *\", timezone: UTC}\n")
	ctx := context.Background()
	created := time.Date(2026, 3, 7, 18, 0, 0, 0, time.UTC)
	for _, r := range []struct{ id, tz string }{{"nz", "Pacific/Auckland"}, {"utc", ""}, {"la", "America/Los_Angeles"}, {"bad", "Not/AZone"}} {
		if _, err := b.pool.Exec(ctx, `INSERT INTO notify_recipients (id, email, timezone) VALUES ($1, $1 || '@example.test', nullif($2, ''))`, r.id, r.tz); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			key := fmt.Sprintf("%s-%d", r.id, i)
			_, err := b.pool.Exec(ctx, `WITH n AS (
				INSERT INTO notify_notifications (id, notifier, key, params, status) VALUES (gen_random_uuid(), 'report.ready', $1, '{}', 'fanned_out') RETURNING id)
				INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status, created_at)
				SELECT gen_random_uuid(), n.id, 'report.ready', $1, $2, 'email', 'digest', 'digest_pending', $3 FROM n`,
				key, r.id, created.Add(time.Duration(i)*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	client, err := jobs.NewRiverClient(b.deps) // insert-only: nothing runs the jobs
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) {
		now, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		b.deps.Clock = func() time.Time { return now }
	}
	enqueued := func() map[string]string {
		t.Helper()
		rows, err := b.pool.Query(ctx, `SELECT e->>'recipient', e->>'due_at'
			FROM river_job j, jsonb_array_elements(j.args->'digests') e WHERE j.kind = 'notify.digest'`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for rows.Next() {
			var r, due string
			if err := rows.Scan(&r, &due); err != nil {
				t.Fatal(err)
			}
			got[r] = due
		}
		return got
	}

	at("2026-03-08T07:59:00Z") // 20:59 in Auckland: its 08:00 came at 19:00 UTC yesterday
	if n := b.sweep(t, client); n != 1 {
		t.Fatalf("sweep at 07:59 UTC enqueued %d, want 1 (Auckland)", n)
	}
	at("2026-03-08T09:00:00Z")
	if n := b.sweep(t, client); n != 2 {
		t.Fatalf("sweep at 09:00 UTC enqueued %d, want 2 (UTC and the fallback zone)", n)
	}
	want := map[string]string{"nz": "2026-03-07T19:00:00Z", "utc": "2026-03-08T08:00:00Z", "bad": "2026-03-08T08:00:00Z"}
	if got := enqueued(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("enqueued %v, want %v (Los Angeles is due at 15:00 UTC, after spring-forward)", got, want)
	}
	at("2026-03-08T15:00:00Z")
	if n := b.sweep(t, client); n != 1 {
		t.Fatalf("sweep at 15:00 UTC enqueued %d, want 1 (Los Angeles; the others are enqueued already)", n)
	}
	want["la"] = "2026-03-08T15:00:00Z"
	if got := enqueued(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("enqueued %v, want %v", got, want)
	}
	// The digest due instant is the same later the same day: nothing more.
	at("2026-03-08T18:30:00Z")
	if n := b.sweep(t, client); n != 0 {
		t.Fatalf("a later sweep enqueued %d more", n)
	}
}

// A cancelled notification's digest row is dropped, not sent: whether the
// cancel took the row (digest_dropped at once) or missed it (a cancel reads
// the rows its statement's snapshot sees, so a row a concurrent fan-out chunk
// committed stays pending: the digest job drops it at its claim).
func TestDigestDropsCancelledNotifications(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	client := servertest.StartWorkers(t, b.deps)
	for _, k := range []string{"keep", "cancelled", "raced"} {
		b.report(t, k, "u1")
	}
	b.waitRows(t, "digest_pending", 3)
	if _, err := b.client.Cancel(context.Background(), "report.ready", "cancelled"); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := b.rowStatus(t, "cancelled", "u1"); st != "digest_dropped" {
		t.Fatalf("cancel left the row %s, want digest_dropped", st)
	}
	if _, err := b.pool.Exec(context.Background(), `UPDATE notify_notifications SET status = 'cancelled' WHERE key = 'raced'`); err != nil {
		t.Fatal(err)
	}

	b.ahead(13 * time.Hour)
	if n := b.sweep(t, client); n != 1 {
		t.Fatalf("sweep enqueued %d digests, want 1", n)
	}
	b.waitRows(t, "digest_sent", 1)
	m := b.onlyMessage(t)
	if m.Subject != "Your 1 new notifications" || strings.TrimSpace(m.Text) != "- Report keep" {
		t.Fatalf("digest: subject %q, text %q; want only the kept item", m.Subject, m.Text)
	}
	for _, k := range []string{"cancelled", "raced"} {
		st, lastErr, _ := b.rowStatus(t, k, "u1")
		if st != "digest_dropped" || lastErr != "notification cancelled" {
			t.Fatalf("%s: status %s, last_error %q; want digest_dropped", k, st, lastErr)
		}
	}
}

func TestDigestTemporaryFailureRetriedAndSentOnce(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	reg := prometheus.NewRegistry()
	mx, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.deps.Metrics = mx
	b.profile(t, "u1", "u1@example.test")
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "a", "u1")
	b.waitRows(t, "digest_pending", 1) // a's row is older than b's
	b.report(t, "b", "u1")
	b.waitRows(t, "digest_pending", 2)
	b.smtp.FailNext(1, 451, "4.7.1 try again later")

	b.ahead(13 * time.Hour)
	if n := b.sweep(t, client); n != 1 {
		t.Fatalf("sweep enqueued %d digests, want 1", n)
	}
	b.waitRows(t, "digest_sent", 2)
	m := b.onlyMessage(t)
	ids := b.digestIDs(t)
	if len(ids) != 1 || m.MessageID != "<"+ids[0]+"@acme.test>" {
		t.Fatalf("Message-ID %q, digest ids %v: the retry must reuse the digest id", m.MessageID, ids)
	}
	if strings.TrimSpace(m.Text) != "- Report a\n- Report b" {
		t.Fatalf("digest text %q", m.Text)
	}
	for _, k := range []string{"a", "b"} {
		if _, lastErr, attempts := b.rowStatus(t, k, "u1"); attempts != 2 || !strings.Contains(lastErr, "451") {
			t.Fatalf("%s: attempts %d, last_error %q; want 2 attempts after a 451", k, attempts, lastErr)
		}
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'notify.digest'
		AND args->'digests' @> jsonb_build_array(jsonb_build_object('digest_id', $1::text))`, ids[0]); n != 1 {
		t.Fatalf("%d retry jobs for the digest, want 1", n)
	}
	// The digest runs are counted: one retried, one sent, covering both rows.
	for _, c := range []struct {
		outcome string
		want    float64
	}{{"retried", 1}, {"sent", 1}} {
		if got := digestRuns(t, reg, c.outcome); got != c.want {
			t.Errorf("notifyd_digest_runs_total{outcome=%q} = %v, want %v", c.outcome, got, c.want)
		}
	}
}

// digestRuns reads notifyd_digest_runs_total{outcome} from reg (0 when absent).
func digestRuns(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "notifyd_digest_runs_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestDigestPermanentFailureIsNotRetried(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "a", "u1")
	b.waitRows(t, "digest_pending", 1)
	b.smtp.FailNext(1, 550, "5.1.1 no such mailbox")
	b.ahead(13 * time.Hour)
	b.sweep(t, client)
	b.waitRows(t, "digest_failed", 1)
	b.digestsSettled(t)
	if st, lastErr, attempts := b.rowStatus(t, "a", "u1"); st != "digest_failed" || attempts != 1 || !strings.Contains(lastErr, "550") {
		t.Fatalf("status %s, attempts %d, last_error %q; want digest_failed after one attempt", st, attempts, lastErr)
	}
	if b.smtp.Count() != 0 {
		t.Fatalf("%d emails received", b.smtp.Count())
	}
}

func TestDigestPastMaxAgeFails(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("retry: {max_age: 1h}\ndigest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "a", "u1")
	b.waitRows(t, "digest_pending", 1)
	b.smtp.FailNext(1, 451, "4.3.0 mailbox busy")
	b.ahead(14 * time.Hour) // two hours past the due instant at the first failure
	b.sweep(t, client)
	b.waitRows(t, "digest_failed", 1)
	if _, lastErr, attempts := b.rowStatus(t, "a", "u1"); attempts != 1 || !strings.Contains(lastErr, "expired after 1 attempts") || !strings.Contains(lastErr, "451") {
		t.Fatalf("attempts %d, last_error %q", attempts, lastErr)
	}
}

// A worker claimed a digest and was killed before settling it: after the
// lease the sweep takes the claim back and the digest goes out, once, with the
// Message-ID of the lost attempt.
func TestDigestKilledClaimIsRedrivenWithSameMessageID(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "a", "u1")
	b.waitRows(t, "digest_pending", 1) // a's row is older than b's
	b.report(t, "b", "u1")
	b.waitRows(t, "digest_pending", 2)

	// The dead worker's claim, exactly as a digest job makes it.
	digestID := uuidv7.String()
	claim, err := stores.ClaimDigest(context.Background(), b.pool, stores.DigestClaimRequest{Recipient: "u1",
		DigestID: digestID, DueAt: time.Now().Add(time.Hour), Now: time.Now(), MaxItems: 50})
	if err != nil || claim.Count != 2 || claim.Profile == nil || len(claim.Items) != 2 {
		t.Fatalf("claim: %+v, %v", claim, err)
	}
	b.ahead(time.Minute) // within the lease: the claim is left alone
	if n := b.sweep(t, client); n != 0 {
		t.Fatalf("sweep within the lease enqueued %d", n)
	}
	b.ahead(6 * time.Minute) // past retry.lease (5m)
	if n := b.sweep(t, client); n != 1 {
		t.Fatalf("sweep past the lease re-drove %d digests, want 1", n)
	}
	b.waitRows(t, "digest_sent", 2)
	m := b.onlyMessage(t)
	if m.MessageID != "<"+digestID+"@acme.test>" {
		t.Fatalf("Message-ID = %q, want the killed attempt's digest id %s", m.MessageID, digestID)
	}
	if strings.TrimSpace(m.Text) != "- Report a\n- Report b" {
		t.Fatalf("digest text %q", m.Text)
	}
	for _, k := range []string{"a", "b"} {
		if _, lastErr, attempts := b.rowStatus(t, k, "u1"); attempts != 2 || !strings.Contains(lastErr, "claim expired") {
			t.Fatalf("%s: attempts %d, last_error %q; want the killed attempt and the re-drive", k, attempts, lastErr)
		}
	}
	// A late settle by the killed worker's claim changes nothing.
	if n, err := stores.SettleDigest(context.Background(), b.pool, stores.DigestSettlement{DigestID: digestID,
		ClaimedAt: claim.ClaimedAt, Status: "digest_failed", Error: "late"}, time.Now()); err != nil || n != 0 {
		t.Fatalf("late settle touched %d rows (%v), want 0", n, err)
	}
}

func TestDigestWithoutEmailIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := &jobs.DigestWorker{Deps: b.deps}
	err := w.Work(context.Background(), &river.Job[jobs.DigestArgs]{JobRow: &rivertype.JobRow{ID: 1},
		Args: jobs.DigestArgs{Recipient: "u1", DueAt: time.Now().UTC()}})
	if err == nil || !strings.Contains(err.Error(), "email is not configured") {
		t.Fatalf("err = %v, want one saying email is not configured", err)
	}
}

// A grouped claim (stores.ClaimDigests, what concurrent digest jobs share)
// gives each request its own recipient's rows, each row to one request only,
// with the recipient's profile (nil without one); a second request for the same recipient in the
// same statement finds nothing left.
func TestDigestGroupedClaimSplitsByRecipient(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	b.profile(t, "u2", "u2@example.test")
	servertest.StartWorkers(t, b.deps)
	for i := range 3 {
		b.report(t, fmt.Sprintf("k%d", i), "u1", "u2")
	}
	b.waitRows(t, "digest_pending", 6)

	now := time.Now().Truncate(time.Microsecond)
	due := now.Add(time.Hour)
	// MaxItems 2 of 3: each digest lists its two oldest rows and counts all.
	reqs := []stores.DigestClaimRequest{
		{Recipient: "u1", DigestID: uuidv7.String(), DueAt: due, Now: now, MaxItems: 2},
		{Recipient: "u2", DigestID: uuidv7.String(), DueAt: due, Now: now, MaxItems: 2},
		{Recipient: "u1", DigestID: uuidv7.String(), DueAt: due, Now: now, MaxItems: 2},
		{Recipient: "nobody", DigestID: uuidv7.String(), DueAt: due, Now: now, MaxItems: 2},
	}
	got, err := stores.ClaimDigests(context.Background(), b.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d results for 4 requests", len(got))
	}
	for i, want := range []int{3, 3, 0, 0} {
		if got[i].Count != want {
			t.Fatalf("request %d (%s) claimed %d rows, want %d", i, reqs[i].Recipient, got[i].Count, want)
		}
	}
	for i := range 2 {
		c := got[i]
		if len(c.Items) != 2 || c.Items[1].CreatedAt.Before(c.Items[0].CreatedAt) || c.Attempts != 1 || !c.ClaimedAt.Equal(now) {
			t.Fatalf("request %d: items %+v attempts %d claimed %v", i, c.Items, c.Attempts, c.ClaimedAt)
		}
	}
	for i, want := range []string{"u1@example.test", "u2@example.test"} {
		if p := got[i].Profile; p == nil || p.Email == nil || *p.Email != want {
			t.Fatalf("request %d: profile %+v, want address %s", i, p, want)
		}
	}
	if got[3].Profile != nil {
		t.Fatalf("a recipient without a profile got %+v", got[3].Profile)
	}
	for i, r := range reqs[:2] {
		n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries
			WHERE recipient = $1 AND status = 'digest_sending' AND digest_id = $2::uuid`, r.Recipient, r.DigestID)
		if n != 3 {
			t.Fatalf("request %d: %d rows held by its digest, want 3", i, n)
		}
	}

	// Settled together: each digest's rows, and only while its claim holds.
	held, err := stores.SettleDigests(context.Background(), b.pool, []stores.DigestSettlement{
		{DigestID: reqs[0].DigestID, ClaimedAt: got[0].ClaimedAt, Status: "digest_sent"},
		{DigestID: reqs[1].DigestID, ClaimedAt: got[1].ClaimedAt.Add(time.Second), Status: "digest_sent"},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if held[0] != 3 || held[1] != 0 {
		t.Fatalf("settled %v rows, want [3 0] (the second claim token is wrong)", held)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE status = 'digest_sent' AND recipient = 'u1'`); n != 3 {
		t.Fatalf("%d of u1's rows digest_sent, want 3", n)
	}

	// Each settlement's own status and error land on its own rows: u2's
	// digest fails (listed after one whose claim is already settled), and
	// u1's rows keep what they had.
	held, err = stores.SettleDigests(context.Background(), b.pool, []stores.DigestSettlement{
		{DigestID: reqs[0].DigestID, ClaimedAt: got[0].ClaimedAt, Status: "digest_sent", Error: "not this one"},
		{DigestID: reqs[1].DigestID, ClaimedAt: got[1].ClaimedAt, Status: "digest_failed", Error: "550 no such user"},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if held[0] != 0 || held[1] != 3 {
		t.Fatalf("settled %v rows, want [0 3] (the first digest was settled already)", held)
	}
	for _, c := range []struct{ recipient, status, lastError string }{
		{"u1", "digest_sent", ""},
		{"u2", "digest_failed", "550 no such user"},
	} {
		n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries
			WHERE recipient = $1 AND status = $2 AND coalesce(last_error, '') = $3 AND settled_at IS NOT NULL AND claimed_at IS NULL`,
			c.recipient, c.status, c.lastError)
		if n != 3 {
			t.Fatalf("%d of %s's rows are %s with last_error %q, want 3", n, c.recipient, c.status, c.lastError)
		}
	}
}

// A digest claimed by a process that died (its liveness lock released) is
// taken back through the lock within seconds, not after retry.lease, and
// goes out once, with the Message-ID of the lost attempt.
func TestDigestClaimOfAGoneProcessIsSentWithinSeconds(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "a", "u1")
	b.waitRows(t, "digest_pending", 1)
	b.report(t, "b", "u1")
	b.waitRows(t, "digest_pending", 2)

	goneClient(t, b.bundle, "dead-digester")
	digestID := uuidv7.String()
	claim, err := stores.ClaimDigest(context.Background(), b.pool, stores.DigestClaimRequest{Recipient: "u1",
		DigestID: digestID, DueAt: time.Now().Add(time.Hour), Now: time.Now(), MaxItems: 50, By: "dead-digester"})
	if err != nil || claim.Count != 2 {
		t.Fatalf("claim: %+v, %v", claim, err)
	}
	runCtx, stop := context.WithCancel(context.Background())
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
	b.waitRows(t, "digest_sent", 2)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the gone process's digest took %s, want within 10 s", took)
	}
	if m := b.onlyMessage(t); m.MessageID != "<"+digestID+"@acme.test>" {
		t.Fatalf("Message-ID = %q, want the lost attempt's digest id %s", m.MessageID, digestID)
	}
	for _, k := range []string{"a", "b"} {
		if _, lastErr, _ := b.rowStatus(t, k, "u1"); !strings.Contains(lastErr, "claim released") {
			t.Fatalf("%s: last_error %q, want the claim released", k, lastErr)
		}
	}
}
