package channels

import (
	"context"
	"slices"
	"time"
)

// Device is one mobile device a recipient registered (POST /v1/devices):
// the push token of an app install on a platform.
type Device struct {
	ID        string
	Recipient string
	// Tenant is the tenant the device was registered under (a recipient
	// token's tenant claim); "" for none. See DevicesFor.
	Tenant string
	// Platform is the device's platform as a Plugin's Device names it
	// ("ios", "android").
	Platform string
	// Token is the push token the platform's push service issued to the app
	// install (an APNs device token, an FCM registration token).
	Token string
	// App is the app the token belongs to: an iOS bundle id, an Android
	// package name.
	App           string
	CreatedAt     time.Time
	LastSuccessAt *time.Time
	// Failures counts the failed pushes since the last success.
	Failures int
}

// DevicesFor returns the devices of devices that a notification of tenant
// ("" for none) may be pushed to, in their order: those registered under
// tenant, and those registered without a tenant. A token registered both
// ways is kept once, as the tenant's. A mobile push channel filters what its
// store lists with it: a device registered through a token confined to one
// tenant never receives another tenant's notifications, nor those of no
// tenant.
func DevicesFor(devices []Device, tenant string) []Device {
	out := make([]Device, 0, len(devices))
	for _, d := range devices {
		if d.Tenant != "" && d.Tenant != tenant {
			continue
		}
		if i := slices.IndexFunc(out, func(o Device) bool { return o.Token == d.Token }); i >= 0 {
			if d.Tenant != "" {
				out[i] = d
			}
			continue
		}
		out = append(out, d)
	}
	return out
}

// Devices is where a mobile push channel finds a recipient's devices at
// send time and records what became of them. The daemon provides it
// (Setup.Devices); each method is one statement, never held open across a
// send.
type Devices interface {
	// List returns the devices on platform of each of recipients, each
	// one's oldest first, in one statement; a recipient with none is
	// absent.
	List(ctx context.Context, platform string, recipients []string) (map[string][]Device, error)
	// Succeeded records a successful push to each device (its last
	// success, and no failures since).
	Succeeded(ctx context.Context, ids []string) error
	// Failed counts one more failed push for each device.
	Failed(ctx context.Context, ids []string) error
	// Remove deletes devices whose push service says the token is no
	// longer registered (the app was uninstalled).
	Remove(ctx context.Context, ids []string) error
}

// DevicePlatform is what a per-recipient channel that sends to registered
// mobile devices declares (Plugin.Device): the platform it serves, and how
// POST /v1/devices checks a device of that platform before storing it.
type DevicePlatform struct {
	// Platform is the name devices are registered under ("ios",
	// "android"): lower-case letters, digits and _, at most 32 bytes, one
	// channel per platform in a registry.
	Platform string
	// CheckToken returns why token cannot be a push token of the platform
	// (its length or characters), or nil.
	CheckToken func(token string) error
	// CheckApp returns why app cannot name an app of the platform (an iOS
	// bundle id, an Android package name), or nil.
	CheckApp func(app string) error
}

// WithDevices provides the store of registered mobile devices
// (Setup.Devices).
func WithDevices(d Devices) OpenOption {
	return func(st *Setup) { st.Devices = d }
}
