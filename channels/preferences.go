package channels

import (
	"fmt"
	"strings"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// ValidateRule reports what is wrong with a preference rule, or nil. The
// channel must be "*" or a registered per-recipient channel (a bulk channel
// has no per-recipient mode); digest is allowed on "*" (it reads as immediate
// on channels that cannot digest) and on channels that can digest.
func (r *Registry) ValidateRule(rule notifytype.Rule) error {
	switch {
	case rule.Scope == "*":
	case strings.HasPrefix(rule.Scope, "category:") && len(rule.Scope) > len("category:"):
	case strings.HasPrefix(rule.Scope, "notifier:") && len(rule.Scope) > len("notifier:"):
	default:
		return fmt.Errorf("scope %q: want \"*\", \"category:<name>\" or \"notifier:<name>\"", rule.Scope)
	}
	if len(rule.Scope) > 255 {
		return fmt.Errorf("scope longer than 255 bytes")
	}
	p, ok := r.Lookup(rule.Channel)
	if rule.Channel != "*" && (!ok || !p.PerRecipient) {
		want := append([]string{"*"}, r.PerRecipient()...)
		for i, w := range want {
			want[i] = fmt.Sprintf("%q", w)
		}
		return fmt.Errorf("channel %q: want %s", rule.Channel, oneOf(want))
	}
	switch rule.Mode {
	case notifytype.ModeImmediate, notifytype.ModeOff:
	case notifytype.ModeDigest:
		if rule.Channel != "*" && !p.Digest {
			return fmt.Errorf("mode digest: channel %s cannot digest", rule.Channel)
		}
	default:
		return fmt.Errorf("mode %q: want immediate, digest or off", rule.Mode)
	}
	return nil
}

// Resolution is a recipient's resolved mode for one channel of a notifier,
// with why when it is off.
type Resolution struct {
	Mode notifytype.Mode
	// Why explains ModeOff: "preference", "muted" or "default" (the
	// notifier's default is off or it does not use the channel).
	Why string
}

// Uses reports whether notifier n has a section for channel.
func Uses(n *config.Notifier, channel string) bool {
	_, ok := n.Channels[channel]
	return ok
}

// DefaultMode is notifier n's mode on channel before any preference: its
// section's `default`, else the channel's DefaultMode; ModeOff when n does not
// use the channel or the channel is not registered.
func (r *Registry) DefaultMode(n *config.Notifier, channel string) notifytype.Mode {
	nc, ok := n.Channels[channel]
	p, registered := r.Lookup(channel)
	if !ok || !registered {
		return notifytype.ModeOff
	}
	if nc != nil && nc.Default != "" {
		return notifytype.Mode(nc.Default)
	}
	return p.DefaultMode
}

// Resolve returns the mode a recipient with rules (and mute state) gets on
// channel for notifier n: the fan-out's decision, and what the preference
// center shows. A notifier that does not use the channel is always off. A
// required notifier ignores mutes and reads a rule's "off" as its default
// mode. A digest on a channel that cannot digest reads as immediate.
func (r *Registry) Resolve(n *config.Notifier, channel string, rules []notifytype.Rule, muted bool) Resolution {
	return r.ResolveTenant(n, channel, rules, nil, muted)
}

// ResolveTenant is Resolve for a notification of a tenant, in four layers:
// the recipient's rules scoped to the tenant (those of rules with a Tenant:
// pass only the notification's tenant's) beat the recipient's global rules
// (those without), which beat the tenant's default rules (defaults), which
// beat the notifier's default. Within a layer the most specific rule wins,
// as in Resolve; a layer with no rule that applies leaves the decision to
// the next. required still wins: an "off" from any layer reads as the
// notifier's default. An off from the tenant's defaults has Why "tenant".
func (r *Registry) ResolveTenant(n *config.Notifier, channel string, rules, defaults []notifytype.Rule,
	muted bool) Resolution {
	if !Uses(n, channel) {
		return Resolution{Mode: notifytype.ModeOff, Why: "default"}
	}
	def := r.DefaultMode(n, channel)
	mode, why := def, "default"
	best := -1
	// Layers weigh more than any specificity (at most 5).
	const layer = 6
	for _, rule := range defaults {
		if s := specificity(n, channel, rule); s >= 0 && s > best {
			best, mode, why = s, rule.Mode, "tenant"
		}
	}
	for _, rule := range rules {
		s := specificity(n, channel, rule)
		if s < 0 {
			continue
		}
		s += layer
		if rule.Tenant != "" {
			s += layer
		}
		if s > best {
			best, mode, why = s, rule.Mode, "preference"
		}
	}
	if n.Required {
		if mode == notifytype.ModeOff {
			mode = def
			why = "default"
		}
	} else if muted && mode != notifytype.ModeOff {
		// A mute silences what would have been sent; a channel that is off
		// anyway stays off for its own reason (no "muted" row for it).
		return Resolution{Mode: notifytype.ModeOff, Why: "muted"}
	}
	if p, _ := r.Lookup(channel); mode == notifytype.ModeDigest && !p.Digest {
		mode = notifytype.ModeImmediate
	}
	if mode == notifytype.ModeOff {
		return Resolution{Mode: notifytype.ModeOff, Why: why}
	}
	return Resolution{Mode: mode}
}

// specificity ranks a rule for (n, channel): -1 when it does not apply;
// otherwise scope weight*2 + channel weight, so the scope decides first.
func specificity(n *config.Notifier, channel string, r notifytype.Rule) int {
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

// oneOf formats choices as "a, b or c".
func oneOf(c []string) string {
	if len(c) == 1 {
		return c[0]
	}
	return strings.Join(c[:len(c)-1], ", ") + " or " + c[len(c)-1]
}
