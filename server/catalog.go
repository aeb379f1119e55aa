package server

// The notifier catalog: the notifiers of a config, the fan-out job's
// definition and the HTTP API's size limits, which the SQL functions (notify_send and the others,
// docs/sql-enqueue.md) read. `notifyd migrate` and every daemon start
// publish it.

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/stores"
)

// catalogOf returns the catalog of cfg: its notifiers, and the fan-out job as
// jobs.FanoutArgs declares it, with River's defaults for what the
// declaration leaves unset (the hand-written insert in notify_enqueue must
// write what River's own InsertTx would). Each notifier carries the part of
// its params schema notify_send checks at enqueue, compiled here, once per
// publish, so no call parses a schema.
func catalogOf(cfg *config.Config) (stores.Catalog, error) {
	var c stores.Catalog
	for _, name := range cfg.NotifierNames() {
		nf, _ := cfg.Notifier(name)
		check, err := stores.CompileParamsCheck(nf.Params)
		if err != nil {
			return stores.Catalog{}, fmt.Errorf("notifier %s: %w", name, err)
		}
		c.Notifiers = append(c.Notifiers, stores.CatalogNotifier{Name: name, Category: nf.Category,
			MaxRecipients: nf.MaxRecipients, Params: check, Audience: nf.Audience != nil})
	}
	// The HTTP API's size limits, which the SQL API enforces too.
	c.Limits = stores.Limits{MaxTopics: cfg.HTTP.MaxTopics, MaxBody: cfg.HTTP.MaxBody}
	args := jobs.FanoutArgs{}
	opts := args.InsertOpts()
	c.Fanout = stores.FanoutJob{Kind: args.Kind(), Queue: opts.Queue, MaxAttempts: opts.MaxAttempts,
		Priority: opts.Priority}
	if c.Fanout.Queue == "" {
		c.Fanout.Queue = river.QueueDefault
	}
	if c.Fanout.MaxAttempts == 0 {
		c.Fanout.MaxAttempts = river.MaxAttemptsDefault
	}
	if c.Fanout.Priority == 0 {
		c.Fanout.Priority = river.PriorityDefault
	}
	return c, nil
}

// PublishCatalog upserts cfg's notifier catalog, which the SQL functions read:
// notifiers new in cfg are added, changed ones updated, and none removed. New
// does it at every start: a replica of an older config that starts during a
// rolling deploy must not remove what a newer config added. Migrate makes the
// catalog exactly cfg's. A nil logger discards.
func PublishCatalog(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, logger *slog.Logger) error {
	return publishCatalog(ctx, pool, cfg, false, logger)
}

// syncCatalog is PublishCatalog that also removes the notifiers cfg no longer
// declares: `notifyd migrate`, the deploy's own step, makes the catalog
// exactly cfg's.
func syncCatalog(ctx context.Context, db stores.DB, cfg *config.Config, logger *slog.Logger) error {
	return publishCatalog(ctx, db, cfg, true, logger)
}

func publishCatalog(ctx context.Context, db stores.DB, cfg *config.Config, prune bool, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c, err := catalogOf(cfg)
	if err != nil {
		return fmt.Errorf("publish catalog: %w", err)
	}
	var changed int
	var removed []string
	err = stores.RetryDeadlock(func() error {
		var err error
		changed, removed, err = stores.PublishCatalog(ctx, db, c, prune)
		return err
	})
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, "published notifier catalog", "notifiers", len(c.Notifiers), "changed", changed,
		"removed", removed)
	return nil
}
