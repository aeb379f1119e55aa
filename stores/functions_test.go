package stores_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	notifysql "github.com/notifyd/notifyd/sql"
	"github.com/notifyd/notifyd/stores"
)

// Function files are repeatable migrations: a file runs when its text is new
// to the database, once, and a previous release's text (applied before)
// never replaces a newer one.
func TestFunctionFilesApplyWhenTheirTextChanges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewDB(t)

	// A migrated database has every current file applied already.
	pending, err := stores.PendingFunctions(ctx, pool, notifysql.FunctionsDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) > 0 {
		t.Fatalf("a migrated database has function files pending: %v", pending)
	}
	if applied, err := stores.ApplyFunctions(ctx, pool, notifysql.FunctionsDir()); err != nil || len(applied) > 0 {
		t.Fatalf("applying the current files again: applied %v, err %v; want nothing", applied, err)
	}

	v1 := fstest.MapFS{"notify_zz_probe.sql": {Data: []byte(
		"CREATE OR REPLACE FUNCTION notify_zz_probe() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;\n")}}
	v2 := fstest.MapFS{"notify_zz_probe.sql": {Data: []byte(
		"CREATE OR REPLACE FUNCTION notify_zz_probe() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;\n")}}
	probe := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT notify_zz_probe()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	apply := func(fsys fstest.MapFS, want []string) {
		t.Helper()
		got, err := stores.ApplyFunctions(ctx, pool, fsys)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("applied %v, want %v", got, want)
		}
	}

	if pending, _ := stores.PendingFunctions(ctx, pool, v1); !slices.Equal(pending, []string{"notify_zz_probe"}) {
		t.Fatalf("pending before the first apply: %v", pending)
	}
	apply(v1, []string{"notify_zz_probe"})
	if n := probe(); n != 1 {
		t.Fatalf("after v1: %d", n)
	}
	apply(v1, nil) // unchanged text: not run again
	apply(v2, []string{"notify_zz_probe"})
	if n := probe(); n != 2 {
		t.Fatalf("after v2: %d", n)
	}
	// A previous release's replica migrating during a rolling upgrade: its
	// text was applied before, so the newer definition stays.
	apply(v1, nil)
	if n := probe(); n != 2 {
		t.Fatalf("an older text replaced the newer definition: %d", n)
	}
	if pending, _ := stores.PendingFunctions(ctx, pool, v1); len(pending) > 0 {
		t.Fatalf("an older release sees pending functions: %v", pending)
	}

	// A file that fails applies nothing of the step: the transaction is whole.
	bad := fstest.MapFS{
		"notify_zz_a.sql": {Data: []byte("CREATE OR REPLACE FUNCTION notify_zz_a() RETURNS int LANGUAGE sql AS $$ SELECT 3 $$;\n")},
		"notify_zz_b.sql": {Data: []byte("CREATE OR REPLACE FUNCTION notify_zz_b( RETURNS int;\n")},
	}
	if _, err := stores.ApplyFunctions(ctx, pool, bad); err == nil {
		t.Fatal("a file with a syntax error applied")
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regprocedure('notify_zz_a()') IS NOT NULL").Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatal("notify_zz_a was created although notify_zz_b failed in the same step")
	}
}

// CheckMigrations refuses a database whose functions are older than the
// binary's files.
func TestCheckMigrationsNamesPendingFunctions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewDB(t)
	if err := stores.CheckMigrations(ctx, pool, ""); err != nil {
		t.Fatalf("freshly migrated: %v", err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM notify_function_files WHERE name = 'notify_send'"); err != nil {
		t.Fatal(err)
	}
	err := stores.CheckMigrations(ctx, pool, "")
	if !errors.Is(err, stores.ErrPendingMigrations) {
		t.Fatalf("CheckMigrations = %v, want ErrPendingMigrations", err)
	}
	if want := "notify_send"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("CheckMigrations = %v, want it to name %s", err, want)
	}
	if err := stores.Migrate(ctx, pool, "", nil); err != nil {
		t.Fatal(err)
	}
	if err := stores.CheckMigrations(ctx, pool, ""); err != nil {
		t.Fatalf("after migrate: %v", err)
	}
}
