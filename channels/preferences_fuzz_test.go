package channels_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// fuzzModes are the modes a config may give a channel as its `default`
// (the registry's check allows exactly these); "" writes no default.
var fuzzModes = map[string][]string{
	"in_app":  {"", "immediate", "off"},
	"email":   {"", "immediate", "digest", "off"},
	"webhook": {"", "immediate", "off"},
}

// canDo lists what a built-in channel can actually do: every one is
// immediate or off, only email digests.
var canDo = map[string][]notifytype.Mode{
	"in_app":   {notifytype.ModeImmediate, notifytype.ModeOff},
	"email":    {notifytype.ModeImmediate, notifytype.ModeDigest, notifytype.ModeOff},
	"webhook":  {notifytype.ModeImmediate, notifytype.ModeOff},
	"slack":    {notifytype.ModeImmediate, notifytype.ModeOff},
	"sms":      {notifytype.ModeImmediate, notifytype.ModeOff},
	"web_push": {notifytype.ModeImmediate, notifytype.ModeOff},
	"fcm":      {notifytype.ModeImmediate, notifytype.ModeOff},
	"apns":     {notifytype.ModeImmediate, notifytype.ModeOff},
	"discord":  {notifytype.ModeImmediate, notifytype.ModeOff},
	"teams":    {notifytype.ModeImmediate, notifytype.ModeOff},
	"telegram": {notifytype.ModeImmediate, notifytype.ModeOff},
	"whatsapp": {notifytype.ModeImmediate, notifytype.ModeOff},
}

// fuzzShape is the part of a fuzz notifier's shape that its config holds:
// whether it is required and, per channel, -1 when it does not use it or the
// index of its default in fuzzModes.
type fuzzShape struct {
	required              bool
	inApp, email, webhook int
	slack                 bool
}

func (s fuzzShape) key() string {
	return fmt.Sprintf("s.%t.%d.%d.%d.%t", s.required, s.inApp, s.email, s.webhook, s.slack)
}

// fuzzShapes returns every shape.
func fuzzShapes() []fuzzShape {
	var out []fuzzShape
	for _, req := range []bool{false, true} {
		for in := -1; in < len(fuzzModes["in_app"]); in++ {
			for em := -1; em < len(fuzzModes["email"]); em++ {
				for wh := -1; wh < len(fuzzModes["webhook"]); wh++ {
					for _, sl := range []bool{false, true} {
						out = append(out, fuzzShape{req, in, em, wh, sl})
					}
				}
			}
		}
	}
	return out
}

// fuzzConfig writes one notifier per shape, as an operator would.
func fuzzConfig() string {
	var b strings.Builder
	b.WriteString("notifiers:\n")
	section := func(ch string, i int, keys ...string) {
		if i < 0 {
			return
		}
		if m := fuzzModes[ch][i]; m != "" {
			keys = append(keys, "default: "+m)
		}
		fmt.Fprintf(&b, "      %s: {%s}\n", ch, strings.Join(keys, ", "))
	}
	for _, s := range fuzzShapes() {
		fmt.Fprintf(&b, "  %s:\n    required: %t\n    channels:\n", s.key(), s.required)
		section("in_app", s.inApp, "title: t")
		section("email", s.email, "subject: s, text: t")
		section("webhook", s.webhook)
		if s.slack {
			b.WriteString("      slack: {webhook_url: 'https://hooks.slack.test/x', text: t}\n")
		}
	}
	return b.String()
}

// FuzzPreferenceRules checks preference resolution with arbitrary rule sets
// on the built-in channels: ValidateRule and Resolve never panic, and for
// rules that pass ValidateRule (the only ones the API stores) Resolve never
// answers a mode the channel cannot do, never turns a required notifier off
// unless its default is off, silences a muted optional notifier, and
// explains every off.
//
// shape's bits choose the notifier's channels and their defaults (see
// fuzzNotifier); rules is a "|"-separated list of "scope,channel,mode"
// triples; a triple with fewer parts leaves the rest empty.
func FuzzPreferenceRules(f *testing.F) {
	f.Add(uint32(0xffff_ffff), "comments", "*,*,off", false)
	f.Add(uint32(0x0000_000e), "comments", "category:comments,email,digest|notifier:fuzz.notifier,*,immediate", false)
	f.Add(uint32(0x0000_000f), "", "*,*,off|*,in_app,immediate", true)
	f.Add(uint32(0x0001_200e), "reports", "*,email,digest|*,*,digest|category:reports,webhook,off", false)
	f.Add(uint32(0x0000_0006), "x", "notifier:,*,off|category:,*,off|*,slack,off|*,*,later", true)
	f.Add(uint32(0x0000_0004), "", "*,*,digest", false)
	f.Add(uint32(0x0000_001f), "comments", "*,*,\x00|\xff,\xff,\xff", false)
	f.Add(uint32(0x0000_0018), "a", "*,slack,immediate|*,texter,off|*,webhook,digest", false)

	reg := builtin.MustRegistry()
	// Every shape is one notifier of one config, parsed and checked as the
	// daemon loads it.
	cfg, err := config.ParseWith("fuzz.yaml", []byte(fuzzConfig()), reg.Check)
	if err != nil {
		f.Fatal(err)
	}
	// fuzzNotifier picks the notifier of shape's bits (bit 0 required; bits
	// 1, 2, 3, 4: uses in_app, email, webhook, slack; bits 8, 12, 16 onwards:
	// the in_app, email and webhook defaults) and gives it category.
	fuzzNotifier := func(shape uint32, category string) *config.Notifier {
		pick := func(ch string, use, bits uint32) int {
			if shape&use == 0 {
				return -1
			}
			return int(bits % uint32(len(fuzzModes[ch])))
		}
		s := fuzzShape{
			required: shape&1 != 0,
			inApp:    pick("in_app", 2, shape>>8),
			email:    pick("email", 4, shape>>12),
			webhook:  pick("webhook", 8, shape>>16),
			slack:    shape&16 != 0,
		}
		n := *cfg.Notifiers[s.key()]
		n.Name, n.Category = "fuzz.notifier", category
		return &n
	}

	f.Fuzz(func(t *testing.T, shape uint32, category, rules string, muted bool) {
		n := fuzzNotifier(shape, category)
		var all, valid []notifytype.Rule
		for _, triple := range strings.Split(rules, "|") {
			parts := append(strings.SplitN(triple, ",", 3), "", "", "")
			r := notifytype.Rule{Scope: parts[0], Channel: parts[1], Mode: notifytype.Mode(parts[2])}
			all = append(all, r)
			if reg.ValidateRule(r) == nil {
				valid = append(valid, r)
				if p, ok := reg.Lookup(r.Channel); r.Channel != "*" && (!ok || !p.PerRecipient) {
					t.Fatalf("ValidateRule accepted %+v: not a per-recipient channel", r)
				}
			}
		}
		for _, ch := range append(reg.Names(), "texter") {
			// Whatever the rules, resolution does not panic.
			_ = reg.Resolve(n, ch, all, muted)
			_ = reg.DefaultMode(n, ch)

			res := reg.Resolve(n, ch, valid, muted)
			if (res.Mode == notifytype.ModeOff) != (res.Why != "") {
				t.Fatalf("%s: mode %q with why %q", ch, res.Mode, res.Why)
			}
			if _, ok := reg.Lookup(ch); !ok {
				if res.Mode != notifytype.ModeOff {
					t.Fatalf("unregistered channel %s resolves to %s", ch, res.Mode)
				}
				continue
			}
			if !slices.Contains(canDo[ch], res.Mode) {
				t.Fatalf("%s resolves to %q, which it cannot do (rules %v, notifier %+v)", ch, res.Mode, valid, n.Channels)
			}
			def := reg.DefaultMode(n, ch)
			if n.Required && res.Mode == notifytype.ModeOff && def != notifytype.ModeOff {
				t.Fatalf("required notifier turned off on %s (default %s) by rules %v", ch, def, valid)
			}
			if muted && !n.Required && res.Mode != notifytype.ModeOff {
				t.Fatalf("muted notifier still %s on %s", res.Mode, ch)
			}
			if len(valid) == 0 && !muted && res.Mode != def && !(def == notifytype.ModeDigest && ch != reg.Digest()) {
				t.Fatalf("no rules: %s resolves to %s, default is %s", ch, res.Mode, def)
			}
		}
	})
}
