package notifyd_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

var appRoles atomic.Int64

// appSetup returns a migrated database with the test config's catalog (the
// owner's pool, which the daemon would use) and a pool on it as a new LOGIN
// role whose only right is membership in notifyd_app, as an application's
// role is set up with one GRANT.
func appSetup(t *testing.T) (owner, app *pgxpool.Pool, role string) {
	t.Helper()
	ctx := context.Background()
	owner, dbURL := pgtest.NewDBURL(t)
	if err := server.PublishCatalog(ctx, owner, servertest.Config(t, ""), nil); err != nil {
		t.Fatal(err)
	}
	role = fmt.Sprintf("app_%d_%d", os.Getpid(), appRoles.Add(1))
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := owner.Exec(ctx, "CREATE ROLE "+ident+" LOGIN PASSWORD 'app-password'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// After the app pool is closed (cleanups run last-in first-out).
		if _, err := owner.Exec(context.Background(), "DROP OWNED BY "+ident+"; DROP ROLE "+ident); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	if _, err := owner.Exec(ctx, "GRANT "+stores.AppRole+" TO "+ident); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "app-password")
	app, err = pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	return owner, app, role
}

func insufficientPrivilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// A role granted only notifyd_app sends, cancels, subscribes, unsubscribes
// and writes profiles through the SQL API, in its own transaction: rolled
// back, nothing is written; committed, all of it is.
func TestAppRoleUsesTheSQLAPI(t *testing.T) {
	t.Parallel()
	owner, app, _ := appSetup(t)
	ctx := context.Background()
	work := func(tx pgx.Tx) error {
		for _, sql := range []string{
			`SELECT notify_put_recipient('u2', '{"email": "ada@example.com", "timezone": "Europe/Paris"}')`,
			`SELECT notify_subscribe('post-9', 'u3', 'commented')`,
			`SELECT notify_subscribe('post-9', 'u4')`,
			`SELECT notify_unsubscribe('post-9', 'u4')`,
			`SELECT * FROM notify_send('comment.created', 'c-1', '["u2"]', '{"post_title": "Hi", "author_name": "Ada"}', '{post-9}')`,
			`SELECT * FROM notify_send('comment.created', 'c-2', '{u2}', '{author}', '{"post_title": "Hi", "author_name": "Ada"}', '{}', NULL, NULL, NULL)`,
			`SELECT notify_cancel('comment.created', 'c-2')`,
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		return nil
	}
	state := func() string {
		var s string
		// A small notification is queued for the fan-out claimers instead of
		// as a job: both count as its job here.
		err := owner.QueryRow(ctx, `SELECT format('%s recipients, %s subscriptions, %s notifications (%s cancelled), %s jobs',
			(SELECT count(*) FROM notify_recipients), (SELECT count(*) FROM notify_subscriptions),
			(SELECT count(*) FROM notify_notifications), (SELECT count(*) FROM notify_notifications WHERE status = 'cancelled'),
			(SELECT count(*) FROM river_job) + (SELECT count(*) FROM notify_notifications WHERE batch_fanout))`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := work(tx); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := state(), "0 recipients, 0 subscriptions, 0 notifications (0 cancelled), 0 jobs"; got != want {
		t.Fatalf("after rollback: %s, want %s", got, want)
	}
	if err := pgx.BeginFunc(ctx, app, work); err != nil {
		t.Fatal(err)
	}
	if got, want := state(), "1 recipients, 1 subscriptions, 2 notifications (1 cancelled), 2 jobs"; got != want {
		t.Fatalf("after commit: %s, want %s", got, want)
	}
}

// The role may read or write no notifyd table, no River table and no
// sequence, and may execute no notify_* function but the five of the API.
func TestAppRoleIsRefusedEverythingElse(t *testing.T) {
	t.Parallel()
	owner, app, role := appSetup(t)
	ctx := context.Background()

	rows, err := owner.Query(ctx, `
SELECT c.oid::regclass::text, c.relkind::text, (SELECT quote_ident(a.attname) FROM pg_attribute a
                                                 WHERE a.attrelid = c.oid AND a.attnum = 1)
FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'S', 'v')
  AND (c.relname LIKE 'notify\_%' OR c.relname LIKE 'river\_%')
ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type relation struct{ name, kind, column string }
	relations, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (relation, error) {
		var x relation
		var col *string
		err := r.Scan(&x.name, &x.kind, &col)
		if col != nil {
			x.column = *col
		}
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(relations) < 20 {
		t.Fatalf("only %d relations found: %v", len(relations), relations)
	}
	sawRiverJob := false
	for _, r := range relations {
		sawRiverJob = sawRiverJob || r.name == "river_job"
		var statements []string
		if r.kind == "S" {
			statements = []string{"SELECT nextval('" + r.name + "')", "SELECT last_value FROM " + r.name}
		} else {
			statements = []string{
				"SELECT 1 FROM " + r.name + " LIMIT 1",
				"INSERT INTO " + r.name + " DEFAULT VALUES",
				"UPDATE " + r.name + " SET " + r.column + " = " + r.column + " WHERE false",
				"DELETE FROM " + r.name + " WHERE false",
			}
		}
		for _, sql := range statements {
			if _, err := app.Exec(ctx, sql); !insufficientPrivilege(err) {
				t.Errorf("as %s: %s: %v, want permission denied", role, sql, err)
			}
		}
	}
	if !sawRiverJob {
		t.Fatal("river_job not among the relations checked")
	}

	rows, err = owner.Query(ctx, `
SELECT p.oid::regprocedure::text, p.proname = ANY ($2),
       has_function_privilege($1, p.oid, 'EXECUTE'),
       format('SELECT %I(%s)', p.proname, (SELECT string_agg('NULL::' || format_type(a.t, NULL), ', ')
                                           FROM unnest(p.proargtypes) AS a(t))),
       p.prorettype = 'trigger'::regtype
FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'notify\_%'
ORDER BY 1`, role, stores.AppFunctions)
	if err != nil {
		t.Fatal(err)
	}
	internal := 0
	for rows.Next() {
		var fn, call string
		var api, may, trigger bool
		if err := rows.Scan(&fn, &api, &may, &call, &trigger); err != nil {
			t.Fatal(err)
		}
		if api != may {
			t.Errorf("%s may execute %s: %v, want %v", role, fn, may, api)
		}
		if api || trigger { // a trigger function cannot be called at all
			continue
		}
		internal++
		if _, err := app.Exec(ctx, call); !insufficientPrivilege(err) {
			t.Errorf("as %s: %s: %v, want permission denied", role, call, err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if internal < 10 {
		t.Fatalf("only %d internal functions checked", internal)
	}
	// Not PUBLIC either: a role without notifyd_app may execute nothing.
	var public int
	if err := owner.QueryRow(ctx, `SELECT count(*) FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'notify\_%'
  AND has_function_privilege('public', p.oid, 'EXECUTE')`).Scan(&public); err != nil || public != 0 {
		t.Fatalf("%d notify_* functions executable by PUBLIC (%v)", public, err)
	}
}

// The Go API needs no more than notifyd_app either: SendTx, CancelTx,
// PutRecipientTx, SubscribeTx and UnsubscribeTx run in a transaction of the
// application's role.
func TestAppRoleRunsTheGoAPI(t *testing.T) {
	t.Parallel()
	owner, app, _ := appSetup(t)
	ctx := context.Background()
	client, err := notifyd.NewClient(app, notifyd.ClientConfig{Config: servertest.Config(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	work := func(tx pgx.Tx) error {
		if err := client.PutRecipientTx(ctx, tx, "u2", notifyd.Profile{Email: "ada@example.com", Name: "Ada"}); err != nil {
			return err
		}
		if err := client.SubscribeTx(ctx, tx, "post-9", "u3", "commented"); err != nil {
			return err
		}
		if err := client.SubscribeTx(ctx, tx, "post-9", "u4", ""); err != nil {
			return err
		}
		if removed, err := client.UnsubscribeTx(ctx, tx, "post-9", "u4"); err != nil || !removed {
			return fmt.Errorf("UnsubscribeTx = %v, %w", removed, err)
		}
		for _, key := range []string{"c-1", "c-2"} {
			n := hello
			n.Key, n.Topics = key, []string{"post-9"}
			if _, err := client.SendTx(ctx, tx, n); err != nil {
				return err
			}
		}
		_, err := client.CancelTx(ctx, tx, "comment.created", "c-2")
		return err
	}
	count := func() int {
		return servertest.Count(t, owner, `SELECT (SELECT count(*) FROM notify_recipients WHERE email = 'ada@example.com')
			+ (SELECT count(*) FROM notify_subscriptions) + (SELECT count(*) FROM notify_notifications)
			+ (SELECT count(*) FROM notify_notifications WHERE status = 'cancelled') + (SELECT count(*) FROM river_job)
			+ (SELECT count(*) FROM notify_notifications WHERE batch_fanout)`)
	}
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := work(tx); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("after rollback: %d rows", n)
	}
	if err := pgx.BeginFunc(ctx, app, work); err != nil {
		t.Fatal(err)
	}
	// 1 profile + 1 subscription + 2 notifications + 1 cancelled + 2 jobs
	// (or claims: a small notification is queued for the fan-out claimers).
	if n := count(); n != 7 {
		t.Fatalf("after commit: %d rows, want 7", n)
	}

	// What the role cannot read it cannot read through the Go API either.
	if _, err := client.GetRecipient(ctx, "u2"); !insufficientPrivilege(err) {
		t.Fatalf("GetRecipient as the application's role: %v, want permission denied", err)
	}
	// Errors keep their Go types.
	var inputErr *notifyd.InputError
	err = pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		return client.PutRecipientTx(ctx, tx, "u2", notifyd.Profile{Timezone: "Mars/Olympus"})
	})
	if !errors.As(err, &inputErr) || inputErr.Field != "timezone" {
		t.Fatalf("PutRecipientTx of a bad zone: %v, want an *InputError for timezone", err)
	}
}

// The API functions resolve every name in notifyd's schema, then
// pg_catalog: neither the caller's search_path nor tables, functions and
// operators the caller creates in a schema it owns (or temporary ones)
// change what they read, write or compute.
func TestAppRoleCannotRedirectTheAPI(t *testing.T) {
	t.Parallel()
	owner, app, role := appSetup(t)
	ctx := context.Background()
	var schema string
	if err := owner.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := owner.Exec(ctx, "CREATE SCHEMA "+ident+" AUTHORIZATION "+ident); err != nil {
		t.Fatal(err)
	}
	// The role cannot create in notifyd's schema (PostgreSQL 15's default for
	// public; migrate warns when it can).
	if _, err := app.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "notify_x"}.Sanitize()+" (id int)"); !insufficientPrivilege(err) {
		t.Fatalf("CREATE TABLE in notifyd's schema as %s: %v, want permission denied", role, err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		for _, sql := range []string{
			// Decoys in the role's own schema, named like what the functions use.
			`CREATE TABLE notify_notifications (id uuid, notifier text, key text)`,
			`CREATE TABLE notify_notifiers (name text, max_recipients int, params_check jsonpath)`,
			`CREATE TABLE notify_recipients (id text, email text)`,
			`CREATE TABLE river_job (id bigint)`,
			`CREATE FUNCTION octet_length(text) RETURNS integer LANGUAGE sql AS 'SELECT 1000'`,
			`CREATE FUNCTION jsonb_typeof(jsonb) RETURNS text LANGUAGE sql AS $$SELECT 'boolean'$$`,
			`CREATE FUNCTION notify_input_error(text, text) RETURNS void LANGUAGE sql AS 'SELECT'`,
			`CREATE FUNCTION evil_eq(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT false'`,
			`CREATE OPERATOR = (LEFTARG = text, RIGHTARG = text, FUNCTION = evil_eq)`,
			`CREATE TEMPORARY TABLE notify_subscriptions (topic text, recipient text, reason text)`,
			// The role's schema first, then notifyd's, as an application might.
			`SET LOCAL search_path = ` + ident + `, pg_temp, ` + q,
			`SELECT * FROM ` + q + `.notify_send('comment.created', 'redirect', '["u2"]', '{"post_title": "Hi", "author_name": "Ada"}')`,
			`SELECT ` + q + `.notify_put_recipient('u2', '{"email": "ada@example.com"}')`,
			`SELECT ` + q + `.notify_subscribe('post-9', 'u3')`,
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		// A bad value is still refused: octet_length and the others are
		// pg_catalog's.
		_, err := tx.Exec(ctx, `SAVEPOINT s; SELECT `+q+`.notify_subscribe('', 'u3')`)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != "topic" {
			return fmt.Errorf("empty topic under the decoys: %v, want 22023 naming topic", err)
		}
		_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	n := servertest.Count(t, owner, `SELECT (SELECT count(*) FROM notify_notifications WHERE key = 'redirect')
		+ (SELECT count(*) FROM river_job WHERE kind = 'notify.fanout')
		+ (SELECT count(*) FROM notify_notifications WHERE batch_fanout)
		+ (SELECT count(*) FROM notify_recipients WHERE email = 'ada@example.com')
		+ (SELECT count(*) FROM notify_subscriptions WHERE topic = 'post-9')`)
	if n != 4 {
		t.Fatalf("%d rows in notifyd's tables, want 4 (notification, its job or its claim, profile, subscription)", n)
	}
	decoys := servertest.Count(t, owner, `SELECT (SELECT count(*) FROM `+ident+`.notify_notifications)
		+ (SELECT count(*) FROM `+ident+`.notify_recipients) + (SELECT count(*) FROM `+ident+`.river_job)`)
	if decoys != 0 {
		t.Fatalf("%d rows went to the role's own tables", decoys)
	}
}
