package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/stores"
)

// devices is the daemon's channels.Devices: the mobile push channels read
// and update the recipients' registered devices through it. Like
// pushSubscriptions, its db is set once the pool exists (before any send),
// and successes are written in batches; close writes what is left.
type devices struct {
	db     stores.DB
	logger *slog.Logger
	ok     successes
}

var _ channels.Devices = (*devices)(nil)

var errNoDevicePool = errors.New("devices: the database is not open yet")

func (d *devices) List(ctx context.Context, platform string, recipients []string) (map[string][]channels.Device, error) {
	if d.db == nil {
		return nil, errNoDevicePool
	}
	found, err := stores.ListDevicesOf(ctx, d.db, platform, recipients)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]channels.Device, len(found))
	for r, list := range found {
		for _, v := range list {
			out[r] = append(out[r], channels.Device{ID: v.ID, Recipient: v.Recipient, Tenant: v.Tenant, Platform: v.Platform,
				Token: v.Token, App: v.App, CreatedAt: v.CreatedAt, LastSuccessAt: v.LastSuccessAt, Failures: v.Failures})
		}
	}
	return out, nil
}

func (d *devices) Succeeded(_ context.Context, ids []string) error {
	if d.db == nil {
		return errNoDevicePool
	}
	d.ok.add(ids, func(ctx context.Context, ids []string) {
		if err := stores.DevicesSucceeded(ctx, d.db, ids); err != nil && d.logger != nil {
			d.logger.Warn("record device push successes", "devices", len(ids), "err", err)
		}
	})
	return nil
}

func (d *devices) Failed(ctx context.Context, ids []string) error {
	if d.db == nil {
		return errNoDevicePool
	}
	return stores.DevicesFailed(ctx, d.db, ids)
}

func (d *devices) Remove(ctx context.Context, ids []string) error {
	if d.db == nil {
		return errNoDevicePool
	}
	return stores.RemoveDevices(ctx, d.db, ids)
}

// close writes the successes not yet written.
func (d *devices) close() error {
	d.ok.flush()
	return nil
}
