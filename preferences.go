package notifyd

import (
	"fmt"
	"strings"

	"github.com/notifyd/notifyd/config"
)

// Rule is one preference rule of a recipient (SPEC §7).
//
// Scope is "*", "category:<c>" or "notifier:<n>"; Channel is "*" or a channel
// name; Mode is immediate, digest or off. The most specific scope wins
// (notifier > category > *), then the most specific channel.
type Rule struct {
	Scope   string `json:"scope"`
	Channel string `json:"channel"`
	Mode    Mode   `json:"mode"`
}

// Channels is every built-in channel a notifier can use, in display order.
var Channels = []string{"in_app", "email", "webhook", "slack"}

// PerRecipientChannels are the channels whose mode a recipient's preferences
// decide (slack is bulk: it has no per-recipient mode).
var PerRecipientChannels = []string{"in_app", "email", "webhook"}

// Validate reports what is wrong with r, or nil. in_app accepts only
// immediate and off; digest is email-only unless the channel is "*" (then it
// reads as immediate on channels that cannot digest).
func (r Rule) Validate() error {
	switch {
	case r.Scope == "*":
	case strings.HasPrefix(r.Scope, "category:") && len(r.Scope) > len("category:"):
	case strings.HasPrefix(r.Scope, "notifier:") && len(r.Scope) > len("notifier:"):
	default:
		return fmt.Errorf("scope %q: want \"*\", \"category:<name>\" or \"notifier:<name>\"", r.Scope)
	}
	if len(r.Scope) > 255 {
		return fmt.Errorf("scope longer than 255 bytes")
	}
	switch r.Channel {
	case "*", "in_app", "email", "webhook":
	default:
		return fmt.Errorf("channel %q: want \"*\", \"in_app\", \"email\" or \"webhook\"", r.Channel)
	}
	switch r.Mode {
	case ModeImmediate, ModeOff:
	case ModeDigest:
		if r.Channel != "email" && r.Channel != "*" {
			return fmt.Errorf("mode digest is only for email, not %s", r.Channel)
		}
	default:
		return fmt.Errorf("mode %q: want immediate, digest or off", r.Mode)
	}
	return nil
}

// DefaultMode is the notifier's mode for channel before any preference: its
// configured default, or ModeOff when the notifier does not use the channel.
func DefaultMode(n *config.Notifier, channel string) Mode {
	ch := n.Channels
	switch channel {
	case "in_app":
		if ch.InApp != nil {
			return modeOr(ch.InApp.Default, ModeImmediate)
		}
	case "email":
		if ch.Email != nil {
			return modeOr(ch.Email.Default, ModeImmediate)
		}
	case "webhook":
		if ch.Webhook != nil {
			return modeOr(ch.Webhook.Default, ModeOff)
		}
	case "slack":
		if ch.Slack != nil {
			return ModeImmediate
		}
	}
	return ModeOff
}

func modeOr(s string, def Mode) Mode {
	if s == "" {
		return def
	}
	return Mode(s)
}

// Resolution is a recipient's resolved mode for one channel of a notifier, with
// why when it is off.
type Resolution struct {
	Mode Mode
	// Why explains ModeOff: "preference", "muted" or "default" (the notifier's
	// default is off or it does not use the channel).
	Why string
}

// Resolve returns the mode a recipient with rules (and mute state) gets on
// channel for notifier n. A notifier that does not use the channel is always
// off. A required notifier ignores mutes, and reads a rule's "off" as its
// default mode. Modes a channel cannot do degrade: digest on in_app or webhook
// reads as immediate.
func Resolve(n *config.Notifier, channel string, rules []Rule, muted bool) Resolution {
	def := DefaultMode(n, channel)
	if !usesChannel(n, channel) {
		return Resolution{Mode: ModeOff, Why: "default"}
	}
	mode, matched := def, false
	best := -1
	for _, r := range rules {
		s := specificity(n, channel, r)
		if s > best {
			best, mode, matched = s, r.Mode, true
		}
	}
	why := "default"
	if matched {
		why = "preference"
	}
	if n.Required {
		if mode == ModeOff {
			mode = def
			why = "default"
		}
	} else if muted && mode != ModeOff {
		// A mute silences what would have been sent; a channel that is off
		// anyway stays off for its own reason (no "muted" row for it).
		return Resolution{Mode: ModeOff, Why: "muted"}
	}
	if mode == ModeDigest && channel != "email" {
		mode = ModeImmediate
	}
	if mode == ModeOff {
		return Resolution{Mode: ModeOff, Why: why}
	}
	return Resolution{Mode: mode}
}

// specificity ranks a rule for (n, channel): -1 when it does not apply;
// otherwise scope weight*2 + channel weight, so the scope decides first.
func specificity(n *config.Notifier, channel string, r Rule) int {
	var s int
	switch {
	case r.Scope == "*":
		s = 0
	case n.Category != "" && r.Scope == "category:"+n.Category:
		s = 1
	case r.Scope == "notifier:"+n.Name:
		s = 2
	default:
		return -1
	}
	switch r.Channel {
	case "*":
		return s * 2
	case channel:
		return s*2 + 1
	}
	return -1
}

func usesChannel(n *config.Notifier, channel string) bool {
	ch := n.Channels
	switch channel {
	case "in_app":
		return ch.InApp != nil
	case "email":
		return ch.Email != nil
	case "webhook":
		return ch.Webhook != nil
	case "slack":
		return ch.Slack != nil
	}
	return false
}
