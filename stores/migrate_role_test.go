package stores_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/pgcluster"
	"github.com/notifyd/notifyd/stores"
)

// A migrating role that may not create roles migrates all the same, and
// says what a superuser runs; once they ran it, an application role granted
// notifyd_app uses the SQL API. Roles belong to the server, so this runs on
// a private server of its own, where notifyd_app does not exist yet.
func TestMigrateWithoutCreateRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: t.TempDir(), Tuned: true})
	if err != nil {
		t.Fatalf("a private PostgreSQL server: %v", err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Error(err)
		}
	})
	open := func(db, user string) *pgxpool.Pool {
		u, err := url.Parse(cluster.URL(db))
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			u.User = url.UserPassword(user, "pw")
		}
		pool, err := pgxpool.New(ctx, u.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	super := open("postgres", "")
	for _, sql := range []string{
		`CREATE ROLE migrator LOGIN PASSWORD 'pw' NOCREATEROLE`,
		`CREATE ROLE app LOGIN PASSWORD 'pw'`,
		`CREATE DATABASE notifyd OWNER migrator`,
	} {
		if _, err := super.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	var log bytes.Buffer
	migrate := func() []map[string]any {
		log.Reset()
		pool := open("notifyd", "migrator")
		defer pool.Close()
		logger := slog.New(slog.NewJSONHandler(&log, nil))
		if err := stores.Migrate(ctx, pool, "", logger); err != nil {
			t.Fatalf("migrate without CREATEROLE: %v", err)
		}
		var warnings []map[string]any
		sc := bufio.NewScanner(&log)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line map[string]any
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			if line["level"] == "WARN" {
				warnings = append(warnings, line)
			}
		}
		return warnings
	}
	warnings := migrate()
	if len(warnings) != 1 || !strings.Contains(warnings[0]["msg"].(string), "role notifyd_app does not exist") {
		t.Fatalf("warnings %v, want one saying notifyd_app does not exist", warnings)
	}
	statements, _ := warnings[0]["statements"].(string)
	for _, want := range []string{"CREATE ROLE notifyd_app NOLOGIN;", `GRANT USAGE ON SCHEMA public TO notifyd_app;`,
		"GRANT EXECUTE ON FUNCTION public.notify_send(notifier text, key text, recipients jsonb",
		"GRANT EXECUTE ON FUNCTION public.notify_put_recipient(id text, profile jsonb) TO notifyd_app;"} {
		if !strings.Contains(statements, want) {
			t.Errorf("statements %q lack %q", statements, want)
		}
	}
	var roles int
	if err := super.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname = 'notifyd_app'`).Scan(&roles); err != nil || roles != 0 {
		t.Fatalf("%d roles notifyd_app (%v)", roles, err)
	}

	// A superuser runs the statements, as printed, on the database; the
	// application's role is granted the role.
	admin := open("notifyd", "")
	if _, err := admin.Exec(ctx, statements+" GRANT notifyd_app TO app;"); err != nil {
		t.Fatalf("the printed statements: %v", err)
	}
	app := open("notifyd", "app")
	var created bool
	if err := app.QueryRow(ctx, `SELECT notify_subscribe('post-9', 'u1')`).Scan(&created); err != nil || !created {
		t.Fatalf("notify_subscribe as the application's role = %v, %v", created, err)
	}
	if _, err := app.Exec(ctx, `SELECT count(*) FROM notify_subscriptions`); err == nil {
		t.Fatal("the application's role reads notify_subscriptions")
	}

	// With the role there, migrate has nothing to say.
	if warnings := migrate(); len(warnings) != 0 {
		t.Fatalf("second migrate warned %v", warnings)
	}
	var granted bool
	err = admin.QueryRow(ctx, `SELECT has_function_privilege('notifyd_app', 'notify_cancel(text, text)', 'EXECUTE')`).Scan(&granted)
	if err != nil || !granted {
		t.Fatalf("notifyd_app EXECUTE on notify_cancel: %v, %v", granted, err)
	}
}
