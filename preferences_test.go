package notifyd_test

import (
	"testing"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
)

// Notifiers for the resolution table, built directly: what config.Load would
// produce for them.
var (
	// comment uses in_app (default immediate), email (default immediate) and
	// the per-recipient webhook (default off).
	commentNotifier = &config.Notifier{Name: "comment.created", Category: "comments",
		Channels: config.NotifierChannels{InApp: &config.InAppTemplates{}, Email: &config.EmailTemplates{},
			Webhook: &config.WebhookTemplates{}}}
	// weekly defaults to a digest email and keeps in_app off unless asked.
	weeklyNotifier = &config.Notifier{Name: "report.weekly", Category: "reports",
		Channels: config.NotifierChannels{InApp: &config.InAppTemplates{Default: "off"},
			Email: &config.EmailTemplates{Default: "digest"}}}
	// security is required: it cannot be turned off or muted.
	securityNotifier = &config.Notifier{Name: "security.login", Category: "security", Required: true,
		Channels: config.NotifierChannels{InApp: &config.InAppTemplates{}, Email: &config.EmailTemplates{},
			Webhook: &config.WebhookTemplates{}}}
	// inAppOnly uses no email and has no category.
	inAppOnlyNotifier = &config.Notifier{Name: "badge.earned",
		Channels: config.NotifierChannels{InApp: &config.InAppTemplates{}}}
)

func rules(triples ...string) []notifyd.Rule {
	var out []notifyd.Rule
	for i := 0; i+2 < len(triples); i += 3 {
		out = append(out, notifyd.Rule{Scope: triples[i], Channel: triples[i+1], Mode: notifyd.Mode(triples[i+2])})
	}
	return out
}

func TestResolve(t *testing.T) {
	t.Parallel()
	const (
		imm = notifyd.ModeImmediate
		dig = notifyd.ModeDigest
		off = notifyd.ModeOff
	)
	tests := []struct {
		name     string
		notifier *config.Notifier
		channel  string
		rules    []notifyd.Rule
		muted    bool
		want     notifyd.Resolution
	}{
		// Defaults.
		{"default in_app", commentNotifier, "in_app", nil, false, notifyd.Resolution{Mode: imm}},
		{"default email", commentNotifier, "email", nil, false, notifyd.Resolution{Mode: imm}},
		{"default webhook is off", commentNotifier, "webhook", nil, false, notifyd.Resolution{Mode: off, Why: "default"}},
		{"default digest email", weeklyNotifier, "email", nil, false, notifyd.Resolution{Mode: dig}},
		{"default off in_app", weeklyNotifier, "in_app", nil, false, notifyd.Resolution{Mode: off, Why: "default"}},
		{"rules for others do not apply", commentNotifier, "email",
			rules("notifier:other", "*", "off", "category:other", "*", "off"), false, notifyd.Resolution{Mode: imm}},

		// Scope: notifier > category > *.
		{"* off", commentNotifier, "in_app", rules("*", "*", "off"), false, notifyd.Resolution{Mode: off, Why: "preference"}},
		{"category beats *", commentNotifier, "in_app",
			rules("*", "*", "off", "category:comments", "*", "immediate"), false, notifyd.Resolution{Mode: imm}},
		{"notifier beats category", commentNotifier, "email",
			rules("notifier:comment.created", "email", "digest", "category:comments", "email", "off"), false, notifyd.Resolution{Mode: dig}},
		{"notifier beats category, any rule order", commentNotifier, "email",
			rules("category:comments", "email", "off", "notifier:comment.created", "*", "immediate"), false, notifyd.Resolution{Mode: imm}},
		// Then channel: a channel rule beats * within the same scope...
		{"channel beats * in one scope", commentNotifier, "email",
			rules("*", "*", "off", "*", "email", "immediate"), false, notifyd.Resolution{Mode: imm}},
		{"* still applies to other channels", commentNotifier, "in_app",
			rules("*", "*", "off", "*", "email", "immediate"), false, notifyd.Resolution{Mode: off, Why: "preference"}},
		// ...but never a more specific scope.
		{"scope decides before channel", commentNotifier, "email",
			rules("category:comments", "email", "immediate", "notifier:comment.created", "*", "off"), false,
			notifyd.Resolution{Mode: off, Why: "preference"}},
		{"preference turns a default-off channel on", weeklyNotifier, "in_app",
			rules("*", "in_app", "immediate"), false, notifyd.Resolution{Mode: imm}},
		{"preference turns digest into immediate", weeklyNotifier, "email",
			rules("category:reports", "email", "immediate"), false, notifyd.Resolution{Mode: imm}},
		{"no category: category rules never match", inAppOnlyNotifier, "in_app",
			rules("category:", "*", "off", "*", "*", "off", "notifier:badge.earned", "in_app", "immediate"), false,
			notifyd.Resolution{Mode: imm}},

		// Required notifiers: off reads as the default; mutes do not apply.
		{"required ignores off", securityNotifier, "email", rules("*", "*", "off"), false, notifyd.Resolution{Mode: imm}},
		{"required ignores notifier off", securityNotifier, "in_app",
			rules("notifier:security.login", "in_app", "off"), false, notifyd.Resolution{Mode: imm}},
		{"required ignores mutes", securityNotifier, "in_app", nil, true, notifyd.Resolution{Mode: imm}},
		{"required keeps a digest choice", securityNotifier, "email", rules("*", "email", "digest"), false, notifyd.Resolution{Mode: dig}},
		{"required default off stays off", securityNotifier, "webhook", rules("*", "*", "off"), false,
			notifyd.Resolution{Mode: off, Why: "default"}},
		{"required can turn a default-off channel on", securityNotifier, "webhook", rules("*", "webhook", "immediate"), true,
			notifyd.Resolution{Mode: imm}},

		// Mutes silence every channel of a notifier that is not required.
		{"muted", commentNotifier, "in_app", nil, true, notifyd.Resolution{Mode: off, Why: "muted"}},
		{"muted beats an explicit immediate", commentNotifier, "email",
			rules("notifier:comment.created", "email", "immediate"), true, notifyd.Resolution{Mode: off, Why: "muted"}},
		// A mute only silences what would have been sent: a channel that is off
		// anyway keeps its own reason (a default-off channel writes no row).
		{"muted and preference off", commentNotifier, "email", rules("*", "*", "off"), true, notifyd.Resolution{Mode: off, Why: "preference"}},
		{"muted on a default-off channel", commentNotifier, "webhook", nil, true, notifyd.Resolution{Mode: off, Why: "default"}},

		// Digest degrades on channels that cannot digest.
		{"digest on in_app reads immediate", commentNotifier, "in_app", rules("*", "*", "digest"), false, notifyd.Resolution{Mode: imm}},
		{"digest on webhook reads immediate", commentNotifier, "webhook", rules("*", "*", "digest"), false, notifyd.Resolution{Mode: imm}},
		{"digest on email stays", commentNotifier, "email", rules("*", "*", "digest"), false, notifyd.Resolution{Mode: dig}},

		// A channel the notifier does not use is off whatever the rules say.
		{"unused channel", inAppOnlyNotifier, "email", rules("*", "email", "immediate"), false,
			notifyd.Resolution{Mode: off, Why: "default"}},
		{"unused channel, muted", inAppOnlyNotifier, "webhook", nil, true, notifyd.Resolution{Mode: off, Why: "default"}},
		{"unused channel, required", securityNotifier, "slack", rules("*", "*", "immediate"), false,
			notifyd.Resolution{Mode: off, Why: "default"}},
		{"unknown channel", commentNotifier, "sms", nil, false, notifyd.Resolution{Mode: off, Why: "default"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := notifyd.Resolve(tt.notifier, tt.channel, tt.rules, tt.muted); got != tt.want {
				t.Fatalf("Resolve(%s, %s, %v, muted=%v) = %+v, want %+v", tt.notifier.Name, tt.channel, tt.rules,
					tt.muted, got, tt.want)
			}
		})
	}
}

func TestRuleValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rule notifyd.Rule
		ok   bool
	}{
		{notifyd.Rule{Scope: "*", Channel: "*", Mode: "off"}, true},
		{notifyd.Rule{Scope: "category:comments", Channel: "in_app", Mode: "immediate"}, true},
		{notifyd.Rule{Scope: "notifier:comment.created", Channel: "email", Mode: "digest"}, true},
		{notifyd.Rule{Scope: "*", Channel: "*", Mode: "digest"}, true},
		{notifyd.Rule{Scope: "*", Channel: "webhook", Mode: "immediate"}, true},
		{notifyd.Rule{Scope: "", Channel: "*", Mode: "off"}, false},
		{notifyd.Rule{Scope: "category:", Channel: "*", Mode: "off"}, false},
		{notifyd.Rule{Scope: "notifier:", Channel: "*", Mode: "off"}, false},
		{notifyd.Rule{Scope: "topic:x", Channel: "*", Mode: "off"}, false},
		{notifyd.Rule{Scope: "notifier:" + string(make([]byte, 250)), Channel: "*", Mode: "off"}, false},
		{notifyd.Rule{Scope: "*", Channel: "slack", Mode: "off"}, false},
		{notifyd.Rule{Scope: "*", Channel: "", Mode: "off"}, false},
		{notifyd.Rule{Scope: "*", Channel: "in_app", Mode: "digest"}, false},
		{notifyd.Rule{Scope: "*", Channel: "webhook", Mode: "digest"}, false},
		{notifyd.Rule{Scope: "*", Channel: "*", Mode: ""}, false},
		{notifyd.Rule{Scope: "*", Channel: "*", Mode: "weekly"}, false},
	}
	for _, tt := range tests {
		if err := tt.rule.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", tt.rule, err, tt.ok)
		}
	}
}
