package jobs

import (
	"context"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/stores"
)

// suppressFields pairs each registered per-recipient channel that sends to
// a profile address (Plugin.Address email or webhook_url) with that field:
// the claim statements check those addresses against the suppression list.
func (d *Deps) suppressFields() stores.AddressFields {
	var f stores.AddressFields
	if d.Registry == nil {
		return f
	}
	for _, p := range d.Registry.Plugins() {
		if p.PerRecipient && channels.SuppressibleAddress(p.Address) {
			f.Channels = append(f.Channels, p.Name)
			f.Fields = append(f.Fields, p.Address)
		}
	}
	return f
}

// digestSuppressFields is suppressFields for the channel that digests only.
func (d *Deps) digestSuppressFields() stores.AddressFields {
	all := d.suppressFields()
	name := ""
	if d.Registry != nil {
		name = d.Registry.Digest()
	}
	for i, c := range all.Channels {
		if c == name {
			return stores.AddressFields{Channels: []string{c}, Fields: []string{all.Fields[i]}}
		}
	}
	return stores.AddressFields{}
}

// suppression is the suppression list entry a send error asks for
// (channels.Suppress), for a delivery on channel: nil when it asks for none.
func suppression(channel string, err error) *stores.Suppression {
	se, ok := channels.SuppressionOf(err)
	if !ok || se.Address == "" {
		return nil
	}
	return &stores.Suppression{Channel: channel, Address: se.Address, Reason: se.Reason}
}

// putSuppressions records the suppressions a digest's refusal asked for,
// right after its settle; a failure is returned (the caller logs it: the
// digest is settled, and the next refusal suppresses the address again).
func (d *Deps) putSuppressions(ctx context.Context, ss []stores.Suppression) error {
	if len(ss) == 0 {
		return nil
	}
	return stores.PutSuppressions(ctx, d.Pool, ss, d.now())
}
