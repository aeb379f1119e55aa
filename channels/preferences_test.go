package channels_test

import (
	"context"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// prefsConfig has the notifiers of the resolution table.
const prefsConfig = `
notifiers:
  # comment uses in_app (default immediate), email (default immediate) and
  # the per-recipient webhook (default off).
  comment.created:
    category: comments
    channels:
      in_app: {title: t}
      email: {subject: s, text: t}
      webhook: {}
  # weekly defaults to a digest email and keeps in_app off unless asked.
  report.weekly:
    category: reports
    channels:
      in_app: {title: t, default: off}
      email: {subject: s, text: t, default: digest}
  # security is required: it cannot be turned off or muted.
  security.login:
    category: security
    required: true
    channels:
      in_app: {title: t}
      email: {subject: s, text: t}
      webhook: {}
  # badge uses no email and has no category.
  badge.earned:
    channels:
      in_app: {title: t}
`

// parseWith parses src as "test.yaml" with reg's check, as the daemon
// loads its config.
func parseWith(t testing.TB, reg *channels.Registry, src string) *config.Config {
	t.Helper()
	c, err := config.ParseWith("test.yaml", []byte(src), reg.Check)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return c
}

func rules(triples ...string) []notifytype.Rule {
	var out []notifytype.Rule
	for i := 0; i+2 < len(triples); i += 3 {
		out = append(out, notifytype.Rule{Scope: triples[i], Channel: triples[i+1], Mode: notifytype.Mode(triples[i+2])})
	}
	return out
}

func TestResolve(t *testing.T) {
	t.Parallel()
	const (
		imm = notifytype.ModeImmediate
		dig = notifytype.ModeDigest
		off = notifytype.ModeOff
	)
	reg := builtin.MustRegistry()
	c := parseWith(t, reg, prefsConfig)
	var (
		commentNotifier   = c.Notifiers["comment.created"]
		weeklyNotifier    = c.Notifiers["report.weekly"]
		securityNotifier  = c.Notifiers["security.login"]
		inAppOnlyNotifier = c.Notifiers["badge.earned"]
	)
	tests := []struct {
		name     string
		notifier *config.Notifier
		channel  string
		rules    []notifytype.Rule
		muted    bool
		want     channels.Resolution
	}{
		// Defaults.
		{"default in_app", commentNotifier, "in_app", nil, false, channels.Resolution{Mode: imm}},
		{"default email", commentNotifier, "email", nil, false, channels.Resolution{Mode: imm}},
		{"default webhook is off", commentNotifier, "webhook", nil, false, channels.Resolution{Mode: off, Why: "default"}},
		{"default digest email", weeklyNotifier, "email", nil, false, channels.Resolution{Mode: dig}},
		{"default off in_app", weeklyNotifier, "in_app", nil, false, channels.Resolution{Mode: off, Why: "default"}},
		{"rules for others do not apply", commentNotifier, "email",
			rules("notifier:other", "*", "off", "category:other", "*", "off"), false, channels.Resolution{Mode: imm}},

		// Scope: notifier > category > *.
		{"* off", commentNotifier, "in_app", rules("*", "*", "off"), false, channels.Resolution{Mode: off, Why: "preference"}},
		{"category beats *", commentNotifier, "in_app",
			rules("*", "*", "off", "category:comments", "*", "immediate"), false, channels.Resolution{Mode: imm}},
		{"notifier beats category", commentNotifier, "email",
			rules("notifier:comment.created", "email", "digest", "category:comments", "email", "off"), false, channels.Resolution{Mode: dig}},
		{"notifier beats category, any rule order", commentNotifier, "email",
			rules("category:comments", "email", "off", "notifier:comment.created", "*", "immediate"), false, channels.Resolution{Mode: imm}},
		// Then channel: a channel rule beats * within the same scope...
		{"channel beats * in one scope", commentNotifier, "email",
			rules("*", "*", "off", "*", "email", "immediate"), false, channels.Resolution{Mode: imm}},
		{"* still applies to other channels", commentNotifier, "in_app",
			rules("*", "*", "off", "*", "email", "immediate"), false, channels.Resolution{Mode: off, Why: "preference"}},
		// ...but never a more specific scope.
		{"scope decides before channel", commentNotifier, "email",
			rules("category:comments", "email", "immediate", "notifier:comment.created", "*", "off"), false,
			channels.Resolution{Mode: off, Why: "preference"}},
		{"preference turns a default-off channel on", weeklyNotifier, "in_app",
			rules("*", "in_app", "immediate"), false, channels.Resolution{Mode: imm}},
		{"preference turns digest into immediate", weeklyNotifier, "email",
			rules("category:reports", "email", "immediate"), false, channels.Resolution{Mode: imm}},
		{"no category: category rules never match", inAppOnlyNotifier, "in_app",
			rules("category:", "*", "off", "*", "*", "off", "notifier:badge.earned", "in_app", "immediate"), false,
			channels.Resolution{Mode: imm}},

		// Required notifiers: off reads as the default; mutes do not apply.
		{"required ignores off", securityNotifier, "email", rules("*", "*", "off"), false, channels.Resolution{Mode: imm}},
		{"required ignores notifier off", securityNotifier, "in_app",
			rules("notifier:security.login", "in_app", "off"), false, channels.Resolution{Mode: imm}},
		{"required ignores mutes", securityNotifier, "in_app", nil, true, channels.Resolution{Mode: imm}},
		{"required keeps a digest choice", securityNotifier, "email", rules("*", "email", "digest"), false, channels.Resolution{Mode: dig}},
		{"required default off stays off", securityNotifier, "webhook", rules("*", "*", "off"), false,
			channels.Resolution{Mode: off, Why: "default"}},
		{"required can turn a default-off channel on", securityNotifier, "webhook", rules("*", "webhook", "immediate"), true,
			channels.Resolution{Mode: imm}},

		// Mutes silence every channel of a notifier that is not required.
		{"muted", commentNotifier, "in_app", nil, true, channels.Resolution{Mode: off, Why: "muted"}},
		{"muted beats an explicit immediate", commentNotifier, "email",
			rules("notifier:comment.created", "email", "immediate"), true, channels.Resolution{Mode: off, Why: "muted"}},
		// A mute only silences what would have been sent: a channel that is off
		// anyway keeps its own reason (a default-off channel writes no row).
		{"muted and preference off", commentNotifier, "email", rules("*", "*", "off"), true, channels.Resolution{Mode: off, Why: "preference"}},
		{"muted on a default-off channel", commentNotifier, "webhook", nil, true, channels.Resolution{Mode: off, Why: "default"}},

		// Digest degrades on channels that cannot digest.
		{"digest on in_app reads immediate", commentNotifier, "in_app", rules("*", "*", "digest"), false, channels.Resolution{Mode: imm}},
		{"digest on webhook reads immediate", commentNotifier, "webhook", rules("*", "*", "digest"), false, channels.Resolution{Mode: imm}},
		{"digest on email stays", commentNotifier, "email", rules("*", "*", "digest"), false, channels.Resolution{Mode: dig}},

		// A channel the notifier does not use is off whatever the rules say.
		{"unused channel", inAppOnlyNotifier, "email", rules("*", "email", "immediate"), false,
			channels.Resolution{Mode: off, Why: "default"}},
		{"unused channel, muted", inAppOnlyNotifier, "webhook", nil, true, channels.Resolution{Mode: off, Why: "default"}},
		{"unused channel, required", securityNotifier, "slack", rules("*", "*", "immediate"), false,
			channels.Resolution{Mode: off, Why: "default"}},
		{"unknown channel", commentNotifier, "texter", nil, false, channels.Resolution{Mode: off, Why: "default"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := reg.Resolve(tt.notifier, tt.channel, tt.rules, tt.muted); got != tt.want {
				t.Fatalf("Resolve(%s, %s, %v, muted=%v) = %+v, want %+v", tt.notifier.Name, tt.channel, tt.rules,
					tt.muted, got, tt.want)
			}
		})
	}
}

func TestDefaultMode(t *testing.T) {
	t.Parallel()
	reg := builtin.MustRegistry()
	c := parseWith(t, reg, prefsConfig+`
  slack.only:
    channels:
      slack: {webhook_url: 'https://hooks.slack.test/x', text: t}
`)
	tests := []struct {
		notifier, channel string
		want              notifytype.Mode
	}{
		// A section without `default` takes the channel's DefaultMode.
		{"comment.created", "in_app", notifytype.ModeImmediate},
		{"comment.created", "email", notifytype.ModeImmediate},
		{"comment.created", "webhook", notifytype.ModeOff},
		// A section's `default` wins.
		{"report.weekly", "in_app", notifytype.ModeOff},
		{"report.weekly", "email", notifytype.ModeDigest},
		{"slack.only", "slack", notifytype.ModeImmediate},
		// Off for a channel the notifier does not use, or one not registered.
		{"report.weekly", "webhook", notifytype.ModeOff},
		{"badge.earned", "email", notifytype.ModeOff},
		{"comment.created", "slack", notifytype.ModeOff},
		{"comment.created", "texter", notifytype.ModeOff},
	}
	for _, tt := range tests {
		if got := reg.DefaultMode(c.Notifiers[tt.notifier], tt.channel); got != tt.want {
			t.Errorf("DefaultMode(%s, %s) = %s, want %s", tt.notifier, tt.channel, got, tt.want)
		}
	}
	// A section for a channel the registry does not know is refused when
	// the config is checked, so a built notifier stands for it here.
	n := &config.Notifier{Name: "x", Channels: config.NotifierChannels{"texter": {Default: "immediate"}}}
	if got := reg.DefaultMode(n, "texter"); got != notifytype.ModeOff {
		t.Errorf("DefaultMode on an unregistered channel = %s, want off", got)
	}
}

func TestRuleValidate(t *testing.T) {
	t.Parallel()
	reg := builtin.MustRegistry()
	tests := []struct {
		rule notifytype.Rule
		err  string // "" when valid
	}{
		{notifytype.Rule{Scope: "*", Channel: "*", Mode: "off"}, ""},
		{notifytype.Rule{Scope: "category:comments", Channel: "in_app", Mode: "immediate"}, ""},
		{notifytype.Rule{Scope: "notifier:comment.created", Channel: "email", Mode: "digest"}, ""},
		{notifytype.Rule{Scope: "*", Channel: "*", Mode: "digest"}, ""},
		{notifytype.Rule{Scope: "*", Channel: "webhook", Mode: "immediate"}, ""},
		{notifytype.Rule{Scope: "", Channel: "*", Mode: "off"}, `scope "": want "*", "category:<name>" or "notifier:<name>"`},
		{notifytype.Rule{Scope: "category:", Channel: "*", Mode: "off"}, `scope "category:": want "*", "category:<name>" or "notifier:<name>"`},
		{notifytype.Rule{Scope: "notifier:", Channel: "*", Mode: "off"}, `scope "notifier:": want "*", "category:<name>" or "notifier:<name>"`},
		{notifytype.Rule{Scope: "topic:x", Channel: "*", Mode: "off"}, `scope "topic:x": want "*", "category:<name>" or "notifier:<name>"`},
		{notifytype.Rule{Scope: "notifier:" + string(make([]byte, 250)), Channel: "*", Mode: "off"}, "scope longer than 255 bytes"},
		// slack is bulk: a recipient has no mode on it.
		{notifytype.Rule{Scope: "*", Channel: "slack", Mode: "off"}, `channel "slack": want "*", "in_app", "email", "webhook", "sms", "web_push", "fcm", "apns", "telegram" or "whatsapp"`},
		{notifytype.Rule{Scope: "*", Channel: "", Mode: "off"}, `channel "": want "*", "in_app", "email", "webhook", "sms", "web_push", "fcm", "apns", "telegram" or "whatsapp"`},
		{notifytype.Rule{Scope: "*", Channel: "texter", Mode: "off"}, `channel "texter": want "*", "in_app", "email", "webhook", "sms", "web_push", "fcm", "apns", "telegram" or "whatsapp"`},
		{notifytype.Rule{Scope: "*", Channel: "in_app", Mode: "digest"}, "mode digest: channel in_app cannot digest"},
		{notifytype.Rule{Scope: "*", Channel: "webhook", Mode: "digest"}, "mode digest: channel webhook cannot digest"},
		{notifytype.Rule{Scope: "*", Channel: "*", Mode: ""}, `mode "": want immediate, digest or off`},
		{notifytype.Rule{Scope: "*", Channel: "*", Mode: "weekly"}, `mode "weekly": want immediate, digest or off`},
	}
	for _, tt := range tests {
		err := reg.ValidateRule(tt.rule)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("ValidateRule(%+v) = %v, want nil", tt.rule, err)
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("ValidateRule(%+v) = %v, want %s", tt.rule, err, tt.err)
		}
	}
}

// texter is a per-recipient channel of the application's own: what a program
// embedding notifyd registers next to the built-in channels.
type texter struct{ texts map[string]string }

func (*texter) Name() string { return "texter" }

func (s *texter) Addressable(notifier string, r channels.Recipient) error {
	if _, ok := s.texts[notifier]; !ok {
		return channels.Permanent(errNoText)
	}
	return nil
}

func (*texter) Send(context.Context, channels.Message) error { return nil }

var errNoText = errString("notifier has no texter text")

type errString string

func (e errString) Error() string { return string(e) }

// texterPlugin registers texter. Its notifiers' sections have a text; it needs
// no section of its own and is off unless a notifier or a rule turns it on.
var texterPlugin = channels.Plugin{
	Name:         "texter",
	PerRecipient: true,
	DefaultMode:  notifytype.ModeOff,
	Open: func(s *channels.Setup) (any, error) {
		ch := &texter{texts: map[string]string{}}
		for _, name := range s.NotifierNames() {
			var sec struct {
				Text string `yaml:"text"`
			}
			sc := s.Notifiers[name].Section
			if !s.Problems.Decode(sc, &sec) {
				continue
			}
			if sec.Text == "" {
				s.Problems.Add(sc, "text", "must be set")
			}
			ch.texts[name] = sec.Text
		}
		return ch, nil
	},
}

// TestCustomChannelRules: a registered per-recipient channel of one's own
// is a channel preference rules may name, resolves like the built-in ones,
// and cannot digest unless its plugin says so; a channel nobody registered
// is refused with the list of those that are.
func TestCustomChannelRules(t *testing.T) {
	t.Parallel()
	reg, err := builtin.Registry(texterPlugin)
	if err != nil {
		t.Fatal(err)
	}
	const want = `want "*", "in_app", "email", "webhook", "sms", "web_push", "fcm", "apns", "telegram", "whatsapp" or "texter"`
	tests := []struct {
		name string
		reg  *channels.Registry
		rule notifytype.Rule
		err  string
	}{
		{"custom channel off", reg, notifytype.Rule{Scope: "*", Channel: "texter", Mode: "off"}, ""},
		{"custom channel immediate", reg, notifytype.Rule{Scope: "notifier:otp.sent", Channel: "texter", Mode: "immediate"}, ""},
		{"custom channel cannot digest", reg, notifytype.Rule{Scope: "*", Channel: "texter", Mode: "digest"}, "mode digest: channel texter cannot digest"},
		{"built-in channel still valid", reg, notifytype.Rule{Scope: "*", Channel: "email", Mode: "digest"}, ""},
		{"* digest", reg, notifytype.Rule{Scope: "*", Channel: "*", Mode: "digest"}, ""},
		{"unregistered channel", reg, notifytype.Rule{Scope: "*", Channel: "pager", Mode: "off"}, `channel "pager": ` + want},
		{"bulk channel", reg, notifytype.Rule{Scope: "*", Channel: "slack", Mode: "off"}, `channel "slack": ` + want},
		{"custom channel not registered here", builtin.MustRegistry(), notifytype.Rule{Scope: "*", Channel: "texter", Mode: "off"},
			`channel "texter": want "*", "in_app", "email", "webhook", "sms", "web_push", "fcm", "apns", "telegram" or "whatsapp"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.reg.ValidateRule(tt.rule)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("ValidateRule(%+v) = %v, want nil", tt.rule, err)
			case tt.err != "" && (err == nil || err.Error() != tt.err):
				t.Errorf("ValidateRule(%+v) = %v, want %s", tt.rule, err, tt.err)
			}
		})
	}

	// Config and resolution know it too.
	c := parseWith(t, reg, `
notifiers:
  otp.sent:
    required: true
    channels:
      texter: {text: "Your code is {{.code}}", default: immediate}
  digest.ready:
    channels:
      texter: {text: "Digest ready"}
      in_app: {title: t}
`)
	otp, ready := c.Notifiers["otp.sent"], c.Notifiers["digest.ready"]
	resolutions := []struct {
		name     string
		notifier *config.Notifier
		rules    []notifytype.Rule
		muted    bool
		want     channels.Resolution
	}{
		{"notifier default", otp, nil, false, channels.Resolution{Mode: notifytype.ModeImmediate}},
		{"required ignores off", otp, rules("*", "texter", "off"), true, channels.Resolution{Mode: notifytype.ModeImmediate}},
		{"plugin default off", ready, nil, false, channels.Resolution{Mode: notifytype.ModeOff, Why: "default"}},
		{"rule turns it on", ready, rules("*", "texter", "immediate"), false, channels.Resolution{Mode: notifytype.ModeImmediate}},
		{"digest reads immediate", ready, rules("*", "*", "digest"), false, channels.Resolution{Mode: notifytype.ModeImmediate}},
		{"muted", ready, rules("*", "texter", "immediate"), true, channels.Resolution{Mode: notifytype.ModeOff, Why: "muted"}},
	}
	for _, tt := range resolutions {
		if got := reg.Resolve(tt.notifier, "texter", tt.rules, tt.muted); got != tt.want {
			t.Errorf("%s: Resolve(%s, texter, %v, %v) = %+v, want %+v", tt.name, tt.notifier.Name, tt.rules, tt.muted, got, tt.want)
		}
	}

	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	ch, ok := set.Channels["texter"].(*texter)
	if !ok || ch.texts["otp.sent"] != "Your code is {{.code}}" {
		t.Fatalf("texter channel = %#v", set.Channels["texter"])
	}
	if err := ch.Addressable("digest.ready", channels.Recipient{ID: "u"}); err != nil {
		t.Errorf("Addressable = %v", err)
	}

	// Its sections are checked with their lines, and the built-in registry
	// does not know it.
	_, err = config.ParseWith("test.yaml", []byte("notifiers:\n  n:\n    channels:\n      texter: {txt: x}\n"), reg.Check)
	if want := "test.yaml:4: notifiers.n.channels.texter.txt: unknown key (want text)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("texter section with a typo: %v, want %s", err, want)
	}
	_, err = config.ParseWith("test.yaml", []byte("notifiers:\n  n:\n    channels:\n      texter: {text: x}\n"), builtin.MustRegistry().Check)
	if want := `test.yaml:4: notifiers.n.channels.texter: unknown channel "texter" (registered: in_app, email, webhook, slack, sms, web_push, fcm, apns, discord, teams, telegram, whatsapp)`; err == nil || err.Error() != want {
		t.Errorf("texter without its plugin: %v, want %s", err, want)
	}
}

// TestResolveTenant: the two tenant layers. A recipient's rule scoped to the
// tenant beats their global rule, which beats the tenant's default rules,
// which beat the notifier's default; a layer with no rule that applies
// leaves the decision to the next; required still wins.
func TestResolveTenant(t *testing.T) {
	t.Parallel()
	const (
		imm = notifytype.ModeImmediate
		dig = notifytype.ModeDigest
		off = notifytype.ModeOff
	)
	reg := builtin.MustRegistry()
	c := parseWith(t, reg, prefsConfig)
	comment, weekly, security := c.Notifiers["comment.created"], c.Notifiers["report.weekly"], c.Notifiers["security.login"]
	scoped := func(triples ...string) []notifytype.Rule {
		rs := rules(triples...)
		for i := range rs {
			rs[i].Tenant = "acme"
		}
		return rs
	}
	both := func(a, b []notifytype.Rule) []notifytype.Rule { return append(append([]notifytype.Rule{}, a...), b...) }
	tests := []struct {
		name     string
		notifier *config.Notifier
		channel  string
		rules    []notifytype.Rule
		defaults []notifytype.Rule
		want     channels.Resolution
	}{
		{"notifier default", comment, "email", nil, nil, channels.Resolution{Mode: imm}},
		{"tenant default beats notifier default", comment, "email", nil, rules("*", "email", "off"),
			channels.Resolution{Mode: off, Why: "tenant"}},
		{"tenant default turns on what the notifier leaves off", weekly, "in_app", nil, rules("category:reports", "*", "immediate"),
			channels.Resolution{Mode: imm}},
		{"a tenant default that does not apply", comment, "email", nil, rules("notifier:other", "*", "off"),
			channels.Resolution{Mode: imm}},
		{"global rule beats tenant default, however specific", comment, "email", rules("*", "*", "digest"),
			rules("notifier:comment.created", "email", "off"), channels.Resolution{Mode: dig}},
		{"scoped rule beats global rule, however specific", comment, "email",
			both(rules("notifier:comment.created", "email", "off"), scoped("*", "*", "immediate")), nil,
			channels.Resolution{Mode: imm}},
		{"scoped rule beats tenant default", comment, "email", scoped("*", "email", "digest"), rules("*", "*", "off"),
			channels.Resolution{Mode: dig}},
		{"within a layer the most specific wins", comment, "email",
			scoped("*", "*", "off", "notifier:comment.created", "email", "digest"), nil, channels.Resolution{Mode: dig}},
		{"scoped off", comment, "in_app", both(rules("*", "*", "immediate"), scoped("*", "in_app", "off")), nil,
			channels.Resolution{Mode: off, Why: "preference"}},
		{"required ignores a tenant default off", security, "email", nil, rules("*", "*", "off"),
			channels.Resolution{Mode: imm}},
		{"required ignores a scoped off", security, "email", scoped("*", "*", "off"), nil, channels.Resolution{Mode: imm}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := reg.ResolveTenant(tt.notifier, tt.channel, tt.rules, tt.defaults, false)
			if got != tt.want {
				t.Fatalf("ResolveTenant = %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := reg.ResolveTenant(comment, "email", nil, rules("*", "*", "immediate"), true); got.Mode != off || got.Why != "muted" {
		t.Fatalf("a mute silences a tenant default: %+v", got)
	}
}

// Templates may name the tenant's fields (.Tenant.Name,
// .Tenant.Branding.LogoURL): the check renders them with an example tenant
// and reports a misspelt one like a misspelt param.
func TestTemplatesSeeTheTenant(t *testing.T) {
	t.Parallel()
	reg := builtin.MustRegistry()
	parseWith(t, reg, `
notifiers:
  invoice.paid:
    params: {type: object, properties: {n: {type: string}}}
    channels:
      in_app: {title: "{{.Tenant.Name}} {{.Tenant.Branding.LogoURL}} {{.n}}"}
`)
	_, err := config.ParseWith("test.yaml", []byte(`
notifiers:
  invoice.paid:
    params: {type: object, properties: {n: {type: string}}}
    channels:
      in_app: {title: "{{.Tenant.Nmae}}"}
`), reg.Check)
	if err == nil || !strings.Contains(err.Error(), "Nmae") {
		t.Fatalf("ParseWith of .Tenant.Nmae = %v, want an error naming it", err)
	}
}
