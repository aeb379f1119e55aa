package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/notifyd/notifyd/cmd/notifyd/internal/gentypes"
	"github.com/notifyd/notifyd/server"
)

// GenCommand is `notifyd gen types`: the params type of every notifier of
// the config, in TypeScript, Python, Go or RBS (Ruby), for the application's type
// checker or compiler (docs/sql-enqueue.md).
type GenCommand struct{ main *Main }

const genUsage = "usage: notifyd gen types -lang ts|python|go|rb [-o FILE] [-package NAME] [-config FILE]"

// Run writes the types to -o, or to standard output. It reads only the
// config.
func (c *GenCommand) Run(_ context.Context, args []string) error {
	if len(args) == 0 || args[0] != "types" {
		return errors.New(genUsage)
	}
	var path, lang, out, pkg string
	fs := c.main.newFlagSet("gen types", &path)
	fs.StringVar(&lang, "lang", "", "language: "+strings.Join(gentypes.Languages, ", ")+" (required)")
	fs.StringVar(&out, "o", "", "file to write (default: standard output)")
	fs.StringVar(&pkg, "package", "notifiers", "package name of the Go output")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if lang == "" || fs.NArg() > 0 {
		return errors.New(genUsage)
	}
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	var notifiers []gentypes.Notifier
	for _, name := range cfg.NotifierNames() {
		nf, _ := cfg.Notifier(name)
		notifiers = append(notifiers, gentypes.Notifier{Name: name, Schema: nf.Params})
	}
	code, err := gentypes.Generate(lang, notifiers, gentypes.Options{Source: path, GoPackage: pkg})
	if err != nil {
		return err
	}
	if out == "" {
		_, err = c.main.Stdout.Write(code)
		return err
	}
	if err := os.WriteFile(out, code, 0o644); err != nil {
		return fmt.Errorf("gen types: %w", err)
	}
	return nil
}
