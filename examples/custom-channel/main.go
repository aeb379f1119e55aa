// Command custom-channel embeds the whole notifyd daemon in a program of its
// own and registers a channel notifyd does not ship: console, which writes
// one JSON line per message to a file (package console). It is the pattern
// for adding SMS, Teams or an in-house push service without forking notifyd.
//
//	go run ./examples/custom-channel -config examples/custom-channel/config.yaml
//
// It migrates the database, then serves notifyd's HTTP API and runs its
// workers until SIGINT or SIGTERM, draining like `notifyd run`.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/examples/custom-channel/console"
	"github.com/notifyd/notifyd/server"
)

func main() {
	path := flag.String("config", "examples/custom-channel/config.yaml", "notifyd config with a channels.console section")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, *path, logger); err != nil {
		fmt.Fprintln(os.Stderr, "custom-channel:", err)
		os.Exit(1)
	}
}

// plugins are the channels this program adds to the built-in ones.
var plugins = []channels.Plugin{console.Plugin}

func run(ctx context.Context, path string, logger *slog.Logger) error {
	// LoadConfig checks every section, console's included, with file:line.
	cfg, err := server.LoadConfig(path, plugins...)
	if err != nil {
		return err
	}
	pool, err := server.OpenPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := server.Migrate(ctx, cfg, pool, logger); err != nil {
		return err
	}
	srv, err := server.New(ctx, server.Options{Config: cfg, Pool: pool, Logger: logger, Channels: plugins})
	if err != nil {
		return err
	}
	defer srv.Close()
	logger.Info("custom-channel: notifyd with a console channel", "http", srv.Addr())
	return srv.Run(ctx)
}
