package stores

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	notifysql "github.com/notifyd/notifyd/sql"
)

// migrateLockKey is the advisory lock every `notifyd migrate` holds while it
// migrates, so two replicas starting at once apply each migration once.
const migrateLockKey = 7342001

// gooseTable records notifyd's own applied migrations (River keeps its own
// river_migration table).
const gooseTable = "notify_schema_migrations"

// ErrPendingMigrations is returned by CheckMigrations when the database is behind
// this binary. Run `notifyd migrate`.
var ErrPendingMigrations = errors.New("database has pending migrations")

// Migrate applies notifyd's and River's migrations to the pool's database, in
// the given schema ("" means the connection's search_path, normally public),
// then every function file whose text the database has not run yet (see
// notify_function_files), then secures the privileges. It is idempotent and safe to
// run from several processes at once: it holds a session advisory lock for
// the whole run.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	if schema != "" {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("migrate: create schema %s: %w", schema, err)
		}
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("migrate: take advisory lock: %w", err)
	}
	defer func() {
		// A fresh context: the unlock must run even when ctx was cancelled.
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrateLockKey)
	}()

	provider, closeDB, err := gooseProvider(pool, logger)
	if err != nil {
		return err
	}
	defer closeDB()
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: notifyd tables: %w", err)
	}
	for _, r := range results {
		logger.InfoContext(ctx, "applied migration", "source", "notifyd", "version", r.Source.Version, "duration", r.Duration)
	}

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return fmt.Errorf("migrate: river: %w", err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("migrate: river tables: %w", err)
	}
	for _, v := range res.Versions {
		logger.InfoContext(ctx, "applied migration", "source", "river", "version", v.Version, "duration", v.Duration)
	}
	applied, err := applyFunctions(ctx, conn, notifysql.FunctionsDir())
	if err != nil {
		return err
	}
	logAppliedFunctions(ctx, logger, applied)
	return grantAppRole(ctx, conn, logger)
}

// AppRole is the role `notifyd migrate` creates (NOLOGIN) unless it exists,
// and grants USAGE on notifyd's schema and EXECUTE on the SQL API's five
// functions (AppFunctions) and nothing else. An application's role that is
// granted it (GRANT notifyd_app TO app) can send, cancel, subscribe,
// unsubscribe and write profiles in its own transactions, and can read or
// write no notifyd table. Roles belong to the server, not to a database: every
// notifyd database and schema on a server shares the one role.
const AppRole = "notifyd_app"

// AppFunctions are the functions of the SQL API, which AppRole may execute
// (every overload of each). Every other notify_* function is closed to PUBLIC.
var AppFunctions = []string{"notify_send", "notify_cancel", "notify_subscribe", "notify_unsubscribe", "notify_put_recipient"}

// appRoleStateSQL reads what grantAppRole decides on: the schema, whether
// the role exists, whether the migrating role may create it, and whether
// PUBLIC may create objects in the schema (where the API functions resolve
// their names).
const appRoleStateSQL = `
SELECT current_schema(),
       EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'notifyd_app'),
       coalesce((SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user), false),
       has_schema_privilege('public', current_schema(), 'CREATE')`

const createAppRoleSQL = `CREATE ROLE notifyd_app NOLOGIN`

// securePrivilegesSQL closes every notify_* function of the schema to
// PUBLIC (CREATE FUNCTION grants PUBLIC EXECUTE: the migrations revoke it
// for what they create, and this catches what they missed), takes every
// privilege PUBLIC holds on notifyd's and River's tables and sequences, and,
// when notifyd_app exists, grants it USAGE on the schema and EXECUTE on the
// SQL API. It is idempotent: every migrate runs it.
const securePrivilegesSQL = `
DO $$
DECLARE
    f regprocedure;
    r regclass;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p
             WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'notify\_%'
               AND has_function_privilege('public', p.oid, 'EXECUTE') LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
    FOR r IN SELECT c.oid FROM pg_class c
             WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')
               AND (c.relname LIKE 'notify\_%' OR c.relname LIKE 'river\_%')
               AND EXISTS (SELECT 1 FROM aclexplode(c.relacl) a WHERE a.grantee = 0) LOOP
        EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', r);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'notifyd_app') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO notifyd_app', current_schema());
        FOR f IN SELECT p.oid FROM pg_proc p
                 WHERE p.pronamespace = current_schema()::regnamespace
                   AND p.proname IN ('notify_send', 'notify_cancel', 'notify_subscribe', 'notify_unsubscribe',
                                     'notify_put_recipient') LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO notifyd_app', f);
        END LOOP;
    END IF;
END
$$`

// appRoleStatementsSQL lists what a superuser runs when the migrating role
// may not create roles: the role, then the grants securePrivilegesSQL makes.
const appRoleStatementsSQL = `
SELECT 'CREATE ROLE notifyd_app NOLOGIN;'
UNION ALL
SELECT format('GRANT USAGE ON SCHEMA %I TO notifyd_app;', current_schema())
UNION ALL
(SELECT format('GRANT EXECUTE ON FUNCTION %I.%I(%s) TO notifyd_app;', current_schema(), p.proname,
               pg_get_function_identity_arguments(p.oid))
 FROM pg_proc p
 WHERE p.pronamespace = current_schema()::regnamespace
   AND p.proname IN ('notify_send', 'notify_cancel', 'notify_subscribe', 'notify_unsubscribe', 'notify_put_recipient')
 ORDER BY p.proname, p.oid)`

// grantAppRole creates AppRole unless it exists and secures the schema's
// privileges (securePrivilegesSQL). Where the migrating role may not create
// roles, the migration does not fail for it: the SQL API is then granted to
// no role, and a warning says so with the statements a superuser runs (or
// only the CREATE ROLE, then migrate again).
func grantAppRole(ctx context.Context, conn *pgxpool.Conn, logger *slog.Logger) error {
	var schema string
	var exists, canCreate, publicCreate bool
	if err := conn.QueryRow(ctx, appRoleStateSQL).Scan(&schema, &exists, &canCreate, &publicCreate); err != nil {
		return fmt.Errorf("migrate: read roles: %w", err)
	}
	if !exists && canCreate {
		_, err := conn.Exec(ctx, createAppRoleSQL)
		var pgErr *pgconn.PgError
		// Another database of the server, migrating at the same time, may
		// have created it first.
		if err != nil && !(errors.As(err, &pgErr) && (pgErr.Code == "42710" || pgErr.Code == "23505")) {
			return fmt.Errorf("migrate: create role %s: %w", AppRole, err)
		}
		if err == nil {
			logger.InfoContext(ctx, "created role", "role", AppRole)
		}
		exists = true
	}
	if _, err := conn.Exec(ctx, securePrivilegesSQL); err != nil {
		return fmt.Errorf("migrate: grant the SQL API to %s: %w", AppRole, err)
	}
	if !exists {
		rows, err := conn.Query(ctx, appRoleStatementsSQL)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		statements, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		logger.WarnContext(ctx, "role "+AppRole+" does not exist and this role may not create roles (no CREATEROLE): "+
			"the SQL API is granted to no role. Ask a superuser to run the statements below once, "+
			"or only the CREATE ROLE and then `notifyd migrate` again; the migration itself is complete",
			"role", AppRole, "schema", schema, "statements", strings.Join(statements, " "))
	}
	if publicCreate {
		logger.WarnContext(ctx, "any role may create objects in schema "+schema+", where notifyd's SQL API functions "+
			"look up their tables and functions: a role could shadow them. Revoke it (PostgreSQL 15's default): "+
			"REVOKE CREATE ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" FROM PUBLIC", "schema", schema)
	}
	return nil
}

// CheckMigrations returns ErrPendingMigrations (wrapped, naming what is pending)
// when notifyd's or River's migrations are not all applied.
func CheckMigrations(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	provider, closeDB, err := gooseProvider(pool, nil)
	if err != nil {
		return err
	}
	defer closeDB()
	current, target, err := provider.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("check migrations: %w", err)
	}
	if current < target {
		return fmt.Errorf("%w: notifyd schema at version %d of %d", ErrPendingMigrations, current, target)
	}
	pending, err := pendingFunctions(ctx, pool, notifysql.FunctionsDir())
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return fmt.Errorf("%w: notifyd functions not yet applied: %s", ErrPendingMigrations, strings.Join(pending, ", "))
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return fmt.Errorf("check migrations: river: %w", err)
	}
	res, err := migrator.Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("check migrations: river: %w", err)
	}
	if !res.OK {
		return fmt.Errorf("%w: river: %v", ErrPendingMigrations, res.Messages)
	}
	return nil
}

func gooseProvider(pool *pgxpool.Pool, logger *slog.Logger) (*goose.Provider, func(), error) {
	db := stdlib.OpenDBFromPool(pool)
	opts := []goose.ProviderOption{goose.WithTableName(gooseTable), goose.WithDisableGlobalRegistry(true)}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, notifysql.MigrationsDir(), opts...)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrate: load notifyd migrations: %w", err)
	}
	return provider, func() { db.Close() }, nil
}
