package notifyd_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
)

// fuzzModes are the modes a config may give a channel as its default
// (config validation allows exactly these).
var fuzzModes = map[string][]string{
	"in_app":  {"", "immediate", "off"},
	"email":   {"", "immediate", "digest", "off"},
	"webhook": {"", "immediate", "off"},
}

// canDo lists what a channel can actually do (SPEC §2): in_app and webhook are
// immediate or off, only email digests.
var canDo = map[string][]notifyd.Mode{
	"in_app":  {notifyd.ModeImmediate, notifyd.ModeOff},
	"email":   {notifyd.ModeImmediate, notifyd.ModeDigest, notifyd.ModeOff},
	"webhook": {notifyd.ModeImmediate, notifyd.ModeOff},
	"slack":   {notifyd.ModeImmediate, notifyd.ModeOff},
}

// fuzzNotifier builds a notifier as config.Load would produce it, choosing
// which channels it uses, their defaults, its category and whether it is
// required from shape's bits.
func fuzzNotifier(shape uint32, category string) *config.Notifier {
	pick := func(ch string, bits uint32) string {
		m := fuzzModes[ch]
		return m[int(bits)%len(m)]
	}
	n := &config.Notifier{Name: "fuzz.notifier", Category: category, Required: shape&1 != 0}
	if shape&2 != 0 {
		n.Channels.InApp = &config.InAppTemplates{Default: pick("in_app", shape>>8)}
	}
	if shape&4 != 0 {
		d := pick("email", shape>>12)
		if d == "" {
			d = "immediate" // config fills in the email default
		}
		n.Channels.Email = &config.EmailTemplates{Default: d}
	}
	if shape&8 != 0 {
		n.Channels.Webhook = &config.WebhookTemplates{Default: pick("webhook", shape>>16)}
	}
	if shape&16 != 0 {
		n.Channels.Slack = &config.SlackTemplates{}
	}
	return n
}

// FuzzPreferenceRules checks preference resolution (SPEC §7) with arbitrary
// rule sets: Rule.Validate and Resolve never panic, and for rules that pass
// Validate (the only ones the API stores) Resolve never answers a mode the
// channel cannot do, never turns a required notifier off unless its default
// is off, silences a muted optional notifier, and explains every off.
//
// rules is a "|"-separated list of "scope,channel,mode" triples; a triple
// with fewer parts leaves the rest empty.
func FuzzPreferenceRules(f *testing.F) {
	f.Add(uint32(0xffff_ffff), "comments", "*,*,off", false)
	f.Add(uint32(0x0000_000e), "comments", "category:comments,email,digest|notifier:fuzz.notifier,*,immediate", false)
	f.Add(uint32(0x0000_000f), "", "*,*,off|*,in_app,immediate", true)
	f.Add(uint32(0x0001_200e), "reports", "*,email,digest|*,*,digest|category:reports,webhook,off", false)
	f.Add(uint32(0x0000_0006), "x", "notifier:,*,off|category:,*,off|*,slack,off|*,*,later", true)
	f.Add(uint32(0x0000_0004), "", "*,*,digest", false)
	f.Add(uint32(0x0000_001f), "comments", "*,*,\x00|\xff,\xff,\xff", false)
	f.Fuzz(func(t *testing.T, shape uint32, category, rules string, muted bool) {
		n := fuzzNotifier(shape, category)
		var all, valid []notifyd.Rule
		for _, triple := range strings.Split(rules, "|") {
			parts := append(strings.SplitN(triple, ",", 3), "", "", "")
			r := notifyd.Rule{Scope: parts[0], Channel: parts[1], Mode: notifyd.Mode(parts[2])}
			all = append(all, r)
			if r.Validate() == nil {
				valid = append(valid, r)
			}
		}
		for _, ch := range notifyd.Channels {
			// Whatever the rules, resolution does not panic.
			_ = notifyd.Resolve(n, ch, all, muted)
			_ = notifyd.DefaultMode(n, ch)

			res := notifyd.Resolve(n, ch, valid, muted)
			if !slices.Contains(canDo[ch], res.Mode) {
				t.Fatalf("%s resolves to %q, which it cannot do (rules %v, notifier %+v)", ch, res.Mode, valid, n.Channels)
			}
			if (res.Mode == notifyd.ModeOff) != (res.Why != "") {
				t.Fatalf("%s: mode %q with why %q", ch, res.Mode, res.Why)
			}
			def := notifyd.DefaultMode(n, ch)
			if n.Required && res.Mode == notifyd.ModeOff && def != notifyd.ModeOff {
				t.Fatalf("required notifier turned off on %s (default %s) by rules %v", ch, def, valid)
			}
			if muted && !n.Required && res.Mode != notifyd.ModeOff {
				t.Fatalf("muted notifier still %s on %s", res.Mode, ch)
			}
			if len(valid) == 0 && !muted && res.Mode != def && !(def == notifyd.ModeDigest && ch != "email") {
				t.Fatalf("no rules: %s resolves to %s, default is %s", ch, res.Mode, def)
			}
		}
	})
}
