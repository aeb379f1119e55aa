package server

import (
	"fmt"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/email"
)

// buildEmail constructs the email channel when channels.email is configured;
// its pooled SMTP connections close with the daemon.
func (d *Daemon) buildEmail() error {
	cfg := d.Config
	if cfg.Channels.Email == nil {
		return nil
	}
	sender, err := email.New(cfg.Channels.Email, &cfg.Digest, cfg.Notifiers, email.Options{Logger: d.logger, Clock: d.opts.Clock})
	if err != nil {
		return fmt.Errorf("channels.email: %w", err)
	}
	d.Deps.Channels[channels.Email] = sender
	d.Deps.Digests = sender
	d.Email = sender
	d.closers = append(d.closers, sender.Close)
	return nil
}
