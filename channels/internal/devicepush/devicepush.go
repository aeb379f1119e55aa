// Package devicepush is what the mobile push channels (FCM, APNs) share:
// one delivery is one message to each of the recipient's devices of the
// channel's platform, all at once; the devices are read for the whole send
// batch (channels.Preparer); the outcomes are recorded on the devices
// (success, failure, removal) and combined into the delivery's.
package devicepush

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/notifyd/notifyd/channels"
)

// Fanout sends a delivery to a recipient's devices. It is safe for
// concurrent use.
type Fanout struct {
	// Channel is the channel's name, for errors and logs.
	Channel string
	// Platform is the devices' platform ("ios", "android").
	Platform string
	// Store is where the devices are read and their outcomes recorded. Nil
	// fails every send as temporary (a registry opened without the
	// daemon's store).
	Store channels.Devices
	// Logger receives a debug record per push; never nil.
	Logger *slog.Logger
}

// prepared is what Prepare hands each Send: the batch's devices by
// recipient, absent for a recipient with none.
type prepared struct {
	platform string
	devices  map[string][]channels.Device
}

// Prepare reads the devices of a batch's recipients in one statement
// (channels.Preparer); Send finds each recipient's there.
func (f *Fanout) Prepare(ctx context.Context, recipients []string) (any, error) {
	if f.Store == nil {
		return nil, fmt.Errorf("%s: no device store", f.Channel)
	}
	devices, err := f.Store.List(ctx, f.Platform, recipients)
	if err != nil {
		return nil, err
	}
	return prepared{platform: f.Platform, devices: devices}, nil
}

// devices returns rid's devices: from the batch's Prepare when ctx carries
// it, else read now.
func (f *Fanout) devices(ctx context.Context, rid string) ([]channels.Device, error) {
	if p, ok := channels.Prepared(ctx).(prepared); ok && p.platform == f.Platform {
		return p.devices[rid], nil
	}
	m, err := f.Store.List(ctx, f.Platform, []string{rid})
	return m[rid], err
}

// Send pushes msg to each of the recipient's devices with push, which sends
// to one device and returns its classified error (channels.Gone: the token
// is no longer registered). The delivery is sent when at least one device
// took the message; the others are not tried again (that would repeat it
// on the devices that have it). When none did: a rate limit anywhere
// snoozes it (the longest Retry-After), anything temporary retries it,
// otherwise it is refused. Gone devices are removed, the others' successes
// and failures recorded, best effort: the messages are out either way.
// provider names the push service for the ledger.
func (f *Fanout) Send(ctx context.Context, msg channels.Message, provider string,
	push func(ctx context.Context, d channels.Device) error) error {
	if msg.Recipient == nil {
		return channels.Permanent(fmt.Errorf("%s: message has no recipient", f.Channel))
	}
	if f.Store == nil {
		return channels.Temporary(fmt.Errorf("%s: no device store", f.Channel), 0)
	}
	rid := msg.Recipient.ID
	devices, err := f.devices(ctx, rid)
	if err != nil {
		return channels.Temporary(fmt.Errorf("%s to recipient %s: read devices: %w", f.Channel, rid, err), 0)
	}
	// The wall between tenants: a device registered under a tenant gets
	// that tenant's notifications only.
	devices = channels.DevicesFor(devices, msg.TenantID())
	if len(devices) == 0 {
		// The fan-out found one; it was removed since.
		of := ""
		if t := msg.TenantID(); t != "" {
			of = fmt.Sprintf(" of tenant %q", t)
		}
		return channels.Permanent(fmt.Errorf("%s to recipient %s: recipient has no %s devices%s", f.Channel, rid, f.Platform, of))
	}
	channels.SetProvider(ctx, provider)
	// One request per device, at once: the slowest bounds the delivery.
	results := make([]error, len(devices))
	var wg sync.WaitGroup
	for i, d := range devices[1:] {
		wg.Go(func() { results[i+1] = push(ctx, d) })
	}
	results[0] = push(ctx, devices[0])
	wg.Wait()
	var ok, failed, gone []string
	var errs []error
	for i, d := range devices {
		err := results[i]
		kind, _ := channels.Classify(err)
		switch {
		case err == nil:
			ok = append(ok, d.ID)
		case kind == channels.KindGone:
			gone = append(gone, d.ID)
			errs = append(errs, err)
		default:
			failed = append(failed, d.ID)
			errs = append(errs, err)
		}
		f.Logger.DebugContext(ctx, "device push", "channel", f.Channel, "delivery_id", msg.DeliveryID, "recipient", rid,
			"device", d.ID, "error", err)
	}
	bctx := context.WithoutCancel(ctx)
	for _, op := range []struct {
		ids []string
		f   func(context.Context, []string) error
	}{{ok, f.Store.Succeeded}, {failed, f.Store.Failed}, {gone, f.Store.Remove}} {
		if len(op.ids) == 0 {
			continue
		}
		if err := op.f(bctx, op.ids); err != nil {
			f.Logger.WarnContext(ctx, "record device outcome", "channel", f.Channel, "recipient", rid, "error", err)
		}
	}
	if len(ok) > 0 {
		return nil
	}
	return Outcome(fmt.Sprintf("%s to recipient %s", f.Channel, rid), errs)
}

// Outcome is the delivery's error when no device took the message: a rate
// limit first (the longest wait asked for), then anything temporary, else
// refused. Gone devices count as refusals: their removal is the device's
// business, not the delivery's address.
func Outcome(prefix string, errs []error) error {
	var rate, temp error
	var after, tempAfter time.Duration
	for _, err := range errs {
		switch k, d := channels.Classify(err); k {
		case channels.KindRateLimited:
			if rate == nil || d > after {
				rate, after = err, d
			}
		case channels.KindTemporary:
			if temp == nil {
				temp, tempAfter = err, d
			}
		}
	}
	// The causes stay in the chain: a timeout or a refused connection is
	// what tells the send job that the push service does not answer.
	wrapped := fmt.Errorf("%s: %w", prefix, joined(errs))
	switch {
	case rate != nil:
		return channels.RateLimited(wrapped, after)
	case temp != nil:
		return channels.Temporary(wrapped, tempAfter)
	default:
		return channels.Permanent(wrapped)
	}
}

// joined is errors.Join on one line: a ledger's last_error.
type joined []error

func (j joined) Error() string {
	msgs := make([]string, len(j))
	for i, err := range j {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (j joined) Unwrap() []error { return j }
