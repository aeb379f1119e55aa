package server

import (
	"fmt"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/slack"
	"github.com/notifyd/notifyd/channels/webhook"
)

// buildChannels constructs the configured channels into d.Deps. A channel
// without config is left out: its deliveries are unavailable at fan-out
// (SPEC §3, honest degradation). Slack needs no daemon-level config (its URLs
// are per notifier), so it is always present.
func (d *Daemon) buildChannels() error {
	cfg := d.Config
	d.Deps.Channels = map[string]channels.Channel{}
	d.Deps.Bulk = map[string]channels.BulkChannel{}
	if err := d.buildEmail(); err != nil {
		return err
	}
	if cfg.Channels.Webhook != nil {
		wh, err := webhook.New(cfg.Channels.Webhook, cfg.Notifiers, webhook.Options{Logger: d.logger, Clock: d.opts.Clock})
		if err != nil {
			return fmt.Errorf("channels.webhook: %w", err)
		}
		d.Deps.Channels[channels.Webhook] = wh
		d.Deps.Bulk[channels.Webhook] = wh
	}
	sl, err := slack.New(cfg.Channels.Slack, cfg.Notifiers, slack.Options{Logger: d.logger, Clock: d.opts.Clock})
	if err != nil {
		return fmt.Errorf("channels.slack: %w", err)
	}
	d.Deps.Bulk[channels.Slack] = sl
	return nil
}
