package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/notifyd/notifyd/templates"
)

// ConditionTrue is what a channel's `if` template must render for the
// channel to be used; ConditionFalse is the last_error of the deliveries it
// leaves out.
const (
	ConditionTrue  = "true"
	ConditionFalse = "condition false"
)

// placeholderRE finds $1, $2… in an audience query. String literals and
// comments are not told apart: a "$3" inside one only makes the check
// stricter, and `notifyd check -db` prepares the query for the real answer.
var placeholderRE = regexp.MustCompile(`\$([0-9]+)`)

// validateAudience checks the notifier's audience key: a query, args that
// name params, as many args as the query's highest $n, and a positive
// audience_timeout. The query is kept trimmed, without a trailing semicolon:
// the fan-out runs it as a subquery.
func (n *Notifier) validateAudience(el *errorList, path string) {
	if n.AudienceTimeout <= 0 {
		el.add(join(path, "audience_timeout"), "must be a positive duration, got %s", n.AudienceTimeout)
	}
	a := n.Audience
	if a == nil {
		return
	}
	path = join(path, "audience")
	if el.failed[path] {
		return // not a mapping: reported already
	}
	a.Query = strings.TrimRight(strings.TrimSpace(a.Query), "; \t\r\n")
	if a.Query == "" {
		el.add(join(path, "query"), "is required: a SELECT returning the column id (and optionally reason), "+
			"such as \"SELECT user_id AS id FROM watchers WHERE ticket_id = $1\"")
		return
	}
	props, _ := n.Params["properties"].(map[string]any)
	for i, name := range a.Args {
		argPath := fmt.Sprintf("%s.args[%d]", path, i)
		switch {
		case name == "":
			el.add(argPath, "must name a param")
		case props != nil && props[name] == nil:
			el.add(argPath, "%q is not a property of params (want %s)", name, oneOf(sortedKeys(props)))
		}
	}
	highest := 0
	for _, m := range placeholderRE.FindAllStringSubmatch(a.Query, -1) {
		if k, err := strconv.Atoi(m[1]); err == nil && k > highest {
			highest = k
		}
	}
	if highest > len(a.Args) {
		el.add(join(path, "args"), "the query uses $%d but args names %d param(s): list one param per $n, in order",
			highest, len(a.Args))
	}
}

// validateConditions parses every channel's `if` template, checks the
// fields it names against the params schema, and renders it with the
// example params: it must render (to anything: "false" is a valid outcome).
func (n *Notifier) validateConditions(el *errorList, path string) {
	for _, name := range sortedKeys(n.Channels) {
		nc := n.Channels[name]
		if nc == nil || nc.If == "" {
			continue
		}
		p := join(join(join(path, "channels"), name), "if")
		nc.IfTmpl = textTmpl(el, p, nc.If)
		if nc.IfTmpl != nil {
			checkFields(el, p, nc.IfTmpl, n)
			renderCheck(el, p, nc.IfTmpl, templates.Params(n.example))
		}
	}
}

// Condition renders the `if` of nf's channel with params and reports
// whether the channel is used: true without a condition, or when it
// renders exactly "true" (spaces around it ignored). A condition that does
// not render is an error: the caller rejects the notification.
func (n *Notifier) Condition(channel string, params map[string]any) (bool, error) {
	nc := n.Channels[channel]
	if nc == nil || nc.IfTmpl == nil {
		return true, nil
	}
	out, err := templates.RenderText(nc.IfTmpl, params)
	if err != nil {
		return false, fmt.Errorf("channels.%s.if does not render: %w", channel, err)
	}
	return strings.TrimSpace(out) == ConditionTrue, nil
}

// Line returns the line of the file where key path (such as
// "notifiers.ticket.audience.query") was written, or of its nearest
// ancestor; 0 when neither was (a Config built in code).
func (c *Config) Line(path string) int {
	l := &errorList{lines: c.lines}
	return l.line(path)
}
