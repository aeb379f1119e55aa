package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/notifyd/notifyd/internal/version"
)

// VersionCommand prints the release version, the commit the binary was built
// from and the Go toolchain: "notifyd 0.4.0 (commit 4a05341…, go1.26.8)".
// /readyz reports the same version.
type VersionCommand struct{ main *Main }

// Run prints the version line.
func (c *VersionCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(c.main.Stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version takes no arguments: %w", errUsage)
	}
	fmt.Fprintln(c.main.Stdout, version.Read())
	return nil
}
