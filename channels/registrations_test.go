package channels_test

import (
	"slices"
	"testing"

	"github.com/notifyd/notifyd/channels"
)

// A registration made under a tenant reaches that tenant's notifications
// only; one made without a tenant reaches every notification; an endpoint
// or token registered both ways is pushed once, as the tenant's.
func TestRegistrationsForTenant(t *testing.T) {
	t.Parallel()
	subs := []channels.PushSubscription{
		{ID: "g", Endpoint: "https://p/1"},
		{ID: "a", Endpoint: "https://p/2", Tenant: "acme"},
		{ID: "b", Endpoint: "https://p/3", Tenant: "globex"},
		{ID: "a1", Endpoint: "https://p/1", Tenant: "acme"},
	}
	devices := make([]channels.Device, len(subs))
	for i, s := range subs {
		devices[i] = channels.Device{ID: s.ID, Token: s.Endpoint, Tenant: s.Tenant}
	}
	for _, c := range []struct {
		tenant string
		want   []string
	}{
		{"", []string{"g"}},
		{"acme", []string{"a1", "a"}},
		{"globex", []string{"g", "b"}},
		{"initech", []string{"g"}},
	} {
		var got, gotDevices []string
		for _, s := range channels.PushSubscriptionsFor(subs, c.tenant) {
			got = append(got, s.ID)
		}
		for _, d := range channels.DevicesFor(devices, c.tenant) {
			gotDevices = append(gotDevices, d.ID)
		}
		if !slices.Equal(got, c.want) || !slices.Equal(gotDevices, c.want) {
			t.Errorf("tenant %q: subscriptions %v, devices %v; want %v", c.tenant, got, gotDevices, c.want)
		}
	}
}
