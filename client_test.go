package notifyd_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// setup returns a fresh database with the test config's notifier catalog
// published (SendTx writes through notify_send, which checks it) and a
// client with that config.
func setup(t *testing.T) (*pgxpool.Pool, *notifyd.Client) {
	t.Helper()
	pool := pgtest.NewDB(t)
	cfg := servertest.Config(t, "")
	if err := server.PublishCatalog(context.Background(), pool, cfg, nil); err != nil {
		t.Fatal(err)
	}
	client, err := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return pool, client
}

var hello = notifyd.Notification{Notifier: "comment.created", Key: "comment-1", Actor: "u1",
	Recipients: []notifyd.Recipient{{ID: "u2", Reason: "author"}},
	Params:     map[string]any{"post_title": "Hello", "author_name": "Ada"}}

func TestSendTxIsAtomicWithTheApplicationsTransaction(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.SendTx(ctx, tx, hello); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := servertest.Count(t, pool, `SELECT count(*) FROM notify_notifications`) + servertest.Count(t, pool, `SELECT count(*) FROM river_job`); n != 0 {
		t.Fatalf("after rollback: %d rows (notifications + jobs), want 0", n)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := client.SendTx(ctx, tx, hello)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := servertest.Count(t, pool, `SELECT count(*) FROM notify_notifications WHERE status = 'pending'`); n != 1 {
		t.Fatalf("after commit: %d notifications, want 1", n)
	}
	// A small notification's fan-out is queued for the daemon's claimers
	// (batch_fanout), a larger one's as a notify.fanout job.
	if n := servertest.Count(t, pool, `SELECT count(*) FROM notify_notifications WHERE batch_fanout`); n != 1 {
		t.Fatalf("after commit: %d notifications queued for the fan-out claimers, want 1", n)
	}
}

func TestSendTxConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()

	// Two transactions send the same (notifier, key); the first holds its
	// transaction open while the second sends, then commits.
	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := client.SendTx(ctx, tx1, hello)
	if err != nil {
		t.Fatal(err)
	}
	var second notifyd.SendResult
	pids := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		done <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var pid int
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			pids <- pid
			var err error
			second, err = client.SendTx(ctx, tx, hello)
			return err
		})
	}()
	select {
	case pid := <-pids:
		waitForLock(t, pool, pid, "the second send", done) // on the first's unique key
	case err := <-done:
		t.Fatalf("the second send failed before sending: %v", err)
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !second.Duplicate || first.ID != second.ID {
		t.Fatalf("first=%+v second=%+v: want one notification, the second a duplicate", first, second)
	}
	if n := servertest.Count(t, pool, `SELECT (SELECT count(*) FROM river_job WHERE kind = 'notify.fanout') + (SELECT count(*) FROM notify_notifications WHERE batch_fanout)`); n != 1 {
		t.Fatalf("fan-outs queued (jobs or claimable) = %d, want 1", n)
	}
	// Later sends are duplicates too: identity is forever.
	res, err := client.Send(ctx, hello)
	if err != nil || !res.Duplicate || res.ID != first.ID {
		t.Fatalf("third send = %+v, %v", res, err)
	}
}

func TestSendTxValidates(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	tests := []struct {
		name  string
		n     notifyd.Notification
		check func(error) bool
	}{
		{"unknown notifier", notifyd.Notification{Notifier: "nope", Key: "k", Recipients: hello.Recipients},
			func(err error) bool { return errors.Is(err, notifyd.ErrUnknownNotifier) }},
		{"schema violation", notifyd.Notification{Notifier: "comment.created", Key: "k", Recipients: hello.Recipients,
			Params: map[string]any{"post_title": 7}},
			func(err error) bool {
				var pe *config.ParamsError
				return errors.As(err, &pe) && len(pe.Details) >= 2
			}},
		{"no key", notifyd.Notification{Notifier: "comment.created", Recipients: hello.Recipients},
			func(err error) bool {
				var ie *notifyd.InputError
				return errors.As(err, &ie) && ie.Field == "key"
			}},
		{"no audience", notifyd.Notification{Notifier: "comment.created", Key: "k", Params: hello.Params},
			func(err error) bool {
				var ie *notifyd.InputError
				return errors.As(err, &ie) && ie.Field == "recipients"
			}},
		{"invalid utf-8 recipient", notifyd.Notification{Notifier: "comment.created", Key: "k", Params: hello.Params,
			Recipients: []notifyd.Recipient{{ID: "\xff"}}},
			func(err error) bool {
				var ie *notifyd.InputError
				return errors.As(err, &ie) && ie.Field == "recipients[0].id"
			}},
	}
	for _, tt := range tests {
		_, err := client.Send(ctx, tt.n)
		if !tt.check(err) {
			t.Errorf("%s: err = %v", tt.name, err)
		}
	}
	if n := servertest.Count(t, pool, `SELECT count(*) FROM notify_notifications`); n != 0 {
		t.Fatalf("invalid sends wrote %d notifications", n)
	}
}

func TestCancelTx(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	if _, err := client.Send(ctx, hello); err != nil {
		t.Fatal(err)
	}
	n, err := client.Cancel(ctx, hello.Notifier, hello.Key)
	if err != nil || n != 0 {
		t.Fatalf("cancel = %d, %v (nothing fanned out yet, nothing to withdraw)", n, err)
	}
	if c := servertest.Count(t, pool, `SELECT count(*) FROM notify_notifications WHERE status = 'cancelled'`); c != 1 {
		t.Fatal("notification not cancelled")
	}
	if _, err := client.Cancel(ctx, "comment.created", "never-sent"); !errors.Is(err, notifyd.ErrNotFound) {
		t.Fatalf("cancel of an unknown notification = %v, want ErrNotFound", err)
	}
}

func TestRecipientToken(t *testing.T) {
	t.Parallel()
	tok, err := notifyd.RecipientToken("s3cret", "u2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := notifyd.ParseRecipientToken("s3cret", tok); err != nil || id != "u2" {
		t.Fatalf("parse = %q, %v", id, err)
	}
	if _, err := notifyd.ParseRecipientToken("other", tok); err == nil {
		t.Fatal("a token signed with another secret was accepted")
	}
	if _, err := notifyd.RecipientToken("s3cret", "u2", 0); err == nil {
		t.Fatal("a token without expiry was minted")
	}
	// Expiry by an injected clock: minted a minute ago for 30 s, or checked
	// a minute from now (exp has second precision).
	expired, err := notifyd.RecipientTokenAt("s3cret", "u2", 30*time.Second, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := notifyd.ParseRecipientToken("s3cret", expired); err == nil {
		t.Fatal("an expired token was accepted")
	}
	if id, err := notifyd.ParseRecipientTokenAt("s3cret", expired, time.Now().Add(-45*time.Second)); err != nil || id != "u2" {
		t.Fatalf("within its lifetime by the given clock: %q, %v", id, err)
	}
	if _, err := notifyd.ParseRecipientTokenAt("s3cret", tok, time.Now().Add(2*time.Hour)); err == nil {
		t.Fatal("a token was accepted after its exp by the given clock")
	}
}

// SendTx writes the inline list sorted by id in byte order, and marks it
// sorted (the fan-out keeps it as written) only when no id is listed twice:
// a repeated id waits for the fan-out to keep its strongest reason.
func TestSendTxSortsTheInlineList(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	for _, c := range []struct {
		key        string
		recipients []notifyd.Recipient
		ids        []string
		sorted     bool
	}{
		{"distinct", []notifyd.Recipient{{ID: "u3"}, {ID: "U2"}, {ID: "u10"}}, []string{"U2", "u10", "u3"}, true},
		{"repeated", []notifyd.Recipient{{ID: "u3"}, {ID: "u2", Reason: "author"}, {ID: "u3", Reason: "assigned"}},
			[]string{"u2", "u3", "u3"}, false},
	} {
		n := hello
		n.Key, n.Recipients = c.key, c.recipients
		res, err := client.Send(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		var sorted bool
		if err := pool.QueryRow(ctx, `SELECT recipients, inline_sorted FROM notify_notifications WHERE id = $1`, res.ID).
			Scan(&ids, &sorted); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, c.ids) || sorted != c.sorted {
			t.Errorf("%s: stored %v (sorted %v), want %v (sorted %v)", c.key, ids, sorted, c.ids, c.sorted)
		}
	}
}

// waitForLock waits until backend pid, running what, waits for a lock. what
// reports on done when it finishes: finishing first means it did not wait.
func waitForLock(t *testing.T, pool *pgxpool.Pool, pid int, what string, done <-chan error) {
	t.Helper()
	servertest.Eventually(t, 10*time.Second, what+" to wait for a lock", func() bool {
		var waiting bool
		if err := pool.QueryRow(context.Background(),
			`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if !waiting {
			select {
			case err := <-done:
				t.Fatalf("%s finished without waiting for a lock (err %v)", what, err)
			default:
			}
		}
		return waiting
	})
}

// sqlSetup is setup with the test config's notifiers published for the SQL
// functions, as a daemon publishes them at start.
func sqlSetup(t *testing.T) (*pgxpool.Pool, *notifyd.Client) {
	t.Helper()
	return setup(t)
}

// okParams are params comment.created's schema accepts.
const okParams = `{"post_title": "Hi", "author_name": "Ada"}`

// sqlSend runs notify_send in a transaction of its own.
func sqlSend(ctx context.Context, pool *pgxpool.Pool, args ...any) (notifyd.SendResult, error) {
	var res notifyd.SendResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT id::text, duplicate FROM notify_send($1, $2, $3, $4, $5, $6, $7)`, args...).
			Scan(&res.ID, &res.Duplicate)
	})
	return res, err
}

// SendTx and notify_send write the same rows for the same notification: the
// notification row and its River job differ only in ids, key and times.
func TestSendTxAndNotifySendWriteIdenticalRows(t *testing.T) {
	t.Parallel()
	pool, client := sqlSetup(t)
	ctx := context.Background()
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	cases := []struct {
		name       string
		n          notifyd.Notification
		recipients string // notify_send's JSON list for n.Recipients
	}{
		{"plain", hello, `[{"id": "u2", "reason": "author"}]`},
		{"unsorted, repeated, topics", notifyd.Notification{Notifier: "comment.created", Actor: "u1",
			Recipients: []notifyd.Recipient{{ID: "u3"}, {ID: "u2", Reason: "author"}, {ID: "u3", Reason: "assigned"}, {ID: "U9"}},
			Topics:     []string{"post-9", "post-1", "post-9"},
			Params:     map[string]any{"post_title": "Hello", "author_name": "Ada", "n": 1.5}},
			`["u3", {"id": "u2", "reason": "author"}, {"id": "u3", "reason": "assigned"}, {"id": "U9", "reason": ""}]`},
		{"one id, one topic", notifyd.Notification{Notifier: "comment.created", Recipients: []notifyd.Recipient{{ID: "u7"}},
			Topics: []string{"post-3"}, Params: map[string]any{"post_title": "Hi", "author_name": "Bo"}}, `["u7"]`},
		{"topics only, scheduled", notifyd.Notification{Notifier: "team.joined", Topics: []string{"team-1"},
			SendAt: later}, `[]`},
	}
	for _, c := range cases {
		goN := c.n
		goN.Key = "go-" + c.name
		goRes, err := client.Send(ctx, goN)
		if err != nil {
			t.Fatalf("%s: SendTx: %v", c.name, err)
		}
		params, err := json.Marshal(c.n.Params)
		if err != nil {
			t.Fatal(err)
		}
		if c.n.Params == nil {
			params = []byte(`{}`)
		}
		var actor, sendAt any
		if c.n.Actor != "" {
			actor = c.n.Actor
		}
		if !c.n.SendAt.IsZero() {
			sendAt = c.n.SendAt
		}
		topics := c.n.Topics
		if topics == nil {
			topics = []string{}
		}
		sqlRes, err := sqlSend(ctx, pool, c.n.Notifier, "sql-"+c.name, c.recipients, string(params), topics, actor, sendAt)
		if err != nil {
			t.Fatalf("%s: notify_send: %v", c.name, err)
		}
		if goRes.Duplicate || sqlRes.Duplicate {
			t.Fatalf("%s: a first send reported a duplicate", c.name)
		}
		// Every column but the identity and the times, so a column added
		// later is compared too.
		const notificationRow = `SELECT to_jsonb(n) - 'id' - 'key' - 'created_at' - 'updated_at' FROM notify_notifications n WHERE id = $1`
		const jobRow = `SELECT to_jsonb(j) - 'id' - 'args' - 'created_at' - 'scheduled_at', args ->> 'notification_id',
			args - 'notification_id', scheduled_at = coalesce($2, created_at) FROM river_job j WHERE args ->> 'notification_id' = $1`
		var goRow, sqlRow, goJob, sqlJob, goArgs, sqlArgs string
		var goJobFor, sqlJobFor string
		var goSched, sqlSched bool
		if err := pool.QueryRow(ctx, notificationRow, goRes.ID).Scan(&goRow); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, notificationRow, sqlRes.ID).Scan(&sqlRow); err != nil {
			t.Fatal(err)
		}
		if goRow != sqlRow {
			t.Errorf("%s: notification rows differ:\nSendTx     %s\nnotify_send %s", c.name, goRow, sqlRow)
		}
		// A small notification has no job (the rows above say batch_fanout
		// alike); a larger one's jobs must be the same.
		if servertest.Count(t, pool, `SELECT count(*) FROM notify_notifications WHERE batch_fanout AND id = $1`, goRes.ID) == 1 {
			continue
		}
		if err := pool.QueryRow(ctx, jobRow, goRes.ID, sendAt).Scan(&goJob, &goJobFor, &goArgs, &goSched); err != nil {
			t.Fatalf("%s: SendTx's job: %v", c.name, err)
		}
		if err := pool.QueryRow(ctx, jobRow, sqlRes.ID, sendAt).Scan(&sqlJob, &sqlJobFor, &sqlArgs, &sqlSched); err != nil {
			t.Fatalf("%s: notify_send's job: %v", c.name, err)
		}
		if goJob != sqlJob || goArgs != sqlArgs || !goSched || !sqlSched {
			t.Errorf("%s: jobs differ:\nSendTx      %s %s scheduled %v\nnotify_send %s %s scheduled %v", c.name,
				goJob, goArgs, goSched, sqlJob, sqlArgs, sqlSched)
		}
		if !uuidPattern.MatchString(sqlRes.ID) {
			t.Errorf("notify_send id %s is not a UUIDv7", sqlRes.ID)
		}
	}
}

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// A (notifier, key) is one notification whichever way it is sent.
func TestNotifySendDeduplicatesWithSendTx(t *testing.T) {
	t.Parallel()
	pool, client := sqlSetup(t)
	ctx := context.Background()
	first, err := sqlSend(ctx, pool, "comment.created", "k", `["u2"]`, okParams, []string{}, nil, nil)
	if err != nil || first.Duplicate {
		t.Fatalf("first notify_send = %+v, %v", first, err)
	}
	again, err := sqlSend(ctx, pool, "comment.created", "k", `["u3", "u4"]`, `{"post_title": "Other", "author_name": "Bo"}`, []string{}, nil, nil)
	if err != nil || !again.Duplicate || again.ID != first.ID {
		t.Fatalf("second notify_send = %+v, %v; want a duplicate of %s", again, err, first.ID)
	}
	n := hello
	n.Key = "k"
	res, err := client.Send(ctx, n)
	if err != nil || !res.Duplicate || res.ID != first.ID {
		t.Fatalf("SendTx of the same pair = %+v, %v; want a duplicate of %s", res, err, first.ID)
	}
	if c := servertest.Count(t, pool, `SELECT (SELECT count(*) FROM river_job WHERE kind = 'notify.fanout') + (SELECT count(*) FROM notify_notifications WHERE batch_fanout)`); c != 1 {
		t.Fatalf("%d fan-outs queued (jobs or claimable), want 1", c)
	}
	var recipients []string
	if err := pool.QueryRow(ctx, `SELECT recipients FROM notify_notifications`).Scan(&recipients); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(recipients, []string{"u2"}) {
		t.Fatalf("a duplicate changed the notification: recipients %v", recipients)
	}
}

// An application whose search_path does not reach notifyd's schema calls
// notify_send schema-qualified: every table, type and function it and
// notify_enqueue use still resolves in notifyd's schema, and a temporary
// table of the same name shadows nothing.
func TestNotifySendResolvesInItsSchemaWhateverTheSearchPath(t *testing.T) {
	t.Parallel()
	pool, _ := sqlSetup(t)
	ctx := context.Background()
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	var res notifyd.SendResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMPORARY TABLE notify_notifications (id uuid) ON COMMIT DROP`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL search_path = pg_temp, pg_catalog`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT id::text, duplicate FROM `+pgx.Identifier{schema}.Sanitize()+
			`.notify_send('comment.created', 'search-path', '["u2"]'::jsonb, '`+okParams+`'::jsonb)`).Scan(&res.ID, &res.Duplicate)
	})
	if err != nil || res.Duplicate {
		t.Fatalf("notify_send under search_path pg_temp, pg_catalog = %+v, %v", res, err)
	}
	if c := servertest.Count(t, pool, `SELECT count(*) FROM notify_notifications WHERE key = 'search-path'`); c != 1 {
		t.Fatalf("%d notifications in notifyd's table, want 1", c)
	}
	if c := servertest.Count(t, pool, `SELECT (SELECT count(*) FROM river_job WHERE kind = 'notify.fanout' AND args->>'notification_id' = '`+res.ID+`')
		+ (SELECT count(*) FROM notify_notifications WHERE batch_fanout AND id = '`+res.ID+`')`); c != 1 {
		t.Fatalf("%d fan-outs queued for it (jobs or claimable), want 1", c)
	}
}

// Bad input through notify_send fails with SQLSTATE 22023, the field in the
// message and in the error's column, and the words SendTx (and so the HTTP
// API) uses; nothing is written.
func TestNotifySendRejectsWhatSendTxRejects(t *testing.T) {
	t.Parallel()
	pool, client := sqlSetup(t)
	ctx := context.Background()
	long := strings.Repeat("x", 256)
	type sqlArgs struct {
		notifier, key, recipients, params any
		topics                            any
		actor                             any
	}
	ok := sqlArgs{notifier: "comment.created", key: "k", recipients: `["u2"]`, params: okParams, topics: []string{}}
	with := func(f func(*sqlArgs)) sqlArgs { a := ok; f(&a); return a }
	tests := []struct {
		name   string
		n      *notifyd.Notification // the same input through SendTx, when Go can express it
		sql    sqlArgs
		field  string
		prefix string // what the message starts with when no Go input says it
	}{
		{name: "no notifier", n: &notifyd.Notification{Key: "k", Recipients: hello.Recipients},
			sql: with(func(a *sqlArgs) { a.notifier = nil }), field: "notifier"},
		{name: "empty notifier", n: &notifyd.Notification{Key: "k", Recipients: hello.Recipients},
			sql: with(func(a *sqlArgs) { a.notifier = "" }), field: "notifier"},
		{name: "long notifier", n: &notifyd.Notification{Notifier: long, Key: "k", Recipients: hello.Recipients},
			sql: with(func(a *sqlArgs) { a.notifier = long }), field: "notifier"},
		{name: "no key", n: &notifyd.Notification{Notifier: "comment.created", Recipients: hello.Recipients},
			sql: with(func(a *sqlArgs) { a.key = nil }), field: "key"},
		{name: "long key", n: &notifyd.Notification{Notifier: "comment.created", Key: long, Recipients: hello.Recipients},
			sql: with(func(a *sqlArgs) { a.key = long }), field: "key"},
		{name: "long actor", n: &notifyd.Notification{Notifier: "comment.created", Key: "k", Actor: long, Recipients: hello.Recipients},
			sql: with(func(a *sqlArgs) { a.actor = long }), field: "actor"},
		{name: "no audience", n: &notifyd.Notification{Notifier: "comment.created", Key: "k"},
			sql: with(func(a *sqlArgs) { a.recipients = `[]` }), field: "recipients"},
		{name: "null audience", n: &notifyd.Notification{Notifier: "comment.created", Key: "k"},
			sql: with(func(a *sqlArgs) { a.recipients = nil }), field: "recipients"},
		{name: "empty id", n: &notifyd.Notification{Notifier: "comment.created", Key: "k",
			Recipients: []notifyd.Recipient{{ID: "u1"}, {ID: ""}}},
			sql: with(func(a *sqlArgs) { a.recipients = `["u1", ""]` }), field: "recipients[1].id"},
		{name: "the only id empty", n: &notifyd.Notification{Notifier: "comment.created", Key: "k",
			Recipients: []notifyd.Recipient{{ID: ""}}},
			sql: with(func(a *sqlArgs) { a.recipients = `[""]` }), field: "recipients[0].id"},
		{name: "second topic too long", n: &notifyd.Notification{Notifier: "comment.created", Key: "k", Topics: []string{"t", long}},
			sql: with(func(a *sqlArgs) { a.recipients, a.topics = `[]`, []string{"t", long} }), field: "topics[1]"},
		{name: "object without id", n: &notifyd.Notification{Notifier: "comment.created", Key: "k",
			Recipients: []notifyd.Recipient{{Reason: "author"}}},
			sql: with(func(a *sqlArgs) { a.recipients = `[{"reason": "author"}]` }), field: "recipients[0].id"},
		{name: "long id", n: &notifyd.Notification{Notifier: "comment.created", Key: "k",
			Recipients: []notifyd.Recipient{{ID: long}}},
			sql: with(func(a *sqlArgs) { a.recipients = `["` + long + `"]` }), field: "recipients[0].id"},
		{name: "long reason", n: &notifyd.Notification{Notifier: "comment.created", Key: "k",
			Recipients: []notifyd.Recipient{{ID: "u1", Reason: strings.Repeat("r", 65)}}},
			sql:   with(func(a *sqlArgs) { a.recipients = `[{"id": "u1", "reason": "` + strings.Repeat("r", 65) + `"}]` }),
			field: "recipients[0].reason"},
		{name: "empty topic", n: &notifyd.Notification{Notifier: "comment.created", Key: "k", Topics: []string{"t", ""}},
			sql: with(func(a *sqlArgs) { a.recipients, a.topics = `[]`, []string{"t", ""} }), field: "topics[1]"},
		{name: "long topic", n: &notifyd.Notification{Notifier: "comment.created", Key: "k", Topics: []string{long}},
			sql: with(func(a *sqlArgs) { a.recipients, a.topics = `[]`, []string{long} }), field: "topics[0]"},
		{name: "unknown notifier", n: &notifyd.Notification{Notifier: "nope", Key: "k", Recipients: hello.Recipients},
			sql: with(func(a *sqlArgs) { a.notifier = "nope" }), field: "notifier"},
		{name: "too many inline recipients", n: &notifyd.Notification{Notifier: "team.joined", Key: "k",
			Recipients: []notifyd.Recipient{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}, {ID: "a"}}},
			sql:   with(func(a *sqlArgs) { a.notifier, a.recipients = "team.joined", `["a", "b", "c", "d", "a"]` }),
			field: "recipients"},
		// What only JSON can express; the HTTP API says the same.
		{name: "recipients not a list", sql: with(func(a *sqlArgs) { a.recipients = `{"id": "u1"}` }),
			field: "recipients", prefix: "recipients: want a JSON array, got JSON object"},
		{name: "recipient a number", sql: with(func(a *sqlArgs) { a.recipients = `["u1", 7]` }),
			field: "recipients[1]", prefix: `recipients[1]: want a recipient id (string) or an object {"id", "reason"}`},
		{name: "unknown recipient field", sql: with(func(a *sqlArgs) { a.recipients = `[{"id": "u1", "role": "x"}]` }),
			field: "recipients[0].role", prefix: "recipients[0].role: unknown field"},
		{name: "id a number", sql: with(func(a *sqlArgs) { a.recipients = `[{"id": 7}]` }),
			field: "recipients[0].id", prefix: "recipients[0].id: want a string, got JSON number"},
		{name: "recipient null", sql: with(func(a *sqlArgs) { a.recipients = `[null]` }),
			field: "recipients[0]", prefix: `recipients[0]: want a recipient id (string) or an object {"id", "reason"}`},
		{name: "topic null", sql: with(func(a *sqlArgs) { a.recipients, a.topics = `[]`, []*string{nil} }),
			field: "topics[0]", prefix: "topics[0]: is required"},
		{name: "params a list", sql: with(func(a *sqlArgs) { a.params = `[1]` }),
			field: "params", prefix: "params: want a JSON object"},
	}
	for _, tt := range tests {
		_, err := sqlSend(ctx, pool, tt.sql.notifier, tt.sql.key, tt.sql.recipients, tt.sql.params, tt.sql.topics,
			tt.sql.actor, nil)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Errorf("%s: notify_send err = %v, want a PostgreSQL error", tt.name, err)
			continue
		}
		if pgErr.Code != "22023" || pgErr.ColumnName != tt.field {
			t.Errorf("%s: notify_send raised %s (column %q): %s; want 22023 naming %s", tt.name, pgErr.Code,
				pgErr.ColumnName, pgErr.Message, tt.field)
		}
		want := tt.prefix
		if tt.n != nil {
			_, goErr := client.Send(ctx, *tt.n)
			if goErr == nil {
				t.Errorf("%s: SendTx accepted it", tt.name)
				continue
			}
			want = goErr.Error()
			var ie *notifyd.InputError
			if errors.As(goErr, &ie) && ie.Field != tt.field {
				t.Errorf("%s: SendTx names %s, want %s", tt.name, ie.Field, tt.field)
			}
		}
		if !strings.HasPrefix(pgErr.Message, want) {
			t.Errorf("%s: notify_send says %q, want %q", tt.name, pgErr.Message, want)
		}
	}
	if n := servertest.Count(t, pool, `SELECT count(*) FROM notify_notifications`) + servertest.Count(t, pool, `SELECT count(*) FROM river_job`); n != 0 {
		t.Fatalf("refused sends wrote %d rows", n)
	}
}

// notify_cancel, notify_subscribe and notify_unsubscribe do what CancelTx,
// SubscribeTx and UnsubscribeTx do, and refuse what they refuse.
func TestSQLCancelAndSubscriptions(t *testing.T) {
	t.Parallel()
	pool, _ := sqlSetup(t)
	ctx := context.Background()
	if _, err := sqlSend(ctx, pool, "comment.created", "k", `["u2"]`, okParams, []string{}, nil, nil); err != nil {
		t.Fatal(err)
	}
	scalar := func(sql string, args ...any) (*int, error) {
		var n *int
		err := pool.QueryRow(ctx, sql, args...).Scan(&n)
		return n, err
	}
	if n, err := scalar(`SELECT notify_cancel('comment.created', 'k')`); err != nil || n == nil || *n != 0 {
		t.Fatalf("notify_cancel = %v, %v; want 0 (nothing fanned out yet)", n, err)
	}
	if n, err := scalar(`SELECT notify_cancel('comment.created', 'never-sent')`); err != nil || n != nil {
		t.Fatalf("notify_cancel of a notification never sent = %v, %v; want NULL", n, err)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM notify_notifications`).Scan(&status); err != nil || status != "cancelled" {
		t.Fatalf("status after notify_cancel = %q, %v", status, err)
	}

	boolean := func(sql string, args ...any) bool {
		t.Helper()
		var b bool
		if err := pool.QueryRow(ctx, sql, args...).Scan(&b); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return b
	}
	if !boolean(`SELECT notify_subscribe('post-9', 'u5')`) {
		t.Fatal("a new subscription was not reported new")
	}
	if boolean(`SELECT notify_subscribe('post-9', 'u5', 'watching')`) {
		t.Fatal("changing the reason was reported as a new subscription")
	}
	var reason string
	if err := pool.QueryRow(ctx, `SELECT reason FROM notify_subscriptions WHERE topic = 'post-9' AND recipient = 'u5'`).Scan(&reason); err != nil || reason != "watching" {
		t.Fatalf("reason = %q, %v", reason, err)
	}
	if !boolean(`SELECT notify_unsubscribe('post-9', 'u5')`) || boolean(`SELECT notify_unsubscribe('post-9', 'u5')`) {
		t.Fatal("notify_unsubscribe did not report true, then false")
	}
	for _, c := range []struct{ sql, field string }{
		{`SELECT notify_subscribe('', 'u5')`, "topic"},
		{`SELECT notify_subscribe('t', NULL)`, "recipient"},
		{`SELECT notify_subscribe('t', 'u5', 'two words')`, "reason"},
		{`SELECT notify_unsubscribe('t', repeat('x', 256))`, "recipient"},
	} {
		_, err := pool.Exec(ctx, c.sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != c.field ||
			!strings.HasPrefix(pgErr.Message, c.field+": ") {
			t.Errorf("%s: err = %v, want 22023 naming %s", c.sql, err, c.field)
		}
	}
	if n := servertest.Count(t, pool, `SELECT count(*) FROM notify_subscriptions`); n != 0 {
		t.Fatalf("%d subscriptions left", n)
	}
}

// A client without a config relies on notify_send's checks, and gets them
// as the Go API's errors: the published catalog, the checkable part of the
// params schema, max_recipients.
func TestSendTxWithoutConfigGetsTheSQLChecks(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t) // publishes the test config's catalog
	client, err := notifyd.NewClient(pool, notifyd.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := hello
	n.Notifier = "comment.craeted"
	if _, err := client.Send(ctx, n); !errors.Is(err, notifyd.ErrUnknownNotifier) ||
		err.Error() != `unknown notifier "comment.craeted" (not in the published catalog)` {
		t.Errorf("unknown notifier: %v", err)
	}
	n = hello
	n.Params = map[string]any{"post_title": 7, "author_name": "Ada"}
	var pe *config.ParamsError
	if _, err := client.Send(ctx, n); !errors.As(err, &pe) || len(pe.Details) != 1 || pe.Details[0].Pointer != "/post_title" ||
		err.Error() != "invalid params: /post_title: got number, want string" {
		t.Errorf("bad params: %v", err)
	}
	n = notifyd.Notification{Notifier: "team.joined", Key: "k",
		Recipients: []notifyd.Recipient{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}}}
	if _, err := client.Send(ctx, n); !errors.Is(err, notifyd.ErrTooManyRecipients) {
		t.Errorf("too many recipients: %v", err)
	}
	if c := servertest.Count(t, pool, `SELECT count(*) FROM notify_notifications`); c != 0 {
		t.Fatalf("%d notifications written", c)
	}
}
