// Package builtin lists the channels notifyd ships with. The daemon
// registers them first, then the channels a program embedding it adds
// (server.Options.Channels). Adding a built-in channel is its own package
// and one line here.
package builtin

import (
	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/apns"
	"github.com/notifyd/notifyd/channels/discord"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/channels/fcm"
	"github.com/notifyd/notifyd/channels/inapp"
	"github.com/notifyd/notifyd/channels/slack"
	"github.com/notifyd/notifyd/channels/sms"
	"github.com/notifyd/notifyd/channels/teams"
	"github.com/notifyd/notifyd/channels/telegram"
	"github.com/notifyd/notifyd/channels/webhook"
	"github.com/notifyd/notifyd/channels/webpush"
	"github.com/notifyd/notifyd/channels/whatsapp"
)

// Plugins returns the built-in channels, in the order the API and the
// preference center list them.
func Plugins() []channels.Plugin {
	return []channels.Plugin{
		inapp.Plugin,
		email.Plugin,
		webhook.Plugin,
		slack.Plugin,
		sms.Plugin,
		webpush.Plugin,
		fcm.Plugin,
		apns.Plugin,
		discord.Plugin,
		teams.Plugin,
		telegram.Plugin,
		whatsapp.Plugin,
	}
}

// Registry returns a registry of the built-in channels followed by extra.
func Registry(extra ...channels.Plugin) (*channels.Registry, error) {
	return channels.NewRegistry(append(Plugins(), extra...)...)
}

// MustRegistry is Registry for the built-in channels alone, which always
// register.
func MustRegistry() *channels.Registry {
	r, err := Registry()
	if err != nil {
		panic("builtin: " + err.Error())
	}
	return r
}
