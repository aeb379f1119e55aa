package stores

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
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
// the given schema ("" means the connection's search_path, normally public). It
// is idempotent and safe to run from several processes at once: it holds a
// session advisory lock for the whole run.
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
