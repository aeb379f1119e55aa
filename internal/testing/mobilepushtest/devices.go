package mobilepushtest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/notifyd/notifyd/channels"
)

// Devices is an in-memory channels.Devices: a mobile push channel's edge to
// the daemon's store, for channel tests (the store itself is tested against
// PostgreSQL in stores, and end to end in server). Its methods are safe for
// concurrent use.
type Devices struct {
	mu        sync.Mutex
	devices   []channels.Device
	succeeded []string
	failed    []string
	lists     int
}

// Add registers a device of recipient and returns its id.
func (m *Devices) Add(recipient, platform, token, app string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := fmt.Sprintf("dev-%d", len(m.devices)+1)
	m.devices = append(m.devices, channels.Device{ID: id, Recipient: recipient, Platform: platform, Token: token, App: app})
	return id
}

// List implements channels.Devices.
func (m *Devices) List(_ context.Context, platform string, recipients []string) (map[string][]channels.Device, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lists++
	out := map[string][]channels.Device{}
	for _, d := range m.devices {
		if d.Platform == platform && slices.Contains(recipients, d.Recipient) {
			out[d.Recipient] = append(out[d.Recipient], d)
		}
	}
	return out, nil
}

// Succeeded implements channels.Devices.
func (m *Devices) Succeeded(_ context.Context, ids []string) error {
	m.mu.Lock()
	m.succeeded = append(m.succeeded, ids...)
	m.mu.Unlock()
	return nil
}

// Failed implements channels.Devices.
func (m *Devices) Failed(_ context.Context, ids []string) error {
	m.mu.Lock()
	m.failed = append(m.failed, ids...)
	m.mu.Unlock()
	return nil
}

// Remove implements channels.Devices.
func (m *Devices) Remove(_ context.Context, ids []string) error {
	m.mu.Lock()
	m.devices = slices.DeleteFunc(m.devices, func(d channels.Device) bool { return slices.Contains(ids, d.ID) })
	m.mu.Unlock()
	return nil
}

// IDs returns the ids of the devices left, in registration order.
func (m *Devices) IDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, d := range m.devices {
		out = append(out, d.ID)
	}
	return out
}

// Outcomes returns the ids recorded as succeeded and as failed.
func (m *Devices) Outcomes() (succeeded, failed []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.succeeded), slices.Clone(m.failed)
}

// Lists is how many times List was called.
func (m *Devices) Lists() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lists
}
