package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/notifyd/notifyd/channels/webpush"
)

// VAPIDKeysCommand is `notifyd vapid-keys`.
type VAPIDKeysCommand struct{ main *Main }

// Run prints a new VAPID key pair for channels.web_push, as the two YAML
// lines to paste (keep the private key out of the file: give it as an
// environment variable). It needs no config.
func (c *VAPIDKeysCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("vapid-keys", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("vapid-keys: %w (it takes no flags)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("vapid-keys takes no arguments, got %q", fs.Args())
	}
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		return err
	}
	fmt.Fprintf(c.main.Stdout, "vapid_public_key: %s\nvapid_private_key: %s\n", pub, priv)
	return nil
}
