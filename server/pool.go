package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/config"
)

// OpenPool connects to cfg.Database.URL with the search_path set to the
// configured schema (so notify_* and river_* resolve there) and a pool sized
// for the configured workers.
func OpenPool(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	if cfg.Database.URL == "" {
		return nil, errors.New("database.url is empty: set it (or DATABASE_URL), or use `notifyd dev` for a private PostgreSQL")
	}
	return openPool(ctx, cfg, "database.url", cfg.Database.URL, true)
}

// openReadPool connects to the read replica, cfg.Database.ReadURL, the way
// OpenPool connects to the primary, with a pool of the same size. It does
// not wait for the standby to answer: a standby that is down at start-up
// only keeps the reads on the primary until it is up (readRouter).
func openReadPool(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	return openPool(ctx, cfg, "database.read_url", cfg.Database.ReadURL, false)
}

func openPool(ctx context.Context, cfg *config.Config, key, url string, ping bool) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if s := cfg.Database.SearchSchema(); s != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{s}.Sanitize()
	}
	if cfg.Database.MaxConns > 0 {
		pc.MaxConns = int32(cfg.Database.MaxConns)
	} else if !strings.Contains(url, "pool_max_conns") {
		q := cfg.Queues
		// Send workers hold a connection only to claim and settle, never across
		// a provider call: a quarter of them is plenty. Digest workers share
		// grouped claims and settles (one of each in flight) and claim alone
		// only to resend: a sixteenth of them, plus the two. Two replicas
		// with the defaults (39 each, plus LISTEN connections) fit
		// PostgreSQL's default max_connections of 100.
		pc.MaxConns = int32(min(100, 10+q.Fanout+2+(q.Digest+15)/16+q.Maintenance+(q.Send+3)/4))
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect (%s): %w", key, err)
	}
	if !ping {
		return pool, nil
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}
