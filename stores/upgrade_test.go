package stores_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	notifysql "github.com/notifyd/notifyd/sql"
	"github.com/notifyd/notifyd/stores"
)

// previousReleaseVersion is the release before this one (CHANGELOG.md), and
// previousRelease its last migration: notifyd 0.3.0's database ends at 00022,
// the last migration before the SQL API ran as its owner (00023). Move both
// on when a release is made.
const (
	previousReleaseVersion = "0.3.0"
	previousRelease        = 22
)

// TestPreviousReleaseInChangelog keeps the changelog's account of the previous
// release's database the one this upgrade test starts from.
func TestPreviousReleaseInChangelog(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## ["+previousReleaseVersion+"]")
	if !ok {
		t.Fatalf("CHANGELOG.md has no section for %s", previousReleaseVersion)
	}
	section, _, _ = strings.Cut(section, "\n## [")
	if want := fmt.Sprintf("migration %05d", previousRelease); !strings.Contains(section, want) {
		t.Fatalf("CHANGELOG.md's %s section does not say %q", previousReleaseVersion, want)
	}
}

// latestMigration is the highest migration version this binary holds.
func latestMigration(t *testing.T) int64 {
	t.Helper()
	names, err := fs.Glob(notifysql.MigrationsDir(), "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("migrations: %v", err)
	}
	v, err := strconv.ParseInt(strings.SplitN(slices.Max(names), "_", 2)[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// schemaPool returns a pool on a fresh database whose connections' search_path
// is schema alone (created), as server.OpenPool makes it for database.schema.
func schemaPool(t *testing.T, schema string) *pgxpool.Pool {
	t.Helper()
	_, dbURL := pgtest.NewDBURL(t)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return pool
}

// tableRows is every row of every notifyd table (partitioned ones through
// their parent), as JSON, by table.
func tableRows(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND c.relname LIKE 'notify\_%' AND c.relname NOT IN ('notify_schema_migrations', 'notify_function_files')`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, table := range tables {
		var v string
		err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY to_jsonb(t)::text), '[]')::text FROM %s t`,
			pgx.Identifier{table}.Sanitize())).Scan(&v)
		if err != nil {
			t.Fatal(err)
		}
		out[table] = v
	}
	return out
}

// A database created by the previous release, in a schema of its own and
// holding data (a notification with its deliveries and inbox items, a
// profile, preferences, a subscription), migrates to this release: every
// row is kept, each migration from 00023 on leaves no notify_* function
// executable by PUBLIC, the SQL API is notifyd_app's, pinned to that schema,
// and works on the old rows.
func TestUpgradeFromThePreviousRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const schema = "old_release"
	pool := schemaPool(t, schema)

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	if err := stores.MigrateTo(ctx, pool, previousRelease); err != nil {
		t.Fatalf("the database of %s (migration %05d): %v", previousReleaseVersion, previousRelease, err)
	}

	// The previous release's data, written as it wrote it.
	for _, sql := range []string{
		`INSERT INTO notify_notifiers (name, category, max_recipients) VALUES ('comment.created', 'comments', 100)`,
		`SELECT notify_send('comment.created', 'c-1', '["u1", {"id": "u2", "reason": "author"}]', '{"post_title": "Hi"}', '{post-9}', 'u3')`,
		`INSERT INTO notify_deliveries (id, notification_id, notifier, key, recipient, channel, mode, status)
		 SELECT notify_uuidv7(), n.id, n.notifier, n.key, r, 'email', 'immediate', 'pending'
		 FROM notify_notifications n, unnest(n.recipients) r`,
		`INSERT INTO notify_inbox (id, notification_id, recipient, notifier, key, title)
		 SELECT notify_uuidv7(), n.id, r, n.notifier, n.key, 'u3 commented on Hi'
		 FROM notify_notifications n, unnest(n.recipients) r`,
		`UPDATE notify_notifications SET status = 'fanned_out'`,
		`INSERT INTO notify_recipients (id, email, name, timezone, data, quiet_hours, tokens_valid_after)
		 VALUES ('u1', 'ada@example.com', 'Ada', 'Europe/Paris', '{"plan": "pro"}', '{"start": "22:00", "end": "07:00"}', '2024-01-01Z')`,
		`INSERT INTO notify_preferences (recipient, scope, channel, mode) VALUES ('u1', '*', 'email', 'digest')`,
		`SELECT notify_subscribe('post-9', 'u1', 'commented')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	before := tableRows(t, pool)

	publicExecute := func() []string {
		rows, err := pool.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'notify\_%'
  AND has_function_privilege('public', p.oid, 'EXECUTE') ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	for v := int64(previousRelease + 1); v <= latestMigration(t); v++ {
		if err := stores.MigrateTo(ctx, pool, v); err != nil {
			t.Fatalf("upgrade from %s, migration %05d: %v", previousReleaseVersion, v, err)
		}
		// CREATE FUNCTION grants EXECUTE to PUBLIC: a migration that
		// creates one revokes it itself.
		if open := publicExecute(); len(open) > 0 {
			t.Errorf("after migration %05d, PUBLIC may execute %v", v, open)
		}
	}
	if err := stores.Migrate(ctx, pool, schema, nil); err != nil {
		t.Fatal(err)
	}

	after := tableRows(t, pool)
	// The columns migrations after the previous release add to its tables,
	// and the value every existing row has.
	newColumns := map[string]map[string]any{
		// NULL until the catalog is next published; audience false until then.
		"notify_notifiers":     {"params_schema": nil, "params_check": nil, "audience": false},
		"notify_deliveries":    {"claimed_by": nil, "tenant": nil, "provider_message_id": nil}, // claimed_by: set by the next claim
		"notify_notifications": {"tenant": nil, "batch_fanout": false},                         // tenant: rows sent without one; each has its River job
		"notify_inbox":         {"tenant": nil},
	}
	for table, rows := range after {
		// A table a later migration adds starts empty, but for the API's
		// limits, which start at the config's defaults.
		if table == "notify_api_limits" {
			if !strings.Contains(rows, `"max_body": 1048576`) || !strings.Contains(rows, `"max_topics": 100`) {
				t.Errorf("new table %s holds %s, want the defaults", table, rows)
			}
			continue
		}
		if _, old := before[table]; !old && rows != "[]" {
			t.Errorf("new table %s holds %s", table, rows)
		}
	}
	for table, rows := range before {
		got, ok := after[table]
		if !ok {
			t.Errorf("table %s is gone", table)
			continue
		}
		if cols := newColumns[table]; len(cols) > 0 {
			// Columns later migrations add: their value in every existing row.
			var rs []map[string]any
			if err := json.Unmarshal([]byte(got), &rs); err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				for c, want := range cols {
					if r[c] != want {
						t.Errorf("%s: new column %s is %v in %v, want %v", table, c, r[c], r, want)
					}
					delete(r, c)
				}
			}
			b, _ := json.Marshal(rs)
			var want []map[string]any
			_ = json.Unmarshal([]byte(rows), &want)
			w, _ := json.Marshal(want)
			got, rows = string(b), string(w)
		}
		if got != rows {
			t.Errorf("%s changed:\nbefore %s\nafter  %s", table, rows, got)
		}
	}

	// The API functions are the owner's, pinned to this schema, and
	// notifyd_app's.
	var pinned, granted int
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE p.prosecdef AND p.proconfig = ARRAY['search_path=old_release, pg_catalog, pg_temp']),
       count(*) FILTER (WHERE has_function_privilege('notifyd_app', p.oid, 'EXECUTE'))
FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace
  AND p.proname IN ('notify_send', 'notify_cancel', 'notify_subscribe', 'notify_unsubscribe', 'notify_put_recipient')`).
		Scan(&pinned, &granted)
	if err != nil || pinned != 7 || granted != 7 {
		t.Fatalf("%d API functions pinned to %s, %d granted to notifyd_app (%v); want 7 (two notify_send, two notify_cancel)", pinned, schema, granted, err)
	}
	var usage bool
	if err := pool.QueryRow(ctx, `SELECT has_schema_privilege('notifyd_app', current_schema(), 'USAGE')`).Scan(&usage); err != nil || !usage {
		t.Fatalf("notifyd_app USAGE on %s: %v, %v", schema, usage, err)
	}

	// The new functions on the old rows: a partial profile write keeps the
	// rest; a cancel withdraws the old notification's deliveries and items;
	// a send is checked against the republished catalog.
	if _, err := pool.Exec(ctx, `SELECT notify_put_recipient('u1', '{"name": "Ada L."}')`); err != nil {
		t.Fatal(err)
	}
	var profile string
	if err := pool.QueryRow(ctx, `SELECT concat_ws(' ', email, name, timezone, data, quiet_hours, tokens_valid_after AT TIME ZONE 'UTC')
FROM notify_recipients WHERE id = 'u1'`).Scan(&profile); err != nil {
		t.Fatal(err)
	}
	if want := `ada@example.com Ada L. Europe/Paris {"plan": "pro"} {"end": "07:00", "start": "22:00"} 2024-01-01 00:00:00`; profile != want {
		t.Fatalf("profile %q, want %q", profile, want)
	}
	var withdrawn int
	if err := pool.QueryRow(ctx, `SELECT notify_cancel('comment.created', 'c-1')`).Scan(&withdrawn); err != nil || withdrawn != 4 {
		t.Fatalf("notify_cancel = %d, %v; want 4 (2 deliveries, 2 items)", withdrawn, err)
	}
	check, err := stores.CompileParamsCheck(decode(t, `{"type": "object", "required": ["post_title"]}`).(map[string]any))
	if err != nil {
		t.Fatal(err)
	}
	c := stores.Catalog{Fanout: stores.FanoutJob{Kind: "notify.fanout", Queue: "fanout", MaxAttempts: 25, Priority: 1},
		Notifiers: []stores.CatalogNotifier{{Name: "comment.created", Category: "comments", MaxRecipients: 100, Params: check}}}
	if _, _, err := stores.PublishCatalog(ctx, pool, c, true); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT notify_send('comment.created', 'c-2', '["u1"]', '{}')`); err == nil ||
		!strings.Contains(err.Error(), "comment.created: params /post_title: missing required property") {
		t.Fatalf("notify_send without post_title: %v", err)
	}
	if _, err := pool.Exec(ctx, `SELECT notify_send('comment.created', 'c-2', '["u1"]', '{"post_title": "Hi"}')`); err != nil {
		t.Fatal(err)
	}

	// What the migrations install in this schema is what a fresh install
	// has in public (sql/functions/ holds it), but for the schema's name.
	fresh := pgtest.NewDB(t)
	defs := func(pool *pgxpool.Pool) map[string]string {
		rows, err := pool.Query(ctx, `SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'notify\_%'`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		var sig, def string
		if _, err := pgx.ForEachRow(rows, []any{&sig, &def}, func() error { out[sig] = def; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want, got := defs(fresh), defs(pool)
	if len(want) != len(got) {
		t.Fatalf("%d functions in %s, %d in a fresh install", len(got), schema, len(want))
	}
	for sig, def := range want {
		if g := strings.ReplaceAll(got[sig], schema, "public"); g != def {
			t.Errorf("%s differs from a fresh install:\n%s\nwant\n%s", sig, g, def)
		}
	}
}
