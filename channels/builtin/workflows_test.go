package builtin_test

import (
	"strings"
	"testing"
	"time"
)

// workflowBase is a config whose notifier n uses the inbox, email and a
// bulk Slack channel; the cases add workflow keys.
const workflowBase = `channels:
  email: {from: a@example.test, smtp: {host: 127.0.0.1, port: 25}}
  slack: {}
notifiers:
  n:
    example: {task: T-1}
    channels:
      in_app: {title: "{{.task}}"}
      slack: {webhook_url: "https://hooks.slack.test/x", text: "x"}
      email:
        subject: s
        text: t
`

func TestWorkflowOptionErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, add, want string
	}{
		{"delay not a duration", "        delay: soon\n",
			`test.yaml:13: notifiers.n.channels.email.delay: invalid duration "soon" (want a Go duration such as 30s, 5m or 72h)`},
		{"delay not positive", "        delay: 0s\n",
			`test.yaml:13: notifiers.n.channels.email.delay: must be a positive duration, got 0s`},
		{"unknown unless", "        unless: clicked\n",
			`test.yaml:13: notifiers.n.channels.email.unless: unknown condition "clicked" (want read or seen)`},
		{"throttle limit", "        throttle: {limit: 0, per: 1h}\n",
			`test.yaml:13: notifiers.n.channels.email.throttle.limit: must be a positive integer, got 0`},
		{"throttle per", "        throttle:\n          limit: 3\n          per: -1m\n",
			`test.yaml:15: notifiers.n.channels.email.throttle.per: must be a positive duration, got -1m0s`},
		{"throttle unknown key", "        throttle: {limit: 3, per: 1h, burst: 2}\n",
			`test.yaml:13: notifiers.n.channels.email.throttle.burst: unknown key (want limit or per)`},
		{"throttle not a mapping", "        throttle: 3\n",
			`test.yaml:13: notifiers.n.channels.email.throttle: want a mapping {limit: <n>, per: <duration>}, got "3"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := parseErrors(t, workflowBase+tc.add)
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), tc.want)
			}
		})
	}
}

// What the registry knows decides where a workflow key may go: not on the
// inbox, `unless` and `throttle` not on a bulk-only channel, and `unless`
// only for a notifier that uses the inbox.
func TestWorkflowOptionsPerChannel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src, want string
	}{
		{"delay on the inbox", strings.Replace(workflowBase, `      in_app: {title: "{{.task}}"}`,
			"      in_app: {title: \"{{.task}}\", delay: 5m}", 1),
			`test.yaml:8: notifiers.n.channels.in_app.delay: in_app is the inbox, written at fan-out: delay applies to the other channels`},
		{"unless on a bulk channel", strings.Replace(workflowBase, `text: "x"}`, `text: "x", unless: read}`, 1),
			`test.yaml:9: notifiers.n.channels.slack.unless: slack sends one message to the whole audience: unless is per recipient`},
		{"unless without the inbox", strings.Replace(workflowBase, "      in_app: {title: \"{{.task}}\"}\n", "", 1) + "        unless: seen\n",
			`test.yaml:12: notifiers.n.channels.email.unless: unless seen reads the notification's inbox item, but notifier n does not use the inbox channel (in_app)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := parseErrors(t, tc.src)
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), tc.want)
			}
		})
	}
	// Every option at once, where it applies, is fine.
	c := mustParse(t, strings.Replace(workflowBase, `text: "x"}`, `text: "x", delay: 1m}`, 1)+
		"        delay: 30m\n        unless: read\n        throttle: {limit: 5, per: 1h}\n")
	nc := c.Notifiers["n"].Channels["email"]
	if nc.Delay.D() != 30*time.Minute || nc.Unless != "read" || nc.Throttle == nil || nc.Throttle.Limit != 5 || nc.Throttle.Per.D() != time.Hour {
		t.Fatalf("email section = %+v", nc)
	}
	if c.Notifiers["n"].Channels["slack"].Delay.D() != time.Minute {
		t.Fatal("bulk delay not read")
	}
}

func TestBatchOptionErrors(t *testing.T) {
	t.Parallel()
	base := strings.Replace(workflowBase, "    example: {task: T-1}\n", "    example: {task: T-1}\n    batch:\n", 1)
	for _, tc := range []struct {
		name, batch, want string
	}{
		{"no key", "      window: 1h\n",
			`test.yaml:7: notifiers.n.batch.key: is required: a template over the params naming what batches together, such as "{{.post_id}}"`},
		{"key does not parse", "      key: \"{{.task\"\n      window: 1h\n",
			`test.yaml:8: notifiers.n.batch.key: invalid template: line 1: unclosed action`},
		{"key does not render", "      key: \"{{.task.id}}\"\n      window: 1h\n",
			`test.yaml:8: notifiers.n.batch.key: template does not render with the example params: line 1:7: at <.task.id>: can't evaluate field id in type interface {}`},
		{"no window", "      key: \"{{.task}}\"\n",
			`test.yaml:7: notifiers.n.batch.window: must be a positive duration, got 0s`},
		{"negative max", "      key: \"{{.task}}\"\n      window: 1h\n      max: -1\n",
			`test.yaml:10: notifiers.n.batch.max: must be positive (or left out: only the window closes a batch), got -1`},
		{"unknown key", "      key: \"{{.task}}\"\n      window: 1h\n      size: 3\n",
			`test.yaml:10: notifiers.n.batch.size: unknown key (want key, window or max)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := strings.Replace(base, "    batch:\n", "    batch:\n"+tc.batch, 1)
			got := parseErrors(t, src)
			if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), tc.want)
			}
		})
	}
	// The channels' templates are checked as a batch's message renders:
	// .Count, .Actors and .Items are there.
	ok := strings.Replace(base, "    batch:\n", "    batch: {key: \"{{.task}}\", window: 10m, max: 50}\n", 1)
	ok = strings.Replace(ok, "        text: t\n", "        text: \"{{len .Items}} tasks from {{index .Actors 0}}, {{.Count}} in all\"\n", 1)
	c := mustParse(t, ok)
	if b := c.Notifiers["n"].Batch; b == nil || b.KeyTmpl == nil || b.Window.D() != 10*time.Minute || b.Max != 50 {
		t.Fatalf("batch = %+v", b)
	}
}
