package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/stores"
)

func TestMain(m *testing.M) { Main(m) }

func tableExists(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table string) bool {
	t.Helper()
	var exists bool
	if err := q.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestNewDBIsMigrated(t *testing.T) {
	t.Parallel()
	pool := NewDB(t)
	for _, table := range []string{"notify_notifications", "notify_deliveries", "river_job"} {
		if !tableExists(t, pool, table) {
			t.Errorf("table %s missing from a NewDB database", table)
		}
	}
	if err := stores.CheckMigrations(t.Context(), pool, ""); err != nil {
		t.Errorf("CheckMigrations: %v", err)
	}
}

func TestNewDBsAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := NewDB(t), NewDB(t)
	var nameA, nameB string
	if err := a.QueryRow(ctx, "SELECT current_database()").Scan(&nameA); err != nil {
		t.Fatal(err)
	}
	if err := b.QueryRow(ctx, "SELECT current_database()").Scan(&nameB); err != nil {
		t.Fatal(err)
	}
	if nameA == nameB {
		t.Fatalf("two NewDB calls share database %s", nameA)
	}
	if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (v int); INSERT INTO notify_recipients (id) VALUES ('only-in-a')"); err != nil {
		t.Fatal(err)
	}
	if tableExists(t, b, "only_in_a") {
		t.Error("a table created in one NewDB database shows in another")
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM notify_recipients").Scan(&n); err != nil || n != 0 {
		t.Errorf("recipients in the other database: %d, %v; want 0", n, err)
	}
}

func TestNewDBIsDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("use", func(t *testing.T) {
		if err := NewDB(t).QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	var exists bool
	if err := srv.admin.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s still exists after its test's cleanup", name)
	}
}

func TestNewDBURL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, dbURL := NewDBURL(t)
	var fromPool string
	if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&fromPool); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var fromURL string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&fromURL); err != nil {
		t.Fatal(err)
	}
	if fromURL != fromPool {
		t.Errorf("URL names database %s, pool is on %s", fromURL, fromPool)
	}
}

func TestTxRollsBack(t *testing.T) {
	t.Parallel()
	table := fmt.Sprintf("tx_probe_%d", os.Getpid())
	t.Run("write", func(t *testing.T) {
		tx := Tx(t)
		if _, err := tx.Exec(t.Context(), "CREATE TABLE "+table+" (v int); INSERT INTO notify_recipients (id) VALUES ('tx-probe')"); err != nil {
			t.Fatal(err)
		}
		if !tableExists(t, tx, table) {
			t.Fatal("the transaction does not see its own table")
		}
	})
	tx := Tx(t)
	if tableExists(t, tx, table) {
		t.Error("a table created in a Tx survived its test")
	}
	var n int
	if err := tx.QueryRow(t.Context(), "SELECT count(*) FROM notify_recipients WHERE id = 'tx-probe'").Scan(&n); err != nil || n != 0 {
		t.Errorf("rows left by a Tx: %d, %v; want 0", n, err)
	}
}

func TestTxIsMigrated(t *testing.T) {
	t.Parallel()
	tx := Tx(t)
	for _, table := range []string{"notify_notifications", "river_job"} {
		if !tableExists(t, tx, table) {
			t.Errorf("table %s missing from the Tx database", table)
		}
	}
}

func TestTemplateIsRebuiltWhenMigrationsChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if err := server(); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("notifyd_template_test_%d", os.Getpid())
	t.Cleanup(func() {
		if err := dropDatabase(name); err != nil {
			t.Error(err)
		}
	})
	oid := func() (oid uint32, comment string) {
		t.Helper()
		if err := srv.admin.QueryRow(ctx, "SELECT oid, shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", name).Scan(&oid, &comment); err != nil {
			t.Fatal(err)
		}
		return oid, comment
	}

	if err := buildTemplate(ctx, srv.admin, srv.url, name, "hash-1"); err != nil {
		t.Fatal(err)
	}
	first, comment := oid()
	if comment != "hash-1" {
		t.Fatalf("template comment = %q, want hash-1", comment)
	}
	if err := buildTemplate(ctx, srv.admin, srv.url, name, "hash-1"); err != nil {
		t.Fatal(err)
	}
	if again, _ := oid(); again != first {
		t.Error("a template with the current hash was rebuilt")
	}
	if err := buildTemplate(ctx, srv.admin, srv.url, name, "hash-2"); err != nil {
		t.Fatal(err)
	}
	if rebuilt, comment := oid(); rebuilt == first || comment != "hash-2" {
		t.Errorf("after a migration change: oid %d (was %d), comment %q; want a new template with hash-2", rebuilt, first, comment)
	}
}

func TestMigrationsHashIsStable(t *testing.T) {
	t.Parallel()
	a, err := migrationsHash()
	if err != nil {
		t.Fatal(err)
	}
	b, err := migrationsHash()
	if err != nil {
		t.Fatal(err)
	}
	if a != b || !strings.Contains(a, "sha256:") {
		t.Errorf("migrationsHash() = %q then %q", a, b)
	}
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"postgres://u:p@db:5432/app?sslmode=disable", "postgres://u:p@db:5432/other?sslmode=disable"},
		{"postgres://postgres@/postgres?host=%2Ftmp%2Fx&port=5432", "postgres://postgres@/other?host=%2Ftmp%2Fx&port=5432"},
		{"postgresql:///app?host=/run/pg&dbname=app", "postgresql:///other?host=%2Frun%2Fpg"},
		{"host=/tmp/x user=postgres dbname=app", "host=/tmp/x user=postgres dbname=app dbname='other'"},
	}
	for _, tt := range tests {
		got, err := withDatabase(tt.in, "other")
		if err != nil || got != tt.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://u:secret@db/app", "postgres://u:xxxxx@db/app"},
		{"host=db password=secret dbname=app", "host=db password=xxxxx dbname=app"},
		{"host=db password='se cret' dbname=app", "host=db password=xxxxx dbname=app"},
	}
	for _, tt := range tests {
		if got := redact(tt.in); got != tt.want || strings.Contains(got, "secret") {
			t.Errorf("redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Under CI a missing TEST_DATABASE_URL must fail the package, never skip it.
func TestMainFailsInCIWithoutDatabase(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWithDatabase$", "-test.count=1")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvURL+"=") && !strings.HasPrefix(kv, "CI=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "CI=true")
	out, err := cmd.CombinedOutput()
	exitErr, ok := err.(*exec.ExitError)
	if !ok || exitErr.ExitCode() != 1 {
		t.Fatalf("test binary under CI=true without %s: err = %v, want exit status 1\n%s", EnvURL, err, out)
	}
	if !strings.Contains(string(out), EnvURL+" is not set") {
		t.Errorf("output does not say why:\n%s", out)
	}
}
