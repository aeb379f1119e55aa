package jobs_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/server/servertest"
)

// audienceConfig is BaseConfig plus notifiers whose recipients come from the
// application's tables (watchers, people), and their twins that list the
// same recipients inline, on the email channel of the test SMTP server.
func audienceConfig(port int) string {
	twin := func(name, audience, workflow string) string {
		s := fmt.Sprintf(`
  %s:
    category: alerts
    params: {type: object, properties: {team: {type: string}, post: {type: string}, who: {type: string}}}
    example: {team: red, post: p1, who: ada}%s
    channels:
      in_app: {title: "Alert for {{.team}}"}
      email:
        subject: "Alert {{.team}}"
        text: "Something happened."%s
`, name, workflow, "")
		if audience != "" {
			s = strings.Replace(s, "    channels:", "    audience:\n"+audience+"    channels:", 1)
		}
		return s
	}
	people := "      query: SELECT p.person AS id FROM people p WHERE p.team = $1\n      args: [team]\n"
	return servertest.BaseConfig + (`
  ticket.updated:
    max_recipients: 5000
    params:
      type: object
      required: [ticket_id]
      properties: {ticket_id: {type: integer}, amount: {type: number}}
    example: {ticket_id: 1, amount: 5}
    audience:
      query: SELECT user_id AS id, 'watching' AS reason FROM watchers WHERE ticket_id = $1
      args: [ticket_id]
    channels:
      in_app: {title: "Ticket {{.ticket_id}} updated"}
  payment.received:
    params: {type: object, properties: {amount: {type: number}}}
    example: {amount: 5}
    channels:
      in_app: {title: "Payment of {{.amount}}"}
      email: {subject: "Payment", text: "Paid {{.amount}}.", if: "{{gt .amount 1000.0}}"}
  bad.table:
    audience: {query: "SELECT id FROM no_such_table"}
    channels: {in_app: {title: "x"}}
  bad.write:
    audience: {query: "SELECT nextval('audience_seq')::text AS id"}
    channels: {in_app: {title: "x"}}
  bad.slow:
    audience: {query: "SELECT pg_sleep(5)::text AS id"}
    audience_timeout: 100ms
    channels: {in_app: {title: "x"}}
  bad.columns:
    audience: {query: "SELECT user_id FROM watchers"}
    channels: {in_app: {title: "x"}}
`) + twin("alert.listed", "", "") + twin("alert.audience", people, "") +
		twin("alert.throttled.listed", "", "") + twin("alert.throttled.audience", people, "") +
		twin("liked.listed", "", "\n    batch: {key: \"{{.post}}\", window: 1h}") +
		twin("liked.audience", people, "\n    batch: {key: \"{{.post}}\", window: 1h}") +
		fmt.Sprintf(`channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: 127.0.0.1, port: %d, tls: none}
    timeout: 2s
`, port)
}

func setupAudience(t *testing.T) *emailBundle {
	t.Helper()
	b := setup(t)
	srv := smtpcapture.Start(t)
	src := audienceConfig(srv.Port())
	// The throttled twins: at most one email per hour per recipient.
	for _, n := range []string{"alert.throttled.listed", "alert.throttled.audience"} {
		i := strings.Index(src, "  "+n+":")
		j := i + strings.Index(src[i:], `text: "Something happened."`) + len(`text: "Something happened."`)
		src = src[:j] + "\n        throttle: {limit: 1, per: 1h}" + src[j:]
	}
	b.cfg = servertest.Config(t, src)
	b.deps.Config = b.cfg
	servertest.Wire(b.deps, servertest.Channels(t, b.cfg))
	b.client = servertest.Client(t, b.pool, b.cfg)
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE watchers (ticket_id bigint NOT NULL, user_id text NOT NULL, PRIMARY KEY (ticket_id, user_id))`,
		`CREATE TABLE people (person text PRIMARY KEY, team text NOT NULL)`,
		`CREATE SEQUENCE audience_seq`,
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return &emailBundle{bundle: b, smtp: srv}
}

func (b *emailBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// inboxOf lists notification id's inbox items as "recipient:reason", by
// recipient.
func (b *emailBundle) inboxOf(t *testing.T, id string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT recipient || ':' || reason FROM notify_inbox
		WHERE notification_id = $1 ORDER BY recipient COLLATE "C"`, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// The example: a notifier whose audience is the watchers of the
// ticket in its params reaches exactly the watchers at the moment of the
// fan-out (a watcher who joined after the send is reached, one who left is
// not; other tickets' watchers are not), merged with the inline recipients
// and the topic's subscribers with the strongest reason winning, the actor
// left out; the staging is empty afterwards.
func TestAudienceReachesExactlyTheWatchers(t *testing.T) {
	t.Parallel()
	b := setupAudience(t)
	ctx := context.Background()
	b.exec(t, `INSERT INTO watchers VALUES (42, 'w1'), (42, 'w2'), (42, 'w3'), (42, 'actor'), (7, 'other')`)
	b.exec(t, `INSERT INTO notify_subscriptions (topic, recipient, reason) VALUES ('ticket-42', 'w3', 'subscribed'), ('ticket-42', 's1', 'subscribed')`)
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "ticket.updated", Key: "t-42", Actor: "actor",
		Params:     map[string]any{"ticket_id": 42},
		Recipients: []notifyd.Recipient{{ID: "w1", Reason: "assigned"}, {ID: "i1", Reason: "mentioned"}},
		Topics:     []string{"ticket-42"}})
	if err != nil {
		t.Fatal(err)
	}
	// Before the fan-out runs, w2 stops watching and w4 starts.
	b.exec(t, `DELETE FROM watchers WHERE ticket_id = 42 AND user_id = 'w2'`)
	b.exec(t, `INSERT INTO watchers VALUES (42, 'w4')`)
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b.bundle, res.ID, "fanned_out")

	want := []string{"i1:mentioned", "s1:subscribed", "w1:assigned", "w3:subscribed", "w4:watching"}
	if got := b.inboxOf(t, res.ID); !slices.Equal(got, want) {
		t.Fatalf("inbox = %v, want %v", got, want)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_audience_members`); n != 0 {
		t.Fatalf("%d audience members left in the staging", n)
	}

	// Audience only: no recipients, no topics. Another ticket, another set.
	only, err := b.client.Send(ctx, notifyd.Notification{Notifier: "ticket.updated", Key: "t-7",
		Params: map[string]any{"ticket_id": 7}})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, b.bundle, only.ID, "fanned_out")
	if got := b.inboxOf(t, only.ID); !slices.Equal(got, []string{"other:watching"}) {
		t.Fatalf("inbox of ticket 7 = %v, want [other:watching]", got)
	}
	// A notifier without an audience still needs recipients or topics.
	if _, err := b.client.Send(ctx, notifyd.Notification{Notifier: "payment.received", Key: "p-0",
		Params: map[string]any{"amount": 1}}); err == nil || !strings.Contains(err.Error(), "give at least one recipient or topic") {
		t.Fatalf("send without recipients to a notifier without audience: %v", err)
	}
}

// An audience larger than two chunks per lane is split into lanes and read
// in chunks along the staging's key, merged with inline recipients and a
// topic that overlap it: every recipient once, with the strongest reason.
func TestAudienceInLanesAndChunks(t *testing.T) {
	t.Parallel()
	b := setupAudience(t)
	ctx := context.Background()
	b.exec(t, `INSERT INTO watchers SELECT 9, 'user-' || lpad(g::text, 5, '0') FROM generate_series(1, 1200) g`)
	b.exec(t, `INSERT INTO notify_subscriptions (topic, recipient, reason)
		SELECT 'busy', 'user-' || lpad(g::text, 5, '0'), 'subscribed' FROM generate_series(1000, 1400) g`)
	var inline []notifyd.Recipient
	for i := 1; i <= 1200; i += 100 {
		inline = append(inline, notifyd.Recipient{ID: fmt.Sprintf("user-%05d", i), Reason: "assigned"})
	}
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "ticket.updated", Key: "t-9",
		Params: map[string]any{"ticket_id": 9}, Recipients: inline, Topics: []string{"busy"}})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b.bundle, res.ID, "fanned_out")
	counts := map[string]int{}
	for _, item := range b.inboxOf(t, res.ID) {
		_, reason, _ := strings.Cut(item, ":")
		counts[reason]++
	}
	// 1..1400: 12 assigned inline, 1001..1400 subscribed (1001 is inline),
	// the rest of 1..1000 (and 1000 itself) watching.
	want := map[string]int{"assigned": 12, "subscribed": 200 + 200 - 1, "watching": 1400 - 12 - 399}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("inbox by reason = %v, want %v", counts, want)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(DISTINCT lane) FROM notify_fanout_lanes WHERE notification_id = $1`, res.ID); n < 2 {
		t.Fatalf("%d lanes, want the audience split", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_audience_members`); n != 0 {
		t.Fatalf("%d audience members left in the staging", n)
	}
}

// A query the database refuses rejects the notification with the
// database's message: a missing table, a write (the transaction is READ
// ONLY), the statement timeout, no id column. Nothing is delivered.
func TestAudienceQueryFailureRejects(t *testing.T) {
	t.Parallel()
	b := setupAudience(t)
	ctx := context.Background()
	ids := map[string]string{}
	for _, n := range []string{"bad.table", "bad.write", "bad.slow", "bad.columns"} {
		res, err := b.client.Send(ctx, notifyd.Notification{Notifier: n, Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		ids[n] = res.ID
	}
	servertest.StartWorkers(t, b.deps)
	want := map[string]string{
		"bad.table":   `audience query failed: ERROR: relation "no_such_table" does not exist (SQLSTATE 42P01)`,
		"bad.write":   `audience query failed: ERROR: cannot execute nextval() in a read-only transaction (SQLSTATE 25006)`,
		"bad.slow":    `audience query failed: ERROR: canceling statement due to statement timeout (SQLSTATE 57014)`,
		"bad.columns": `audience query failed: the audience query returns no column id (its columns: user_id)`,
	}
	for n, id := range ids {
		waitStatus(t, b.bundle, id, "rejected")
		var msg string
		if err := b.pool.QueryRow(ctx, `SELECT error FROM notify_notifications WHERE id = $1`, id).Scan(&msg); err != nil {
			t.Fatal(err)
		}
		if msg != want[n] {
			t.Errorf("%s: error %q, want %q", n, msg, want[n])
		}
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox`) +
		servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries`); n != 0 {
		t.Fatalf("%d rows written for rejected notifications", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM audience_seq WHERE is_called`); n != 0 {
		t.Fatal("the read-only audience query advanced a sequence")
	}
}

// A recipient reached through an audience is treated exactly as the same
// recipient listed inline: preferences (email off), a notifier mute, quiet
// hours, a throttle (a second alert within the hour) and a batch (a second
// like within the window) give the same delivery rows and inbox items for
// the audience notifiers as for their listed twins.
func TestAudienceWorkflowsAsListedRecipients(t *testing.T) {
	t.Parallel()
	b := setupAudience(t)
	ctx := context.Background()
	team := []string{"u1", "u2", "u3", "u4"}
	for _, p := range team {
		b.profile(t, p, p+"@example.test")
		b.exec(t, `INSERT INTO people VALUES ($1, 'red')`, p)
	}
	b.exec(t, `INSERT INTO people VALUES ('blue1', 'blue')`)
	// u2 turned email off; u3 muted every one of these notifiers; u4 is in
	// quiet hours now.
	b.exec(t, `INSERT INTO notify_preferences VALUES ('u2', 'category:alerts', 'email', 'off')`)
	for _, n := range []string{"alert", "alert.throttled", "liked"} {
		for _, v := range []string{".listed", ".audience"} {
			b.exec(t, `INSERT INTO notify_mutes (recipient, target) VALUES ('u3', $1)`, "notifier:"+n+v)
		}
	}
	now := time.Now().UTC()
	b.exec(t, `UPDATE notify_recipients SET timezone = 'UTC', quiet_hours = $1 WHERE id = 'u4'`,
		fmt.Sprintf(`{"start":%q,"end":%q}`, now.Add(-time.Hour).Format("15:04"), now.Add(3*time.Hour).Format("15:04")))

	var listed []notifyd.Recipient
	for _, p := range team {
		listed = append(listed, notifyd.Recipient{ID: p})
	}
	send := func(notifier, key string, params map[string]any) string {
		t.Helper()
		n := notifyd.Notification{Notifier: notifier, Key: key, Params: params, Actor: "someone"}
		if strings.HasSuffix(notifier, ".listed") {
			n.Recipients = listed
		}
		res, err := b.client.Send(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	servertest.StartWorkers(t, b.deps)
	red := map[string]any{"team": "red", "post": "p1", "who": "ada"}
	var pairs [][2]string
	for _, base := range []string{"alert", "alert.throttled", "liked"} {
		for i := range 2 {
			key := fmt.Sprintf("k-%d", i)
			l, a := send(base+".listed", key, red), send(base+".audience", key, red)
			waitStatus(t, b.bundle, l, "fanned_out")
			waitStatus(t, b.bundle, a, "fanned_out")
			pairs = append(pairs, [2]string{l, a})
		}
	}
	// Every delivery that can settle now has.
	servertest.Eventually(t, 20*time.Second, "no delivery pending or sending", func() bool {
		return servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE status IN ('pending', 'sending')`) == 0
	})
	rowsOf := func(id string) []string {
		rows, err := b.pool.Query(ctx, `SELECT recipient || ' ' || channel || ' ' || mode || ' ' || status || ' ' ||
			coalesce(last_error, '') || ' ' || (next_attempt_at IS NOT NULL)::text || ' ' || (batch_id IS NOT NULL)::text
			|| ' ' || (batched_into IS NOT NULL)::text
			FROM notify_deliveries WHERE notification_id = $1 ORDER BY recipient COLLATE "C", channel`, id)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	seen := map[string]bool{}
	for _, p := range pairs {
		l, a := rowsOf(p[0]), rowsOf(p[1])
		// A throttle's last_error names its notifier.
		for i := range l {
			l[i] = strings.ReplaceAll(l[i], ".listed ", " ")
		}
		for i := range a {
			a[i] = strings.ReplaceAll(a[i], ".audience ", " ")
		}
		if !slices.Equal(l, a) {
			t.Errorf("deliveries differ:\nlisted   %q\naudience %q", l, a)
		}
		if li, ai := b.inboxOf(t, p[0]), b.inboxOf(t, p[1]); !slices.Equal(li, ai) {
			t.Errorf("inbox differs:\nlisted   %q\naudience %q", li, ai)
		}
		for _, r := range a {
			f := strings.Fields(r)
			seen[f[0]+" "+f[3]] = true
		}
	}
	// The rows compared are the workflows' outcomes, not all alike.
	for _, want := range []string{"u1 sent", "u2 skipped", "u3 skipped", "u4 scheduled", "u1 throttled", "u1 batched"} {
		if !seen[want] {
			t.Errorf("no delivery %q among the compared rows %v", want, seen)
		}
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE recipient = 'blue1'`); n != 0 {
		t.Fatal("the other team was reached")
	}
}

// A channel's `if` is rendered once per notification: when it is not true,
// every recipient's delivery on that channel is skipped with "condition
// false", and the other channels go on.
func TestChannelConditionSkipsEveryRecipient(t *testing.T) {
	t.Parallel()
	b := setupAudience(t)
	ctx := context.Background()
	b.profile(t, "u1", "u1@example.test")
	b.profile(t, "u2", "u2@example.test")
	to := []notifyd.Recipient{{ID: "u1"}, {ID: "u2"}}
	small, err := b.client.Send(ctx, notifyd.Notification{Notifier: "payment.received", Key: "p-1",
		Params: map[string]any{"amount": 20}, Recipients: to})
	if err != nil {
		t.Fatal(err)
	}
	large, err := b.client.Send(ctx, notifyd.Notification{Notifier: "payment.received", Key: "p-2",
		Params: map[string]any{"amount": 1500.5}, Recipients: to})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	for _, u := range []string{"u1", "u2"} {
		d := b.waitDelivery(t, small.ID, u, "skipped")
		if d.lastError != "condition false" {
			t.Fatalf("skipped email to %s: last_error %q, want condition false", u, d.lastError)
		}
		b.waitDelivery(t, large.ID, u, "sent")
	}
	if got := b.inboxOf(t, small.ID); !slices.Equal(got, []string{"u1:direct", "u2:direct"}) {
		t.Fatalf("in-app items of the small payment = %v", got)
	}
	if got := b.smtp.Count(); got != 2 {
		t.Fatalf("%d emails, want the large payment's two", got)
	}
}

// An audience notification of a tenant carries the tenant onto every item
// and delivery and resolves each audience member's preferences with the
// tenant's layers, as for listed recipients: the tenant's default turns
// email off, one member's rule scoped to the tenant turns it back on.
func TestAudienceWithATenant(t *testing.T) {
	t.Parallel()
	b := setupAudience(t)
	ctx := context.Background()
	b.exec(t, `INSERT INTO people VALUES ('p1', 'blue'), ('p2', 'blue'), ('p3', 'green')`)
	b.exec(t, `INSERT INTO notify_tenants (id, preferences) VALUES ('acme', '[{"scope": "*", "channel": "email", "mode": "off"}]')`)
	b.exec(t, `INSERT INTO notify_tenant_preferences (recipient, tenant, scope, channel, mode) VALUES ('p2', 'acme', '*', 'email', 'immediate')`)
	b.profile(t, "p1", "p1@example.test")
	b.profile(t, "p2", "p2@example.test")
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "alert.audience", Key: "tenant-1", Tenant: "acme",
		Params: map[string]any{"team": "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b.bundle, res.ID, "fanned_out")
	if got := b.inboxOf(t, res.ID); !slices.Equal(got, []string{"p1:direct", "p2:direct"}) {
		t.Fatalf("inbox = %v, want p1 and p2", got)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_inbox WHERE notification_id = $1 AND tenant IS DISTINCT FROM 'acme'`, res.ID); n != 0 {
		t.Fatalf("%d inbox items without the tenant", n)
	}
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND tenant IS DISTINCT FROM 'acme'`, res.ID); n != 0 {
		t.Fatalf("%d deliveries without the tenant", n)
	}
	if d := b.delivery(t, res.ID, "p1"); d.status != "skipped" {
		t.Fatalf("p1's email is %s (%s), want skipped by the tenant's default", d.status, d.lastError)
	}
	b.waitDelivery(t, res.ID, "p2", "sent")
}
