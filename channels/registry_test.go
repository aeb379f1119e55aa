package channels_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// opens returns an Open that returns v.
func opens(v any) func(*channels.Setup) (any, error) {
	return func(*channels.Setup) (any, error) { return v, nil }
}

// perRecipient is a minimal per-recipient channel.
type perRecipient struct{ name string }

func (c perRecipient) Name() string                               { return c.name }
func (perRecipient) Addressable(string, channels.Recipient) error { return nil }
func (perRecipient) Send(context.Context, channels.Message) error { return nil }

// notAChannel implements none of the channel interfaces.
type notAChannel struct{}

func plugin(name string, mod ...func(*channels.Plugin)) channels.Plugin {
	p := channels.Plugin{Name: name, PerRecipient: true, Open: opens(perRecipient{name})}
	for _, m := range mod {
		m(&p)
	}
	return p
}

// device makes a plugin a device channel of platform, accepting any token
// and app.
func device(platform string) func(*channels.Plugin) {
	return func(p *channels.Plugin) {
		p.Device = &channels.DevicePlatform{Platform: platform, CheckToken: func(string) error { return nil },
			CheckApp: func(string) error { return nil }}
	}
}

func TestNewRegistryRefuses(t *testing.T) {
	t.Parallel()
	inbox := func(p *channels.Plugin) { p.Inbox = true }
	digest := func(p *channels.Plugin) { p.Digest = true }
	tests := []struct {
		name    string
		plugins []channels.Plugin
		err     string
	}{
		{"duplicate name", []channels.Plugin{plugin("texter"), plugin("push"), plugin("texter")},
			"channel texter is registered twice"},
		{"duplicate of a built-in", append(builtin.Plugins(), plugin("email")),
			"channel email is registered twice"},
		{"upper case", []channels.Plugin{plugin("SMS")},
			`channel name "SMS": want lower-case letters, digits and _, starting with a letter`},
		{"empty name", []channels.Plugin{plugin("")},
			`channel name "": want lower-case letters, digits and _, starting with a letter`},
		{"starts with a digit", []channels.Plugin{plugin("2fa")},
			`channel name "2fa": want lower-case letters, digits and _, starting with a letter`},
		{"a dash", []channels.Plugin{plugin("in-app")},
			`channel name "in-app": want lower-case letters, digits and _, starting with a letter`},
		{"too long", []channels.Plugin{plugin("c" + strings.Repeat("x", 63))},
			`channel name "c` + strings.Repeat("x", 63) + `": want lower-case letters, digits and _, starting with a letter`},
		{"neither per-recipient nor bulk", []channels.Plugin{plugin("texter", func(p *channels.Plugin) { p.PerRecipient = false })},
			"channel texter: neither per-recipient nor bulk"},
		{"two inboxes", []channels.Plugin{plugin("inbox", inbox), plugin("feed", inbox)},
			"channel feed: inbox is the inbox already"},
		{"a second inbox next to the built-in one", append(builtin.Plugins(), plugin("feed", inbox)),
			"channel feed: in_app is the inbox already"},
		{"a bulk inbox", []channels.Plugin{plugin("feed", inbox, func(p *channels.Plugin) { p.PerRecipient, p.Bulk = false, true })},
			"channel feed: the inbox is a per-recipient channel"},
		{"two digest channels", append(builtin.Plugins(), plugin("texter", digest)),
			"channel texter: email digests already (at most one channel can)"},
		{"bad address", []channels.Plugin{plugin("texter", func(p *channels.Plugin) { p.Address = "fax" })},
			`channel texter: address "fax": want one of ["" "email" "webhook_url" "phone" "name" "locale" "timezone" "push_subscription"]`},
		{"a device address without a Device", []channels.Plugin{plugin("texter", func(p *channels.Plugin) { p.Address = "device:pager" })},
			`channel texter: address "device:pager": want one of ["" "email" "webhook_url" "phone" "name" "locale" "timezone" "push_subscription"]`},
		{"a device channel that is bulk", []channels.Plugin{plugin("pager", device("pager"), func(p *channels.Plugin) { p.PerRecipient, p.Bulk = false, true })},
			"channel pager: a device channel is per-recipient"},
		{"a device channel with another address", []channels.Plugin{plugin("pager", device("pager"), func(p *channels.Plugin) { p.Address = "email" })},
			`channel pager: address "email": a device channel's address is its platform's (device:pager)`},
		{"a bad platform", []channels.Plugin{plugin("pager", device("Pager OS"))},
			`channel pager: device platform "Pager OS": want lower-case letters, digits and _ (at most 32)`},
		{"a platform without checks", []channels.Plugin{plugin("pager", device("pager"), func(p *channels.Plugin) { p.Device.CheckApp = nil })},
			"channel pager: device platform pager: CheckToken and CheckApp are required"},
		{"a second channel for a platform", append(builtin.Plugins(), plugin("pager", device("ios"))),
			"channel pager: apns sends to ios devices already (one channel per platform)"},
		{"nil Open", []channels.Plugin{plugin("texter", func(p *channels.Plugin) { p.Open = nil })},
			"channel texter: Open is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := channels.NewRegistry(tt.plugins...)
			if err == nil || err.Error() != tt.err {
				t.Fatalf("NewRegistry = %v, %v; want error %q", r, err, tt.err)
			}
			if r != nil {
				t.Errorf("NewRegistry returned a registry with its error")
			}
		})
	}
}

func TestRegistryLists(t *testing.T) {
	t.Parallel()
	bulk := channels.Plugin{Name: "pager", Bulk: true, Open: opens(nil)}
	r, err := builtin.Registry(plugin("texter", func(p *channels.Plugin) { p.Address = "name" }), bulk)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Names", r.Names(), []string{"in_app", "email", "webhook", "slack", "sms", "web_push", "fcm", "apns", "discord", "teams", "telegram", "whatsapp",
			"texter", "pager"}},
		{"PerRecipient", r.PerRecipient(), []string{"in_app", "email", "webhook", "sms", "web_push", "fcm", "apns", "telegram", "whatsapp", "texter"}},
		{"Platforms", r.Platforms(), []string{"android", "ios"}},
		{"Inbox", r.Inbox(), "in_app"},
		{"Digest", r.Digest(), "email"},
		{"Plugins", len(r.Plugins()), len(builtin.Plugins()) + 2},
	}
	for _, c := range checks {
		if !equal(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	texter, ok := r.Lookup("texter")
	if !ok || texter.DefaultMode != notifytype.ModeImmediate || texter.Address != "name" {
		t.Errorf("Lookup(texter) = %+v, %v; want it, with the immediate default", texter, ok)
	}
	if _, ok := r.Lookup("fax"); ok {
		t.Error("Lookup(fax) found a channel")
	}
	// A device channel's address is its platform's: the fan-out makes a
	// recipient without such a device unavailable.
	if p, _ := r.Lookup("apns"); p.Address != channels.DeviceAddress("ios") || !channels.IsRegistration(p.Address) {
		t.Errorf("apns address = %q, want device:ios", p.Address)
	}
	if dp, ok := r.DevicePlatform("android"); !ok || dp.CheckToken("short") == nil || dp.CheckApp("com.example.app") != nil {
		t.Errorf("DevicePlatform(android) = %+v, %v; want FCM's checks", dp, ok)
	}
	if _, ok := r.DevicePlatform("pager"); ok {
		t.Error("DevicePlatform(pager) found a channel")
	}
	if got := texter.Modes(); !slices.Equal(got, []notifytype.Mode{notifytype.ModeImmediate, notifytype.ModeOff}) {
		t.Errorf("texter modes = %v", got)
	}
	if em, _ := r.Lookup("email"); !slices.Equal(em.Modes(), []notifytype.Mode{notifytype.ModeImmediate, notifytype.ModeDigest, notifytype.ModeOff}) {
		t.Errorf("email modes = %v", em.Modes())
	}
	// Plugins is a copy.
	r.Plugins()[0].Name = "changed"
	if r.Names()[0] != "in_app" {
		t.Error("Plugins returned the registry's own slice")
	}
}

func equal(a, b any) bool {
	if as, ok := a.([]string); ok {
		bs, ok := b.([]string)
		return ok && slices.Equal(as, bs)
	}
	return a == b
}

func TestOpenRefusesWhatAPluginDoesNotImplement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		plugin channels.Plugin
		err    string
	}{
		{"per-recipient", plugin("texter", func(p *channels.Plugin) { p.Open = opens(notAChannel{}) }),
			"channel texter is per-recipient but channels_test.notAChannel does not implement channels.Channel"},
		{"bulk", channels.Plugin{Name: "pager", Bulk: true, Open: opens(perRecipient{"pager"})},
			"channel pager is bulk but channels_test.perRecipient does not implement channels.BulkChannel"},
		{"digest", plugin("texter", func(p *channels.Plugin) { p.Digest = true }),
			"channel texter is a digest channel but channels_test.perRecipient does not implement channels.DigestChannel"},
		{"inbox", plugin("feed", func(p *channels.Plugin) { p.Inbox = true }),
			"channel feed is the inbox but channels_test.perRecipient does not implement channels.InboxChannel"},
		{"every interface it lacks", plugin("texter", func(p *channels.Plugin) { p.Digest = true; p.Open = opens(notAChannel{}) }),
			"channel texter is per-recipient but channels_test.notAChannel does not implement channels.Channel\n" +
				"channel texter is a digest channel but channels_test.notAChannel does not implement channels.DigestChannel"},
		{"an error of its own", plugin("texter", func(p *channels.Plugin) {
			p.Open = func(*channels.Setup) (any, error) { return nil, errors.New("no modem") }
		}), "channels.texter: no modem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := channels.NewRegistry(tt.plugin)
			if err != nil {
				t.Fatal(err)
			}
			c := config.Default()
			set, err := r.Open(c, nil, nil)
			if err == nil || err.Error() != tt.err {
				t.Errorf("Open = %v, %v; want error %q", set, err, tt.err)
			}
			// Check reports it too, without a line.
			_, err = config.ParseWith("test.yaml", nil, r.Check)
			if want := "test.yaml: " + tt.err; err == nil || err.Error() != want {
				t.Errorf("ParseWith(Check) = %v, want %q", err, want)
			}
		})
	}
}

// closer is a channel holding something to release.
type closer struct {
	perRecipient
	closed *atomic.Int32
}

func (c closer) Close() error { c.closed.Add(1); return nil }

func TestOpen(t *testing.T) {
	t.Parallel()
	var closed atomic.Int32
	var setup *channels.Setup
	var checking []bool
	texter := plugin("texter", func(p *channels.Plugin) {
		p.Open = func(s *channels.Setup) (any, error) {
			setup = s
			checking = append(checking, s.Checking)
			var cfg struct {
				Gateway string `yaml:"gateway"`
			}
			s.Problems.Decode(s.Section, &cfg)
			if cfg.Gateway == "" {
				s.Problems.Add(s.Section, "gateway", "must be set")
			}
			return closer{perRecipient{"texter"}, &closed}, nil
		}
	})
	unconfigured := channels.Plugin{Name: "pager", Bulk: true, Open: opens(nil)}
	r, err := channels.NewRegistry(texter, unconfigured)
	if err != nil {
		t.Fatal(err)
	}
	src := "channels:\n  texter: {gateway: gw.test}\nnotifiers:\n  b: {channels: {texter: {default: off}}}\n  a: {channels: {texter: {}, pager: {}}}\n  c: {}\n"
	c, err := config.ParseWith("test.yaml", []byte(src), r.Check)
	if err != nil {
		t.Fatal(err)
	}
	if closed.Load() != 1 {
		t.Errorf("Check closed the channel %d times, want 1", closed.Load())
	}
	set, err := r.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := setup.NotifierNames(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Setup.NotifierNames = %v, want the notifiers that use texter", got)
	}
	if g, _ := setup.Section.Value("gateway"); g != "gw.test" || setup.Config != c || setup.Logger == nil || setup.Clock == nil {
		t.Errorf("Setup = %+v", setup)
	}
	if setup.Notifiers["b"].Default != "off" {
		t.Errorf("b's texter section = %+v", setup.Notifiers["b"])
	}
	if _, ok := set.Channels["texter"]; !ok || set.Registry != r {
		t.Errorf("set = %+v", set)
	}
	if _, ok := set.Bulk["pager"]; ok {
		t.Error("pager opened nil and is in the set")
	}
	if !slices.Equal(checking, []bool{true, false}) {
		t.Errorf("Setup.Checking = %v, want true for Check, false for Open", checking)
	}
	if err := set.Close(); err != nil || closed.Load() != 2 {
		t.Errorf("Close = %v, closed %d times, want 2", err, closed.Load())
	}

	// Without its section the channel gets an empty one, and what it
	// reports comes with the line of the nearest key written: here the
	// file's first.
	_, err = config.ParseWith("test.yaml", []byte("notifiers:\n  a:\n    channels:\n      texter: {default: weekly}\n"), r.Check)
	want := "test.yaml:1: channels.texter.gateway: must be set\n" +
		"test.yaml:4: notifiers.a.channels.texter.default: unknown mode \"weekly\" (want immediate or off)"
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
}

// A registration is an address the recipient has when the fan-out found
// one; the reason of an unavailable delivery names what is missing.
func TestRegistrationAddresses(t *testing.T) {
	t.Parallel()
	r := channels.Recipient{ID: "u1", Email: "u1@example.test",
		Registrations: []string{channels.PushSubscriptionAddress, channels.DeviceAddress("ios")}}
	for field, want := range map[string]string{
		"email":                           "u1@example.test",
		channels.PushSubscriptionAddress:  channels.PushSubscriptionAddress,
		channels.DeviceAddress("ios"):     "device:ios",
		channels.DeviceAddress("android"): "",
		"registrations":                   "",
	} {
		if got := r.Address(field); got != want {
			t.Errorf("Address(%q) = %q, want %q", field, got, want)
		}
	}
	for field, want := range map[string]string{
		"email":                           "recipient has no email address",
		"phone":                           "recipient has no phone",
		channels.PushSubscriptionAddress:  "recipient has no push subscriptions",
		channels.DeviceAddress("android"): "recipient has no android devices",
	} {
		if got := channels.MissingAddress(field); got != want {
			t.Errorf("MissingAddress(%q) = %q, want %q", field, got, want)
		}
	}
}
