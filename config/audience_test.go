package config

import (
	"slices"
	"testing"
	"time"
)

func TestAudienceAndConditionsParse(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
notifiers:
  ticket.updated:
    params:
      type: object
      required: [ticket_id, amount]
      properties: {ticket_id: {type: integer}, amount: {type: number}}
    audience:
      query: |
        SELECT user_id AS id, 'watching' AS reason FROM watchers WHERE ticket_id = $1;
      args: [ticket_id]
    audience_timeout: 5s
    channels:
      in_app: {title: "Ticket {{.ticket_id}}"}
      email: {subject: "s", text: "t", if: "{{gt .amount 1000.0}}"}
  plain:
    channels:
      in_app: {title: "x"}
`)
	nf := c.Notifiers["ticket.updated"]
	if nf.Audience == nil || nf.Audience.Query != "SELECT user_id AS id, 'watching' AS reason FROM watchers WHERE ticket_id = $1" ||
		!slices.Equal(nf.Audience.Args, []string{"ticket_id"}) {
		t.Fatalf("audience = %+v", nf.Audience)
	}
	if nf.AudienceTimeout.D() != 5*time.Second {
		t.Fatalf("audience_timeout = %s", nf.AudienceTimeout)
	}
	if got := c.Notifiers["plain"].AudienceTimeout.D(); got != 30*time.Second {
		t.Fatalf("default audience_timeout = %s, want 30s", got)
	}
	if c.Notifiers["plain"].Audience != nil {
		t.Fatal("a notifier without audience has one")
	}
	if l := c.Line("notifiers.ticket.updated.audience.query"); l != 9 {
		t.Fatalf("line of audience.query = %d, want 9", l)
	}
	for _, tc := range []struct {
		amount float64
		want   bool
	}{{1000, false}, {1000.5, true}} {
		got, err := nf.Condition("email", map[string]any{"ticket_id": 1.0, "amount": tc.amount})
		if err != nil || got != tc.want {
			t.Errorf("condition at %v = %v, %v; want %v", tc.amount, got, err, tc.want)
		}
	}
	if ok, err := nf.Condition("in_app", map[string]any{}); !ok || err != nil {
		t.Errorf("a channel without if = %v, %v; want used", ok, err)
	}
	if _, ok := nf.Channels["email"].Section.node, true; !ok || nf.Channels["email"].Section.Empty() {
		t.Fatal("the email section lost its keys")
	}
}

func TestAudienceAndConditionErrors(t *testing.T) {
	t.Parallel()
	const head = "notifiers:\n  n:\n    params: {type: object, properties: {ticket_id: {type: integer}}}\n"
	tests := []struct {
		name, src, want string
	}{
		{"audience not a mapping", head + "    audience: SELECT 1\n",
			`4: notifiers.n.audience: want a mapping, got "SELECT 1"`},
		{"unknown audience key", head + "    audience: {query: SELECT 1 AS id, argz: []}\n",
			`4: notifiers.n.audience.argz: unknown key (want query or args)`},
		{"no query", head + "    audience:\n      args: [ticket_id]\n",
			`4: notifiers.n.audience.query: is required: a SELECT returning the column id (and optionally reason), such as "SELECT user_id AS id FROM watchers WHERE ticket_id = $1"`},
		{"arg not a param", head + "    audience:\n      query: SELECT user_id AS id FROM w WHERE t = $1\n      args: [ticket]\n",
			`6: notifiers.n.audience.args[0]: "ticket" is not a property of params (want ticket_id)`},
		{"too few args", head + "    audience:\n      query: SELECT user_id AS id FROM w WHERE t = $1 AND u = $2\n      args: [ticket_id]\n",
			`6: notifiers.n.audience.args: the query uses $2 but args names 1 param(s): list one param per $n, in order`},
		{"timeout", head + "    audience: {query: SELECT 1 AS id}\n    audience_timeout: 0s\n",
			`5: notifiers.n.audience_timeout: must be a positive duration, got 0s`},
		{"if names an undeclared param", head + "    channels:\n      in_app:\n        title: x\n        if: \"{{gt .ticket 1.0}}\"\n",
			`7: notifiers.n.channels.in_app.if: line 1: {{.ticket}}: the params schema declares no field ticket (declared: ticket_id)`},
		{"if does not parse", head + "    channels:\n      in_app:\n        title: x\n        if: \"{{gt .ticket_id\"\n",
			`7: notifiers.n.channels.in_app.if: invalid template: line 1: unclosed action`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := parseErrors(t, tc.src, noEnv)
			if len(got) != 1 || got[0] != "test.yaml:"+tc.want {
				t.Fatalf("errors:\n%q\nwant:\n%q", got, "test.yaml:"+tc.want)
			}
		})
	}
}
